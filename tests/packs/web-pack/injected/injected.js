// Served from the folder the pack's import puts into nodes.EXTENSION_WEB_DIRS itself, under a
// name of its own (ComfyUI-Impact-Pack's way), not through WEB_DIRECTORY.
export const injected = true;
