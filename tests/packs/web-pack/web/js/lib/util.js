// Helpers shared by the pack's extensions (imported by a relative URL, as packs do).

// The pack's folder name, from this module's own URL: /extensions/<pack>/js/lib/util.js.
export const PACK = decodeURIComponent(new URL(import.meta.url).pathname.split("/")[2]);

export function decorate(text) {
  return `» ${text}`;
}

// A stylesheet of the pack's web folder, by URL relative to this module; done(true) once it
// loaded, done(false) if it could not be.
export function addStylesheet(path, done) {
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = new URL(`../../${path}`, import.meta.url).toString();
  link.onload = () => done(true);
  link.onerror = () => done(false);
  document.head.appendChild(link);
}
