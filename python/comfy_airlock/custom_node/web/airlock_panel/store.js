// The panel's state for the page's whole life, shown or not: the host's status (packs, workers,
// models, ComfyUI's ledger) and memory history. One GET /airlock/panel reads it whole; after
// that ComfyUI's websocket brings every change (comfy-airlock.status, at most a few a second,
// only when something changed) and a memory sample every few seconds (comfy-airlock.memory).
// Nothing is polled. See docs/adr/0026-panel-data-flow.md.

export const STATUS_EVENT = "comfy-airlock.status";
export const MEMORY_EVENT = "comfy-airlock.memory";

export class PanelStore {
  constructor(api) {
    this.api = api;
    this.status = null; // {seq, packs, ledger}
    this.history = []; // memory samples, oldest first
    this.windowS = 600;
    this.error = null;
    this.loaded = false; // the whole state was read once (history included)
    this.updated = null; // when the browser last heard anything
    this.events = 0; // websocket events received (shown, and read by the browser test)
    this._loading = null;
    this._subscribers = new Set();
  }

  listen() {
    this.api.addEventListener(STATUS_EVENT, (e) => this.onStatus(e.detail));
    this.api.addEventListener(MEMORY_EVENT, (e) => this.onMemory(e.detail));
    // Events sent while the socket was down are lost, and a restarted ComfyUI counts its seq
    // from the start again: read the whole state once more.
    this.api.addEventListener("reconnected", () => {
      if (!this.loaded) return; // never shown yet: its first showing reads it
      this.loaded = false;
      this.status = null;
      this.history = [];
      this.load();
    });
  }

  subscribe(fn) {
    this._subscribers.add(fn);
    return () => this._subscribers.delete(fn);
  }

  // The one read of the whole state (again only after a reconnect); shared by callers.
  load() {
    if (!this._loading) {
      this._loading = this._fetch().finally(() => {
        this._loading = null;
      });
    }
    return this._loading;
  }

  async _fetch() {
    try {
      const res = await this.api.fetchApi("/airlock/panel");
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const snap = await res.json();
      this.windowS = snap.window_s;
      // An event newer than this read may have arrived meanwhile: keep the newest.
      if (this.status === null || snap.seq >= this.status.seq) {
        this.status = { seq: snap.seq, packs: snap.packs, ledger: snap.ledger };
      }
      for (const s of snap.history) this._addSample(s);
      this.history.sort((a, b) => a.t - b.t);
      this.error = null;
      this.loaded = true;
      this.updated = new Date();
    } catch (e) {
      this.error = `cannot read /airlock/panel: ${e.message}`;
    }
    this._notify("all");
  }

  onStatus(status) {
    this.events += 1;
    if (this.status !== null && status.seq <= this.status.seq) return;
    this.status = status;
    this.updated = new Date();
    this._notify("status");
  }

  onMemory(sample) {
    this.events += 1;
    this._addSample(sample);
    this.updated = new Date();
    this._notify("memory");
  }

  _addSample(sample) {
    const last = this.history[this.history.length - 1];
    if (last && sample.t <= last.t) {
      if (!this.history.some((s) => s.t === sample.t)) this.history.push(sample);
    } else {
      this.history.push(sample);
    }
    const newest = Math.max(sample.t, last ? last.t : 0);
    const from = newest - this.windowS;
    while (this.history.length && this.history[0].t < from) this.history.shift();
  }

  latestSample() {
    return this.history[this.history.length - 1] || null;
  }

  _notify(kind) {
    for (const fn of this._subscribers) fn(kind);
  }
}
