// Layout off the main thread: receives the graph once, then lays out the
// visible graph for each set of expanded modules, reporting progress.
import { layoutGraph, serializeLayout } from "./layout.js";
import { visibleGraph } from "./model.js";

let graph = null;
let cache = new Map();

self.onmessage = (ev) => {
  const msg = ev.data;
  if (msg.type === "init") {
    graph = msg.graph;
    cache = new Map();
    return;
  }
  if (msg.type === "layout") {
    try {
      self.postMessage({ type: "layout", id: msg.id, layout: serializeLayout(layOut(msg)) });
    } catch (e) {
      // said to the page with its reason, rather than an opaque error event
      self.postMessage({ type: "error", id: msg.id, message: `${e && e.name ? `${e.name}: ` : ""}${e && e.message ? e.message : e}` });
    }
  }
};

function layOut(msg) {
  const expanded = new Set(msg.expanded);
  const vis = visibleGraph(graph, expanded);
  let last = 0;
  return layoutGraph(graph, expanded, vis, {
    cache,
    onProgress(done, total) {
      const now = performance.now();
      if (now - last > 50 || done === total) {
        last = now;
        self.postMessage({ type: "progress", id: msg.id, done, total });
      }
    },
  });
}
