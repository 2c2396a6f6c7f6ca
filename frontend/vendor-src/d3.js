// The d3 modules the graph view uses, as one bundle (d3-transition patches d3-selection's prototype,
// so both must come from the same copy).
export { select, selectAll, pointer } from "d3-selection";
export { transition } from "d3-transition";
export { zoom, zoomIdentity, zoomTransform } from "d3-zoom";
export { easeCubicInOut, easeCubicOut, easeLinear } from "d3-ease";
