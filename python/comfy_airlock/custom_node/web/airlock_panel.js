// comfy-airlock's sidebar tab in ComfyUI: every isolated pack and why any is not loaded, each
// worker (state, pid, generation, Python/torch/numpy, RSS, calls, errors, busy time), the models
// the workers hold and ComfyUI's own list of loaded models, RAM and device memory over the last
// minutes, the last errors with the workers' tracebacks, and actions to restart a worker or
// release its models. Live over ComfyUI's websocket (airlock_panel/store.js); the host side is
// comfy_airlock/host/panel (docs/adr/0026-panel-data-flow.md).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { PanelStore } from "./airlock_panel/store.js";
import { PanelView } from "./airlock_panel/view.js";

const store = new PanelStore(api);

async function act(view, action, pack, button) {
  button.disabled = true;
  view.showResult(`${action} ${pack}…`, false);
  try {
    const res = await api.fetchApi(`/airlock/workers/${encodeURIComponent(pack)}/${action}`, {
      method: "POST",
    });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) {
      view.showResult(body.error || `${action} ${pack}: HTTP ${res.status}`, true);
    } else if (action === "restart") {
      view.showResult(`${pack}: worker restarted, generation ${body.generation}`, false);
    } else {
      const freed = body.released.map((r) => r.model).join(", ") || "nothing to release";
      const busy = body.in_use.length ? ` (in use, kept: ${body.in_use.join(", ")})` : "";
      view.showResult(`${pack}: released ${freed}${busy}`, false);
    }
  } catch (e) {
    view.showResult(`${action} ${pack}: ${e.message}`, true);
  } finally {
    button.disabled = false;
  }
}

function mount(el) {
  el.replaceChildren();
  const root = document.createElement("div");
  root.className = "comfy-airlock-panel";
  Object.assign(root.style, { padding: "8px", overflow: "auto", height: "100%" });
  el.appendChild(root);
  const view = new PanelView(root, store, (action, pack, button) =>
    act(view, action, pack, button)
  );
  const unsubscribe = store.subscribe((kind) => view.render(kind));
  view.render("all");
  if (!store.loaded) store.load(); // the one read; events keep it current after
  return unsubscribe;
}

let unmount = null;

app.registerExtension({
  name: "comfy-airlock.panel",
  setup() {
    store.listen(); // from the start, so a tab opened later has every change since
    app.extensionManager.registerSidebarTab({
      id: "comfy-airlock",
      icon: "pi pi-box",
      title: "Airlock",
      tooltip: "Isolated packs (comfy-airlock)",
      type: "custom",
      render: (el) => {
        if (unmount) unmount();
        unmount = mount(el);
      },
      destroy: () => {
        if (unmount) unmount();
        unmount = null;
      },
    });
  },
});

// For the browser test and the curious: the panel's state (window.comfyAirlockPanel.events).
window.comfyAirlockPanel = store;
