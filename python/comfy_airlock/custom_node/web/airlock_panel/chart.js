// Memory over the last minutes, drawn as SVG by hand (no chart library: nothing outside
// ComfyUI's server is reachable, and a few polylines need none).

import { bytes, el } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 300;
const H = 70;

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

// The path of one series: a gap wherever a sample has no value.
function pathOf(samples, value, x, y) {
  let d = "";
  let pen = false;
  let points = 0;
  for (const s of samples) {
    const v = value(s);
    if (v == null || Number.isNaN(v)) {
      pen = false;
      continue;
    }
    d += `${pen ? "L" : "M"}${x(s.t).toFixed(1)},${y(v).toFixed(1)}`;
    pen = true;
    points += 1;
  }
  return [d, points];
}

// One chart: `series` are {key, name, color, value(sample)}, `max(sample)` the scale's top
// (the total), all in bytes. Returns a <figure> with the SVG and a legend of current values.
export function lineChart(key, title, samples, series, max, windowS) {
  const fig = el("figure", null, { "data-chart": key }, { margin: "4px 0 8px 0" });
  const last = samples[samples.length - 1];
  const top = last ? max(last) : null;
  fig.appendChild(
    el("figcaption", `${title}${top ? ` (of ${bytes(top)})` : ""}`, {}, { fontSize: "12px" })
  );
  const chart = svg("svg", {
    viewBox: `0 0 ${W} ${H}`,
    width: "100%",
    height: H,
    preserveAspectRatio: "none",
    role: "img",
    "aria-label": title,
  });
  chart.appendChild(
    svg("rect", { x: 0, y: 0, width: W, height: H, fill: "none", stroke: "currentColor",
      "stroke-opacity": 0.3 })
  );
  for (const frac of [0.25, 0.5, 0.75]) {
    chart.appendChild(
      svg("line", { x1: 0, x2: W, y1: H * frac, y2: H * frac, stroke: "currentColor",
        "stroke-opacity": 0.1 })
    );
  }
  // The time the samples cover, up to the window (the host keeps that much): a ComfyUI that
  // started a minute ago fills the width with that minute.
  const span = samples.length ? Math.max(1, Math.min(windowS, last.t - samples[0].t)) : windowS;
  if (samples.length) {
    const t1 = last.t;
    const t0 = t1 - span;
    const scale = Math.max(1, ...samples.map((s) => max(s) || 0));
    const x = (t) => Math.max(0, ((t - t0) / span) * W);
    const y = (v) => H - (Math.min(v, scale) / scale) * (H - 2) - 1;
    for (const s of series) {
      const [d, points] = pathOf(samples, s.value, x, y);
      const path = svg("path", {
        d,
        fill: "none",
        stroke: s.color,
        "stroke-width": 1.5,
        "vector-effect": "non-scaling-stroke",
        "data-series": s.key,
        "data-points": points,
      });
      chart.appendChild(path);
    }
  }
  fig.appendChild(chart);
  const legend = el("div", null, {}, { fontSize: "11px", display: "flex", flexWrap: "wrap",
    gap: "8px" });
  const ago = span < 90 ? `${Math.round(span)} s` : `${Math.round(span / 60)} min`;
  legend.appendChild(el("span", `last ${ago}`, { "data-key": "span" }, { opacity: 0.7 }));
  for (const s of series) {
    const now = last ? s.value(last) : null;
    const item = el("span", null, { "data-legend": s.key });
    item.appendChild(el("span", "■ ", {}, { color: s.color }));
    item.appendChild(document.createTextNode(`${s.name} ${bytes(now)}`));
    legend.appendChild(item);
  }
  fig.appendChild(legend);
  return fig;
}

const sum = (o) => Object.values(o || {}).reduce((a, b) => a + (b || 0), 0);

// The two charts of the panel: RAM (as ComfyUI's cgroup bounds it) and the device.
export function memoryCharts(samples, windowS) {
  const box = el("div");
  box.appendChild(
    lineChart(
      "ram",
      "RAM",
      samples,
      [
        { key: "used", name: "used", color: "#888", value: (s) => s.ram.used },
        { key: "comfyui", name: "ComfyUI", color: "#4a9eff", value: (s) => s.ram.comfyui },
        { key: "workers", name: "workers", color: "#ff9f40", value: (s) => sum(s.ram.workers) },
      ],
      (s) => s.ram.total,
      windowS
    )
  );
  const withDevice = samples.filter((s) => s.device);
  if (!withDevice.length) {
    box.appendChild(
      el("div", "Device: none read (ComfyUI runs on the CPU, or no NVML)", {
        "data-chart": "device-none",
      }, { fontSize: "12px", opacity: 0.7 })
    );
    return box;
  }
  box.appendChild(
    lineChart(
      "device",
      "Device",
      samples,
      [
        { key: "used", name: "used", color: "#888", value: (s) => s.device && s.device.used },
        { key: "host", name: "ComfyUI's models", color: "#4a9eff",
          value: (s) => s.models && s.models.host },
        { key: "workers", name: "workers' models", color: "#ff9f40",
          value: (s) => s.models && s.models.workers },
      ],
      (s) => s.device && s.device.total,
      windowS
    )
  );
  return box;
}
