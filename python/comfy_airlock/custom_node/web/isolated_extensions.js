// The frontend extensions of isolated packs (ADR 0021). ComfyUI lists a native pack's .js files
// in GET /extensions and the frontend imports each one before it registers the node types; the
// files of isolated packs are served at the same URLs (/extensions/<pack>/...) but listed by
// GET /airlock/extensions instead, since comfy-airlock does not write ComfyUI's list. This module
// is one of those the frontend imports in that phase: it imports the packs' modules with the
// frontend's own rule (the same URL, core extensions skipped, a failing module reported and the
// rest loaded), and its top-level await holds the frontend until they have run, so they register
// exactly when a native pack's would.
import { api } from "../../scripts/api.js";

async function isolatedExtensions() {
  try {
    const res = await api.fetchApi("/airlock/extensions", { cache: "no-store" });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    return await res.json();
  } catch (error) {
    console.error("[comfy-airlock] the extensions of isolated packs are not listed:", error);
    return [];
  }
}

const extensions = await isolatedExtensions();
await Promise.all(
  extensions
    .filter((ext) => !ext.includes("extensions/core"))
    .map(async (ext) => {
      try {
        await import(/* @vite-ignore */ api.fileURL(ext));
      } catch (error) {
        console.error("Error loading extension", ext, error);
      }
    }),
);
