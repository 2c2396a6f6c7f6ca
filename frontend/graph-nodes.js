// The graph's items: autograd nodes (op or leaf) and collapsed modules, one <g> each.
// joinItems places them (keyed by item key); buildItem fills one with its content (at once, or when
// it first comes into view on a virtual graph); paintItem shows a step on one.
//
// An item is a record {el, d, built, culled, sig, hooksSig, hookVals, refs} kept in ctx.state, a
// WeakMap keyed by its element (graph.js): nothing is stored on the element itself.

import { select } from "./vendor/d3.js";
import { G, chipWidth } from "./layout.js";
import { accText, fmtBytes, fmtGrad, nodeStatus } from "./model.js";
import { fmtNumber } from "./printing.js";
import { statusBadge } from "./graph-signatures.js";
import { setHooks } from "./graph-hooks.js";

/** A collapsed module's name in its parent's frame: "wte", or "h.3" for a numbered child. */
export function groupLabel(model, path) {
  const grp = model.groups.get(path);
  if (grp.label) return grp.label; // a loop ("loop · 100 iterations") or one iteration ("cell · t=7")
  const rel = grp.parent ? path.slice(grp.parent.length + 1) : path;
  const up = grp.parent ? model.groups.get(grp.parent).name : "";
  return /^\d+$/.test(rel) && up ? `${up}.${rel}` : rel;
}

/**
 * The three lines of facts a collapsed module shows at a step, from moduleStats
 * (module-stats.js) and groupStatus: "61 nodes · ran 61/61", "saved 1.2 MB · 96 KB freed",
 * "‖grad‖ 0.2860".
 */
export function groupLines(m, s) {
  const doing = [];
  if (s.executed) doing.push(`ran ${s.executed}/${s.alive}`);
  else if (s.isNew) doing.push(`${s.isNew} new`);
  else if (s.alive === 0) doing.push("not built");
  if (s.failed) doing.push("✕ failed");
  if (s.stale) doing.push(`${s.stale} stale`);
  const count = [`${m.nodes} nodes`, ...doing].join(" · ");
  let saved;
  if (!m.savedHeld && !m.savedFreed) saved = "nothing saved";
  else if (!m.savedFreed) saved = `saved ${fmtBytes(m.savedHeld)} held`;
  else if (!m.savedHeld) saved = `saved ${fmtBytes(m.savedFreed)} freed`;
  else saved = `saved ${fmtBytes(m.savedHeld)} · ${fmtBytes(m.savedFreed)} freed`;
  // nothing about gradients where no leaf is drawn (an unrolled RNN's step: its weights live in the cell's box);
  // "None" as torch spells a .grad not written yet
  let grad;
  if (!m.leaves) grad = "";
  else if (!m.params) grad = "‖grad‖ None";
  else if (m.gradNorm === null) grad = "‖grad‖ ✕ nan/inf";
  else grad = `‖grad‖ ${fmtNumber(m.gradNorm)}${m.nonfinite ? ` · ${m.nonfinite} ✕ nan/inf` : ""}`;
  return { count, saved, grad };
}

export function short(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** Join the visible items to <g class="gs-item"> elements; sets ctx.items, returns the new ones. */
export function joinItems(ctx) {
  const { model, layout } = ctx;
  const fresh = [];
  const items = [...ctx.vis.items.values()].filter((d) => layout.items.has(d.key));
  const sel = ctx.layers.nodes
    .selectAll("g.gs-item")
    .data(items, (d) => d.key)
    .join(
      (enter) => enter.append("g").attr("class", "gs-item gs-building").each(function (d) {
        if (d.kind === "node") {
          this.setAttribute("data-node-id", d.id);
          this.setAttribute("data-op", model.nodes[d.id].op);
        } else this.setAttribute("data-group", d.group);
        fresh.push(ctx.itemOf(this));
      }),
      (update) => update,
      (exit) => exit.remove(),
    )
    .attr("transform", (d) => {
      const b = layout.items.get(d.key);
      return `translate(${b.x},${b.y})`;
    });
  // plain arrays for the per-step loops (no selection walk, no DOM query per step)
  ctx.items = [];
  sel.each(function (d) {
    const item = ctx.itemOf(this);
    item.d = d;
    ctx.items.push(item);
  });
  return fresh;
}

/** Build an item's content (shapes, texts, handlers) for its box in the layout. */
export function buildItem(ctx, item) {
  buildParts(ctx, item);
  // a space after each text: assistive technology names the item "x leaf grad 448" (not "xleafgrad448")
  // from its texts; white space outside <text> is not drawn
  for (const t of item.el.querySelectorAll("text")) t.after(document.createTextNode(" "));
}

/** "Module model.h.0", "Iteration 7 of a loop": what a group box stands for, read aloud. */
function groupWord(grp) {
  if (grp.kind === "iteration") return `Iteration ${grp.iteration} of a loop`;
  if (grp.kind === "loop") return `A ${grp.label}`;
  return `Module ${grp.module ?? grp.id}`;
}

function buildParts(ctx, item) {
  const { model, layout, on } = ctx;
  const d = item.d;
  const g = select(item.el);
  const b = layout.items.get(d.key);
  item.built = true;
  g.attr("class", `gs-item ${d.kind === "node" ? "gs-node" : "gs-group"}`).attr("tabindex", 0).attr("role", "button");
  if (d.kind === "group") {
    const grp = model.groups.get(d.group);
    g.attr("data-group", d.group);
    g.append("rect").attr("class", "gs-group-shadow").attr("x", 5).attr("y", 5).attr("width", b.w).attr("height", b.h).attr("rx", 8);
    g.append("rect").attr("class", "gs-body").attr("width", b.w).attr("height", b.h).attr("rx", 8);
    g.append("text").attr("class", "gs-group-name").attr("x", 10).attr("y", 18).text(short(`▸ ${groupLabel(model, d.group)}`, Math.floor((b.w - 16) / 7.8)));
    // its facts at the step shown (paintGroup): what ran, saved tensors, its parameters' .grad norm
    g.append("text").attr("class", "gs-group-count").attr("x", 10).attr("y", 35).text(`${grp.size} nodes`);
    g.append("text").attr("class", "gs-group-saved").attr("x", 10).attr("y", 50);
    g.append("text").attr("class", "gs-group-grad").attr("x", 10).attr("y", 65);
    g.on("click", () => on.onToggleGroup && on.onToggleGroup(d.group, true));
    g.on("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        on.onToggleGroup && on.onToggleGroup(d.group, true);
      }
    });
    g.on("mouseenter", () => on.onHover && on.onHover(d.members)).on("mouseleave", () => on.onHover && on.onHover(null));
    return;
  }
  const n = model.nodes[d.id];
  g.attr("data-node-id", n.id).attr("data-op", n.op);
  if (n.isLeaf) g.classed("gs-leaf", true);
  if (n.gradGraph) g.classed("gs-gradgraph", true);
  g.append("rect").attr("class", "gs-body").attr("width", b.w).attr("height", b.h).attr("rx", n.isLeaf ? 14 : 6);
  let y = G.padY + 13;
  if (n.isLeaf) {
    g.append("text").attr("class", "gs-leaf-name").attr("x", G.padX).attr("y", y);
    g.append("text").attr("class", "gs-op-small").attr("x", b.w - G.padX).attr("y", y).attr("text-anchor", "end").text("leaf");
    y += G.title - 13;
    const rows = Math.max(1, model.maxGradRows.get(n.id) ?? 1);
    for (let i = 0; i < rows; i++) {
      const t = g.append("text").attr("class", "gs-grad-row").attr("x", G.padX).attr("y", y + 12 + i * G.gradRow);
      t.append("tspan").attr("class", "gs-grad-label").text("grad ");
      t.append("tspan").attr("class", "gs-grad-text");
    }
    y += rows * G.gradRow;
    g.append("text").attr("class", "gs-acc").attr("x", G.padX).attr("y", y + 11);
  } else {
    g.append("text").attr("class", "gs-op").attr("x", G.padX).attr("y", y).text(n.op);
    y += G.title - 13;
    g.append("text").attr("class", "gs-vars").attr("x", G.padX).attr("y", y + 11);
    y += G.vars;
    const chips = g.append("g").attr("class", "gs-chips").attr("transform", `translate(${G.padX},${y + 2})`);
    if (n.savedTensors.length) {
      let x = 0;
      for (const s of n.savedTensors) {
        const w = chipWidth(s.name);
        const c = chips.append("g").attr("class", "gs-chip").attr("data-saved", s.name).attr("transform", `translate(${x},0)`);
        c.append("rect").attr("width", w).attr("height", 16).attr("rx", 8);
        c.append("text").attr("x", w / 2).attr("y", 11.5).attr("text-anchor", "middle").text(s.name);
        x += w + 4;
      }
    } else {
      chips.append("text").attr("class", "gs-nothing").attr("y", 12).text("∅ nothing saved");
    }
    y += G.chips;
    const rows = model.maxGradRows.get(n.id) ?? 0;
    for (let i = 0; i < rows; i++) {
      const t = g.append("text").attr("class", "gs-grad-row").attr("x", G.padX).attr("y", y + 12 + i * G.gradRow);
      t.append("tspan").attr("class", "gs-grad-label");
      t.append("tspan").attr("class", "gs-grad-text");
    }
  }
  // badges above the node: execution order, freed / retained / stale / failed
  const order = g.append("g").attr("class", "gs-order").attr("transform", `translate(${b.w},0)`);
  order.append("circle").attr("r", 9);
  order.append("text").attr("text-anchor", "middle").attr("y", 3.5);
  g.append("g").attr("class", "gs-badge").attr("transform", "translate(8,-9)").call((bg) => {
    bg.append("rect").attr("height", 15).attr("rx", 7.5);
    bg.append("text").attr("x", 7).attr("y", 11);
  });
  g.on("click", () => on.onSelect && on.onSelect(n.id));
  g.on("keydown", (ev) => {
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      on.onSelect && on.onSelect(n.id);
    }
  });
  g.on("mouseenter", () => on.onHover && on.onHover([n.id])).on("mouseleave", () => on.onHover && on.onHover(null));
  g.on("focus", () => on.onHover && on.onHover([n.id])).on("blur", () => on.onHover && on.onHover(null));
}

/** Paint one item at a step from scratch (its signature differs, or it just came into view). */
export function paintItem(ctx, item, step, sig) {
  const { model } = ctx;
  const d = item.d;
  item.sig = sig;
  item.hooksSig = sig;
  if (d.kind === "group") {
    const sigs = ctx.signatures(step);
    return paintGroup(ctx, item, sigs.groups.get(d.key), sigs.modules.get(d.group));
  }
  const n = model.nodes[d.id];
  const st = nodeStatus(model, step, n.id);
  const tensors = (step && st.alive && step.gradsOf.get(n.id)) || [];
  const acc = n.isLeaf && tensors[0] ? model.gradChanges(step.index).get(tensors[0].name) : null;
  paintNode(ctx, item, n, st, tensors, acc, statusBadge(model, step, n, st), step);
}

/** The elements a node's paint writes to, found once per element. */
function refsOf(item, n) {
  if (item.refs) return item.refs;
  const el = item.el;
  item.refs = {
    name: el.querySelector(n.isLeaf ? "text.gs-leaf-name" : "text.gs-vars"),
    rows: [...el.querySelectorAll("text.gs-grad-row")].map((row) => ({
      row,
      label: row.querySelector(".gs-grad-label"),
      text: row.querySelector(".gs-grad-text"),
    })),
    acc: el.querySelector("text.gs-acc"),
    chips: [...el.querySelectorAll("g.gs-chip")],
    order: el.querySelector("g.gs-order"),
    orderText: el.querySelector("g.gs-order text"),
    badge: el.querySelector("g.gs-badge"),
    badgeText: el.querySelector("g.gs-badge text"),
    badgeRect: el.querySelector("g.gs-badge rect"),
  };
  return item.refs;
}

function paintNode(ctx, item, n, st, tensors, acc, badge, step) {
  const el = item.el;
  const r = refsOf(item, n);
  const dropped = !st.alive && st.dropped;
  const cl = el.classList;
  cl.toggle("gs-absent", !st.alive && !dropped);
  cl.toggle("gs-dropped", Boolean(dropped));
  cl.toggle("gs-new", Boolean(st.alive && st.isNew));
  cl.toggle("gs-executed", Boolean(st.executed));
  cl.toggle("gs-failed", Boolean(st.failed));
  cl.toggle("gs-freed", Boolean(st.freed));
  cl.toggle("gs-stale", Boolean(st.stale));
  cl.toggle("gs-retained", Boolean(st.retained));
  setHooks(item, st);
  const vars = st.alive ? st.vars : [];
  if (n.isLeaf) {
    // inside its module's frame a parameter goes by its name in that module
    const rel = (x) => (n.group && x.startsWith(`${n.group}.`) ? x.slice(n.group.length + 1) : x);
    r.name.textContent = short(vars.length ? vars.map(rel).join(", ") : rel(n.tensor || "(unnamed leaf)"), 30);
  }
  else r.name.textContent = vars.length ? short(`${vars.join(", ")}.grad_fn`, 30) : "";
  // grads held by tensors whose node this is
  r.rows.forEach(({ row, label, text }, i) => {
    const t = tensors[i];
    if (!t && !(n.isLeaf && i === 0)) {
      // hidden rows hold nothing: the DOM stays a function of the step, however it was reached
      row.setAttribute("visibility", "hidden");
      text.removeAttribute("data-grad-for");
      text.textContent = "";
      label.textContent = "";
      row.classList.remove("gs-grad-none", "gs-grad-fn");
      return;
    }
    row.removeAttribute("visibility");
    const name = t ? t.name : n.tensor || "";
    label.textContent = n.isLeaf ? "grad " : `${short(name, 12)}.grad `;
    text.setAttribute("data-grad-for", name);
    text.textContent = fmtGrad(t ? t.grad : null);
    row.classList.toggle("gs-grad-none", !(t && t.grad));
    row.classList.toggle("gs-grad-fn", Boolean(t && t.grad && t.grad.has_grad_fn));
  });
  // .grad accumulating: old + new = total
  if (n.isLeaf) {
    cl.toggle("gs-accumulated", Boolean(acc && acc.old));
    cl.toggle("gs-grad-written", Boolean(acc && !acc.old));
    if (acc && acc.old) r.acc.textContent = accText(acc.old, acc.total);
    else if (acc) r.acc.textContent = step && step.isCall ? "= new (was None)" : "";
    else r.acc.textContent = "";
  }
  // saved tensors: held / freed / stale / retained
  const staleNames = new Set(st.staleSaved || []);
  for (const c of r.chips) {
    const nm = c.getAttribute("data-saved");
    const isStale = st.stale && (staleNames.size === 0 || staleNames.has(nm));
    c.classList.toggle("gs-chip-freed", Boolean(st.freed));
    c.classList.toggle("gs-chip-stale", Boolean(isStale && !st.freed));
    c.classList.toggle("gs-chip-retained", Boolean(st.retained));
  }
  const hasOrder = st.order !== null && st.order !== undefined;
  if (hasOrder) r.order.removeAttribute("visibility");
  else r.order.setAttribute("visibility", "hidden");
  r.orderText.textContent = hasOrder ? String(st.order) : "";
  r.badge.setAttribute("class", `gs-badge ${badge ? badge.cls : ""}`);
  if (badge) {
    r.badge.removeAttribute("visibility");
    r.badgeText.textContent = badge.text;
    r.badgeRect.setAttribute("width", String(badge.text.length * 6.3 + 14));
  } else {
    r.badge.setAttribute("visibility", "hidden");
    r.badgeText.textContent = "";
    r.badgeRect.removeAttribute("width");
  }
  // named by its texts (a speech-input user says what they see), the details as its description: an
  // aria-label repeating the texts stops matching what shows when the pane cuts the node (axe's
  // label-content-name-mismatch), a name from content cannot
  el.setAttribute("aria-description", ariaFor(n, st, tensors));
}

function paintGroup(ctx, item, s, m) {
  const d = item.d;
  const g = select(item.el);
  g.classed("gs-absent", s.alive === 0)
    .classed("gs-executed", s.executed > 0)
    .classed("gs-failed", s.failed > 0)
    .classed("gs-freed", s.withTensors > 0 && s.freed >= s.withTensors)
    .classed("gs-stale", s.stale > 0)
    .classed("gs-new", s.isNew > 0)
    .classed("gs-nonfinite", m.nonfinite > 0)
    .attr("data-freed", s.withTensors > 0 && s.freed >= s.withTensors ? "true" : "false")
    .attr("data-executed", s.executed > 0 ? "true" : "false")
    .attr("data-stale", s.stale > 0 ? "true" : "false")
    .attr("data-grad-norm", m.gradNorm === null ? null : String(m.gradNorm));
  const lines = groupLines(m, s);
  const w = (ctx.layout.items.get(d.key) || { w: 190 }).w;
  const fit = (t) => short(t, Math.floor((w - 16) / 6.6));
  g.select("text.gs-group-count").text(fit(lines.count));
  g.select("text.gs-group-saved").text(fit(lines.saved));
  g.select("text.gs-group-grad").text(fit(lines.grad));
  g.attr("aria-description", `${groupWord(ctx.model.groups.get(d.group))}: ${lines.count}, saved tensors ${lines.saved.replace(/^saved /, "")}${lines.grad ? `, gradient norm of its parameters ${lines.grad.replace(/^‖grad‖ /, "")}` : ""}. Press Enter to expand.`);
}

function ariaFor(n, st, tensors) {
  const parts = [];
  if (n.isLeaf) parts.push(`Leaf ${(st.vars && st.vars.join(", ")) || n.tensor || ""}`);
  else parts.push(`${n.op}${st.vars && st.vars.length ? `, grad_fn of ${st.vars.join(", ")}` : ""}`);
  if (n.line !== null) parts.push(`line ${n.line}`);
  if (!st.alive) parts.push(st.dropped ? "dropped" : "not created yet");
  if (st.executed) parts.push(`ran ${st.order !== null ? `#${st.order}` : ""}`);
  if (st.failed) parts.push("failed here");
  if (n.savedTensors.length) {
    parts.push(`saved ${n.savedTensors.map((s) => s.name).join(", ")}: ${st.freed ? "freed" : st.stale ? "stale" : st.retained ? "retained" : "held"}`);
  } else if (!n.isLeaf) parts.push("nothing saved");
  for (const t of tensors) parts.push(`${t.name}.grad ${fmtGrad(t.grad)}`);
  if (n.isLeaf && !tensors.length) parts.push("grad None");
  return parts.join("; ");
}
