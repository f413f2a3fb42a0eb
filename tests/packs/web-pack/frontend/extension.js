// The folder pyproject.toml names ([tool.comfy] web), served as /extensions/<project name>/.
import { app } from "../../scripts/app.js";

const PROJECT = decodeURIComponent(new URL(import.meta.url).pathname.split("/")[2]);

app.registerExtension({
  name: `webpack-project.${PROJECT}`,
  setup() {
    window.__webPackProjects ??= [];
    window.__webPackProjects.push(PROJECT);
  },
});
