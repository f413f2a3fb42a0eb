// The panel's DOM, laid out for a narrow sidebar: one card per pack (its worker's figures in a
// grid that wraps, its actions, the models it holds), ComfyUI's own list of loaded models,
// memory charts, and the errors with the workers' tracebacks. Rebuilt from the store on a
// status change; a memory sample only redraws the charts and the RSS figures.

import { memoryCharts } from "./chart.js";
import { bytes, el, section } from "./format.js";

const FIGURES = [
  ["pid", "pid"],
  ["generation", "generation"],
  ["python", "Python"],
  ["torch", "torch"],
  ["numpy", "numpy"],
  ["rss", "RSS"],
  ["calls", "calls"],
  ["errors", "errors"],
  ["busy_s", "busy s"],
];

const ERROR = "var(--error-text, #f66)";
const MUTED = { fontSize: "11px", opacity: 0.7 };

function button(action, pack, title, onAction) {
  const b = el("button", action, { "data-action": action, "data-pack": pack, title }, {
    fontSize: "11px",
    marginLeft: "4px",
    padding: "1px 6px",
    cursor: "pointer",
  });
  b.addEventListener("click", () => onAction(action, pack, b));
  return b;
}

function figure(key, label, value) {
  const box = el("div", null, {}, { minWidth: "0" });
  box.appendChild(el("div", label, {}, MUTED));
  box.appendChild(el("div", value == null || value === "" ? "-" : value, { "data-key": key }, {
    fontSize: "12px",
    overflow: "hidden",
    textOverflow: "ellipsis",
    whiteSpace: "nowrap",
  }));
  return box;
}

function modelLine(m) {
  const line = el("div", null, { "data-model": `${m.pack}/${m.name}` }, {
    fontSize: "12px",
    padding: "1px 0",
  });
  const part = (key, text, style = {}) => el("span", text, { "data-key": key }, style);
  line.append(
    part("name", m.name, { fontWeight: "600" }),
    el("span", ` gen ${m.generation} · `, {}, MUTED),
    part("device", m.device),
    el("span", " · ", {}, MUTED),
    part("resident", bytes(m.resident)),
    el("span", " of ", {}, MUTED),
    part("size", bytes(m.size)),
    el("span", " · ", {}, MUTED),
    part("in_ledger", m.in_ledger ? "in ComfyUI's list" : "not in ComfyUI's list"),
    el("span", m.in_use ? " · " : "", {}, MUTED),
    part("in_use", m.in_use ? "in use" : "")
  );
  return line;
}

function packCard(row, rss, onAction) {
  const failed = row.state === "failed";
  const card = el("div", null, { "data-pack": row.pack }, {
    border: "1px solid var(--border-color, #444)",
    borderRadius: "4px",
    padding: "4px 6px",
    margin: "4px 0",
  });
  const head = el("div", null, {}, { display: "flex", alignItems: "center", flexWrap: "wrap" });
  head.appendChild(el("span", row.pack, {}, {
    fontWeight: "600",
    fontSize: "13px",
    marginRight: "6px",
  }));
  const state = failed ? `failed (${row.cause})` : row.state;
  head.appendChild(el("span", state, { "data-key": "state" }, {
    fontSize: "12px",
    color: failed ? ERROR : row.state === "running" ? "#5c5" : "",
  }));
  head.appendChild(el("span", null, {}, { flex: "1" }));
  if (!failed) {
    head.appendChild(button("restart", row.pack, "Kill this worker and start a new one", onAction));
    head.appendChild(button("release", row.pack, "Unload the models this worker holds", onAction));
  }
  card.appendChild(head);
  if (row.members && row.members.length) {
    // A group (ADR 0054): its packs share this one worker.
    card.appendChild(el("div", `packs: ${row.members.join(", ")}`, { "data-key": "members" }, {
      fontSize: "11px",
      opacity: "0.8",
    }));
  }
  if (failed) return card; // why: under Errors
  const grid = el("div", null, {}, {
    display: "grid",
    gridTemplateColumns: "repeat(auto-fill, minmax(72px, 1fr))",
    gap: "2px 8px",
    marginTop: "2px",
  });
  for (const [key, label] of FIGURES) {
    const value = key === "rss" ? (row.pid && rss != null ? bytes(rss) : null) : row[key];
    grid.appendChild(figure(key, label, value));
  }
  card.appendChild(grid);
  const models = row.models || [];
  const list = el("div", null, { "data-models": row.pack }, { marginTop: "3px" });
  if (!models.length) {
    list.appendChild(el("div", "holds no model", { "data-key": "no-models" }, MUTED));
  }
  for (const m of models) list.appendChild(modelLine(m));
  card.appendChild(list);
  return card;
}

function ledgerLine(e) {
  const line = el("div", null, { "data-ledger-kind": e.kind }, {
    fontSize: "12px",
    padding: "1px 0",
  });
  line.append(
    el("span", `#${e.index} ${e.kind} `, {}, MUTED),
    el("span", e.name, { "data-key": "name" }, { wordBreak: "break-word" }),
    el("span", ` · ${e.device} · `, {}, MUTED),
    el("span", bytes(e.loaded), { "data-key": "loaded" }),
    el("span", ` of ${bytes(e.size)}`, {}, MUTED)
  );
  return line;
}

// Why a pack is not loaded, or what its worker last raised, with the worker's traceback.
function errorBlock(row) {
  const failed = row.state === "failed";
  const text = failed ? row.error : row.last_error || row.device_mismatch;
  if (!text) return null;
  const trace = failed ? row.traceback : row.last_traceback;
  const box = el("div", null, { "data-error-pack": row.pack }, {
    margin: "4px 0",
    borderLeft: `3px solid ${ERROR}`,
    paddingLeft: "6px",
  });
  const what = failed ? "not loaded" : "last error";
  box.appendChild(el("div", `${row.pack} (${what}): ${text}`, { "data-key": "error" }, {
    fontSize: "12px",
    whiteSpace: "pre-wrap",
    wordBreak: "break-word",
  }));
  if (trace) {
    const details = el("details", null, { open: "" });
    details.appendChild(
      el("summary", "worker traceback", {}, { fontSize: "11px", cursor: "pointer" })
    );
    details.appendChild(el("pre", trace, { "data-traceback": row.pack }, {
      fontSize: "11px",
      maxHeight: "180px",
      overflow: "auto",
      margin: "2px 0",
      whiteSpace: "pre",
    }));
    box.appendChild(details);
  }
  return box;
}

export class PanelView {
  constructor(root, store, onAction) {
    this.store = store;
    this.onAction = onAction;
    root.appendChild(el("h3", "Isolated packs (comfy-airlock)", {}, { margin: "0 0 4px 0" }));
    this.line = el("div", "loading…", { "data-key": "status" }, MUTED);
    this.result = el("div", "", { "data-key": "action-result" }, {
      fontSize: "12px",
      minHeight: "1em",
    });
    root.append(this.line, this.result);
    const parts = [
      ["Packs, workers and their models", "workers"],
      ["ComfyUI's loaded models", "ledger"],
      ["Memory", "memory"],
      ["Errors", "errors"],
    ];
    this.body = {};
    for (const [title, key] of parts) {
      const [box, body] = section(title, key);
      root.appendChild(box);
      this.body[key] = body;
    }
  }

  render(kind) {
    const { store } = this;
    this.line.textContent = store.error
      ? store.error
      : store.status === null
        ? "loading…"
        : `${store.status.packs.length} pack(s) · live over ComfyUI's websocket · updated ` +
          `${store.updated ? store.updated.toLocaleTimeString() : "-"}`;
    if (store.status === null) return;
    if (kind === "memory") {
      this.renderRss();
    } else {
      this.renderPacks();
      this.renderLedger();
      this.renderErrors();
    }
    this.body.memory.replaceChildren(memoryCharts(store.history, store.windowS));
  }

  rssOf(pack) {
    const s = this.store.latestSample();
    return s ? s.ram.workers[pack] : null;
  }

  renderPacks() {
    const cards = this.store.status.packs.map((row) =>
      packCard(row, this.rssOf(row.pack), this.onAction)
    );
    if (!cards.length) cards.push(el("div", "no isolated pack", {}, MUTED));
    this.body.workers.replaceChildren(...cards);
  }

  renderRss() {
    for (const row of this.store.status.packs) {
      const cell = this.body.workers.querySelector(
        `[data-pack="${CSS.escape(row.pack)}"] [data-key="rss"]`
      );
      const rss = this.rssOf(row.pack);
      if (cell) cell.textContent = row.pid && rss != null ? bytes(rss) : "-";
    }
  }

  renderLedger() {
    const ledger = this.store.status.ledger;
    const lines = ledger.map(ledgerLine);
    if (!lines.length) lines.push(el("div", "none loaded", {}, MUTED));
    this.body.ledger.replaceChildren(...lines);
  }

  renderErrors() {
    const blocks = this.store.status.packs.map(errorBlock).filter(Boolean);
    if (!blocks.length) blocks.push(el("div", "none", {}, MUTED));
    this.body.errors.replaceChildren(...blocks);
  }

  showResult(text, failed) {
    this.result.textContent = text;
    this.result.style.color = failed ? ERROR : "";
  }
}
