// Served at /extensions/regional-web/only.js: a pack of JavaScript alone.
export const REGIONAL_WEB = true;
