// The animation of a step reached by stepping forward: new nodes pop, nodes light up in the
// engine's run order, saved tensors are freed as their node runs, and particles carry the gradient
// along the edges it flowed through. Transient only: the step's paint already shows where it ends.

import { zoomTransform, easeLinear } from "./vendor/d3.js";
import { edgeSamples, endBox } from "./graph-edges.js";

export function prefersReducedMotion() {
  return typeof matchMedia === "function" && matchMedia("(prefers-reduced-motion: reduce)").matches;
}

/** The flow animation of one graph view: stop() before a step's paint, animate(step, diff, flowKeys) after. */
export function createFlow(ctx) {
  let token = 0; // the animation running; a newer step settles what an older one left pending

  /** Run timed class changes from one timer loop (not one setTimeout per node). */
  function schedule(pending, mine) {
    if (!pending.length) return;
    pending.sort((a, b) => a[0] - b[0]);
    const t0 = performance.now();
    let k = 0;
    const tick = () => {
      if (mine !== token) {
        // a newer step took over: settle what is left
        for (; k < pending.length; k++) pending[k][1]();
        return;
      }
      const now = performance.now() - t0;
      while (k < pending.length && pending[k][0] <= now) pending[k++][1]();
      if (k < pending.length) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  /** Particles along the edges the gradient flowed through, in view, in engine order. */
  function particles(flowKeys, dt) {
    const { vis, layout } = ctx;
    const t = zoomTransform(ctx.svg.node());
    const { width, height } = ctx.size;
    const inView = (b) => b && t.applyX(b.x + b.w) > 0 && t.applyX(b.x) < width && t.applyY(b.y + b.h) > 0 && t.applyY(b.y) < height;
    const edges = [];
    for (const [key, order] of flowKeys) {
      const d = vis.edges.get(key);
      const a = d && endBox(layout, d.from);
      const b = d && endBox(layout, d.to);
      if (!a || !b) continue;
      if (inView(a) || inView(b)) edges.push({ d, order });
    }
    edges.sort((a, b) => a.order - b.order);
    const cap = 160;
    const stride = Math.max(1, Math.ceil(edges.length / cap));
    for (let i = 0; i < edges.length; i += stride) {
      const { d, order } = edges[i];
      const pts = edgeSamples(layout, d);
      // cumulative length, to move at an even speed
      const cum = [0];
      for (let k = 1; k < pts.length; k++) cum.push(cum[k - 1] + Math.hypot(pts[k][0] - pts[k - 1][0], pts[k][1] - pts[k - 1][1]));
      const total = cum[cum.length - 1] || 1;
      const at = (u) => {
        const target = u * total;
        let k = 1;
        while (k < cum.length - 1 && cum[k] < target) k++;
        const f = (target - cum[k - 1]) / Math.max(1e-6, cum[k] - cum[k - 1]);
        return [pts[k - 1][0] + (pts[k][0] - pts[k - 1][0]) * f, pts[k - 1][1] + (pts[k][1] - pts[k - 1][1]) * f];
      };
      const [x0, y0] = pts[0];
      const dot = ctx.layers.flow.append("circle").attr("class", "gs-particle").attr("r", 4.5).attr("cx", x0).attr("cy", y0).style("opacity", 0);
      dot
        .transition("flow")
        .delay(order * dt)
        .duration(Math.max(220, dt * 2.2))
        .ease(easeLinear)
        .style("opacity", 1)
        .attrTween("transform", () => (u) => {
          const [x, y] = at(u);
          return `translate(${x - x0},${y - y0})`;
        })
        .transition()
        .duration(200)
        .style("opacity", 0)
        .remove();
    }
  }

  return {
    /** End the running animation: particles go, pending class changes settle. */
    stop() {
      token++;
      ctx.layers.flow.selectAll("*").interrupt().remove();
    },
    /** Transient classes for a step reached by stepping forward: pops, the run order, freeing, particles. */
    animate(step, diff, flowKeys) {
      const mine = token;
      const { model } = ctx;
      const changes = model.gradChanges(step.index);
      const flowing = diff.flow.length > 0;
      const dt = flowing ? Math.max(12, Math.min(140, 1600 / Math.max(1, step.order.length))) : 0;
      // per-node pulses only while they can be followed by eye
      const pulses = flowing && step.order.length <= 150;
      const pending = [];
      const freedNow = new Set(diff.freed);
      const later = (el, cls, at, until) => {
        if (at <= 0) el.classList.add(cls);
        else pending.push([at, () => el.classList.add(cls)]);
        pending.push([until, () => el.classList.remove(cls)]);
      };
      for (const { el, d } of ctx.shownItems) {
        if (d.kind !== "node") continue;
        const s = step.state.get(d.id);
        if (!s) continue;
        if (diff.forward && s.isNew) later(el, "gs-pop", 0, 700);
        if (!flowing || s.order === null || s.order === undefined) continue;
        const when = s.order * dt;
        if (s.freed && freedNow.has(d.id)) later(el, "gs-freeing", 0, when);
        if (pulses) later(el, "gs-running", when, when + 450);
        const n = model.nodes[d.id];
        const leafTensor = n.isLeaf ? (step.gradsOf.get(d.id) || [])[0] : null;
        if (leafTensor && changes.get(leafTensor.name)) later(el, "gs-grad-hold", 0, when + dt);
      }
      schedule(pending, mine);
      if (flowing) particles(flowKeys, dt);
    },
  };
}
