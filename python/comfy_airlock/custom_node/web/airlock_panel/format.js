// Small formatting and DOM helpers shared by the panel's views.

export function bytes(n) {
  if (n == null) return "-";
  const units = [
    ["GiB", 2 ** 30],
    ["MiB", 2 ** 20],
    ["KiB", 2 ** 10],
  ];
  for (const [unit, scale] of units) {
    if (Math.abs(n) >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
  }
  return `${n} B`;
}

// An element with text (never HTML: pack names, errors and tracebacks come from packs).
export function el(tag, text, attrs = {}, style = {}) {
  const node = document.createElement(tag);
  if (text != null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  Object.assign(node.style, style);
  return node;
}

export function section(title, key) {
  const box = el("section", null, { "data-section": key }, { marginTop: "10px" });
  box.appendChild(el("h4", title, {}, { margin: "4px 0", fontSize: "13px" }));
  const body = el("div", null, {}, { overflowX: "auto" });
  box.appendChild(body);
  return [box, body];
}
