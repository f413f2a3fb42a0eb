// Served at /extensions/regional-extras/extras.js, as natively.
export const REGIONAL_EXTRAS = true;
