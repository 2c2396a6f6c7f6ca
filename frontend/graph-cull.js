// Viewport culling for big (virtual) graphs: items, edges and frames outside the view (plus a
// margin) are display:none, so the browser restyles and paints only what shows. An item is built
// when it first comes into view, and repainted if the step it shows is not the current one.
// Sets ctx.shownItems / ctx.shownEdges: the only ones a step paints.

import { zoomTransform } from "./vendor/d3.js";
import { buildItem, paintItem } from "./graph-nodes.js";
import { endBox, paintEdge } from "./graph-edges.js";

export const BIG = 300; // more visible items than this: the graph is virtual

export function isBig(vis) {
  return vis.items.size > BIG;
}

/** Hide or show a record's element; false when it already was. */
function setCulled(rec, hide) {
  if (rec.culled === hide) return false;
  rec.culled = hide;
  rec.el.style.display = hide ? "none" : "";
  return true;
}

/** Cull a freshly joined item of a virtual graph until it comes into view. */
export function hideUntilShown(item) {
  setCulled(item, true);
}

/** The culling of one graph view: cull() now, schedule() for the next frame (zoom and pan). */
export function createCuller(ctx) {
  let pending = false;

  function cull() {
    const { layout, vis } = ctx;
    if (!layout || !vis) return;
    const big = isBig(vis);
    const t = zoomTransform(ctx.svg.node());
    const m = 300; // px of margin around the view
    const x0 = t.invertX(-m);
    const x1 = t.invertX((ctx.size.width || 2000) + m);
    const y0 = t.invertY(-m);
    const y1 = t.invertY((ctx.size.height || 2000) + m);
    const inside = (b) => b && b.x + b.w >= x0 && b.x <= x1 && b.y + b.h >= y0 && b.y <= y1;
    const step = ctx.current;
    const sigs = step ? ctx.signatures(step) : null;
    for (const item of ctx.items) {
      if (!setCulled(item, big && !inside(layout.items.get(item.d.key))) || item.culled) continue;
      if (!item.built) buildItem(ctx, item);
      // it shows the step it was last painted at: repaint if that differs
      const sig = sigs && sigs.items.get(item.d.key);
      if (sigs && item.sig !== sig) paintItem(ctx, item, step, sig);
    }
    for (const frame of ctx.frames) setCulled(frame, big && !inside(layout.frames.get(frame.d.id)));
    for (const edge of ctx.edges) {
      const d = edge.d;
      const a = endBox(layout, d.from);
      const b = endBox(layout, d.to);
      const hide = big && !(inside(a) || inside(b) || (a && b && Math.min(a.y, b.y) <= y1 && Math.max(a.y, b.y) >= y0 && Math.min(a.x, b.x) <= x1 && Math.max(a.x + a.w, b.x + b.w) >= x0));
      if (!setCulled(edge, hide) || hide) continue;
      const sig = sigs && sigs.edges.get(d.key);
      if (sigs && edge.sig !== sig) paintEdge(ctx, edge, step, sigs.flowKeys, sig);
    }
    ctx.shownItems = ctx.items.filter((item) => !item.culled && item.built);
    ctx.shownEdges = ctx.edges.filter((edge) => !edge.culled);
  }

  return {
    cull,
    schedule() {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        cull();
      });
    },
  };
}
