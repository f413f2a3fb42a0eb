// A "show text" extension in the shape of real packs': it hooks its node type before the frontend
// registers it, shows the node's UI output ({"ui": {"text": [...]}}) in a read-only text widget
// when the node has run, and adds a widget to every new node of its type. It imports the
// frontend's modules by relative URL, a sibling module, and loads a stylesheet by URL.
import { app } from "../../../scripts/app.js";
import { ComfyWidgets } from "../../../scripts/widgets.js";
import { PACK, addStylesheet, decorate } from "./lib/util.js";

const NODE = `${PACK}.ShowText`;
window.__webPack ??= {};
const seen = (window.__webPack[PACK] = { setup: false, defs: [], created: 0, css: null });

addStylesheet("css/web_pack.css", (ok) => {
  seen.css = ok;
});

function show(node, text) {
  let widget = node.widgets?.find((w) => w.name === "shown");
  if (!widget) {
    widget = ComfyWidgets.STRING(node, "shown", ["STRING", { multiline: true }], app).widget;
    if (widget.inputEl) widget.inputEl.readOnly = true;
  }
  widget.value = decorate(text);
  app.graph.setDirtyCanvas(true, false);
}

app.registerExtension({
  name: `webpack.${PACK}`,
  async setup() {
    seen.setup = true;
  },
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (nodeData.name !== NODE) return;
    seen.defs.push(nodeData.name);
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      onExecuted?.apply(this, arguments);
      show(this, message?.text?.at(-1));
    };
  },
  nodeCreated(node) {
    if (node.comfyClass !== NODE) return;
    seen.created += 1;
    node.addWidget("button", "web-pack button", null, () => {}, { serialize: false });
  },
});
