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
    const expanded = new Set(msg.expanded);
    const vis = visibleGraph(graph, expanded);
    let last = 0;
    const l = layoutGraph(graph, expanded, vis, {
      cache,
      onProgress(done, total) {
        const now = performance.now();
        if (now - last > 50 || done === total) {
          last = now;
          self.postMessage({ type: "progress", id: msg.id, done, total });
        }
      },
    });
    self.postMessage({ type: "layout", id: msg.id, layout: serializeLayout(l) });
  }
};
