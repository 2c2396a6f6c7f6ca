// The frames of expanded modules: a box around the module's nodes with a header that collapses it.
// Keyed by module path; they depend on the layout only (a step does not touch them).
// A frame is a record {el, d, culled} in ctx.state (graph.js).

import { select } from "./vendor/d3.js";
import { short } from "./graph-nodes.js";

/** Join the expanded modules to <g class="gs-frame"> elements; sets ctx.frames. */
export function joinFrames(ctx) {
  const { layout, on } = ctx;
  const toggle = (d) => on.onToggleGroup && on.onToggleGroup(d.id, false);
  const sel = ctx.layers.frames
    .selectAll("g.gs-frame")
    .data(ctx.vis.frames.filter((f) => layout.frames.has(f.id)), (d) => d.id)
    .join(
      (enter) => {
        const g = enter.append("g").attr("class", "gs-frame");
        g.append("rect").attr("class", "gs-frame-box").attr("rx", 8);
        const head = g.append("g").attr("class", "gs-frame-head").attr("role", "button").attr("tabindex", 0);
        head.append("rect").attr("class", "gs-frame-head-bg").attr("rx", 4);
        head.append("text").attr("class", "gs-frame-label");
        head.on("click", (ev, d) => toggle(d)).on("keydown", (ev, d) => {
          if (ev.key === "Enter" || ev.key === " ") {
            ev.preventDefault();
            toggle(d);
          }
        });
        return g;
      },
      (update) => update,
      (exit) => exit.remove(),
    )
    .attr("data-group", (d) => d.id)
    .each(function (d) {
      const b = layout.frames.get(d.id);
      const g = select(this);
      g.select("rect.gs-frame-box").attr("x", b.x).attr("y", b.y).attr("width", b.w).attr("height", b.h);
      const label = `▾ ${d.label ?? d.module ?? d.id}`;
      g.select(".gs-frame-head").attr("aria-label", `Collapse ${d.label ?? `module ${d.module ?? d.id}`}`);
      g.select("rect.gs-frame-head-bg").attr("x", b.x + 4).attr("y", b.y + 3).attr("width", Math.min(b.w - 8, label.length * 6.6 + 12)).attr("height", 17);
      g.select("text.gs-frame-label").attr("x", b.x + 10).attr("y", b.y + 15).text(short(label, Math.floor((b.w - 16) / 6.6)));
    });
  ctx.frames = [];
  sel.each(function (d) {
    const frame = ctx.itemOf(this);
    frame.d = d;
    ctx.frames.push(frame);
  });
}
