// Served at /extensions/regional-core/core.js, as natively.
export const REGIONAL_CORE = true;
