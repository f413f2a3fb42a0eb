// comfy-airlock's sidebar panel: every isolated pack, live, as GET /airlock/workers reports it
// (its worker's pid, generation, Python, torch and numpy, memory, calls, last error; or why the
// pack is not loaded). Polls only while the panel is shown.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const POLL_MS = 1500;
const COLUMNS = [
  ["pack", "pack"],
  ["state", "state"],
  ["pid", "pid"],
  ["generation", "gen"],
  ["python", "Python"],
  ["torch", "torch"],
  ["numpy", "numpy"],
  ["rss_mib", "RSS MiB"],
  ["calls", "calls"],
  ["errors", "errors"],
];

function cell(tag, text, attrs = {}) {
  const el = document.createElement(tag);
  el.textContent = text == null ? "" : String(text);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  el.style.padding = "2px 6px";
  el.style.textAlign = "left";
  return el;
}

function renderRows(table, rows) {
  table.replaceChildren();
  const head = document.createElement("tr");
  for (const [, title] of COLUMNS) head.appendChild(cell("th", title));
  table.appendChild(head);
  for (const row of rows) {
    const tr = document.createElement("tr");
    tr.setAttribute("data-pack", row.pack);
    for (const [key] of COLUMNS) tr.appendChild(cell("td", row[key], { "data-key": key }));
    table.appendChild(tr);
    const why = row.error || row.last_error || row.device_mismatch;
    if (why) {
      const note = document.createElement("tr");
      const td = cell("td", why, { colspan: String(COLUMNS.length), "data-key": "error" });
      td.style.color = "var(--error-text, #f66)";
      note.appendChild(td);
      note.setAttribute("data-pack-error", row.pack);
      table.appendChild(note);
    }
  }
}

function mount(el) {
  el.replaceChildren();
  const root = document.createElement("div");
  root.className = "comfy-airlock-panel";
  root.style.padding = "8px";
  root.style.overflow = "auto";
  const title = cell("h3", "Isolated packs (comfy-airlock)");
  const status = cell("div", "loading…", { "data-key": "status" });
  const table = document.createElement("table");
  table.style.borderCollapse = "collapse";
  table.style.fontSize = "12px";
  root.append(title, status, table);
  el.appendChild(root);
  let stopped = false;
  async function poll() {
    if (stopped) return;
    if (!root.isConnected) return; // the panel was closed and its element dropped
    if (root.offsetParent === null) {
      timer = setTimeout(poll, POLL_MS); // hidden: ask nothing until it shows again
      return;
    }
    try {
      const res = await api.fetchApi("/airlock/workers");
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const rows = await res.json();
      renderRows(table, rows);
      status.textContent = `${rows.length} pack(s), updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      status.textContent = `cannot read /airlock/workers: ${e.message}`;
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  }
  let timer = setTimeout(poll, 0);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

let unmount = null;

app.registerExtension({
  name: "comfy-airlock.panel",
  setup() {
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
