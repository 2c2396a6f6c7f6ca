// The narration beside the graph: the step's plain-language `explanation` from
// the trace (version 2), with each span of `links` turned into a link that
// highlights — and on click selects — the node or tensor it names. The server
// narrates (server/gradstep/narrate.py, the one narrator); a trace recorded
// without narration (version 1, or `explain=False`) shows each step's title.

import { fmtGrad, raisedText, stepTitle } from "./model.js";

export const LISTED = 6; // .grad changes the narration names one by one (narrate.py MAX_LISTED)

/**
 * The explanation cut into segments: [{text, link}] where link is null or
 * {node, tensor}. Links out of range, empty, naming nothing, or overlapping an
 * earlier one are left out (their text stays, plain): bad spans never hide text.
 */
export function narrationSegments(text, links) {
  // offsets count code points (as Python's str does); JS strings index UTF-16 units
  if (/[\uD800-\uDFFF]/.test(text)) {
    const chars = Array.from(text);
    return narrationSegments(chars.map((c) => (c.length > 1 ? "\u0000" : c)).join(""), links).map((seg, k, all) => {
      const from = all.slice(0, k).reduce((a, x) => a + x.text.length, 0);
      return { ...seg, text: chars.slice(from, from + seg.text.length).join("") };
    });
  }
  const n = text.length;
  const ok = (links || [])
    .filter((l) => l && Number.isInteger(l.start) && Number.isInteger(l.end) && l.start >= 0 && l.end <= n && l.start < l.end)
    .filter((l) => (l.node !== null && l.node !== undefined) || (l.tensor !== null && l.tensor !== undefined))
    .sort((a, b) => a.start - b.start || b.end - a.end);
  const out = [];
  let at = 0;
  for (const l of ok) {
    if (l.start < at) continue; // overlaps the previous link
    if (l.start > at) out.push({ text: text.slice(at, l.start), link: null });
    out.push({ text: text.slice(l.start, l.end), link: { node: l.node ?? null, tensor: l.tensor ?? null } });
    at = l.end;
  }
  if (at < n || !out.length) out.push({ text: text.slice(at), link: null });
  return out;
}

/** The node a link stands for at this step: its node, or the node holding its tensor's .grad. */
export function linkTarget(model, step, link) {
  if (link.node !== null && model.nodes[link.node]) return link.node;
  if (link.tensor !== null) {
    const t = step.tensors.find((x) => x.name === link.tensor);
    if (t && t.node !== null && model.nodes[t.node]) return t.node;
  }
  return null;
}

/** Plain text with `code` spans: [{text, code}] (an unpaired backtick stays text). */
export function codeSpans(text) {
  const out = [];
  const re = /`([^`\n]+)`/g;
  let at = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > at) out.push({ text: text.slice(at, m.index), code: false });
    out.push({ text: m[1], code: true });
    at = m.index + m[0].length;
  }
  if (at < text.length) out.push({ text: text.slice(at), code: false });
  return out;
}

// The backticks stay in the DOM, hidden: the text read out (and copied) is the explanation's.
function appendText(parent, text) {
  for (const part of codeSpans(text)) {
    if (!part.code) {
      parent.append(part.text);
      continue;
    }
    const code = el("code", "gs-narr-code");
    const tick = () => {
      const t = el("span", "gs-narr-tick", "`");
      t.setAttribute("aria-hidden", "true");
      return t;
    };
    code.append(tick(), part.text, tick());
    parent.append(code);
  }
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * Fill `banner` with the narration of step `index`; returns its tone (info | call | error).
 * hooks: { highlight(nodeIds, tensorName|null), select(nodeId) }
 */
export function renderNarration(banner, model, index, hooks) {
  const step = model.step(index);
  if (!step) return null;
  const tone = step.error ? "error" : step.kind !== "forward" ? "call" : "info";
  // torch's own words of an error are kept beside the narration (the editor shows them at the line too)
  const message = step.error ? raisedText(step.error, 2000) : null;
  if (!step.explanation) {
    banner.append(el("div", "gs-banner-title", stepTitle(step)));
    if (message) banner.append(el("div", "gs-banner-message", message));
    return tone;
  }
  // Fixes come with the diagnoses, verified.
  const p = el("p", "gs-narration");
  p.dataset.step = String(index);
  for (const seg of narrationSegments(step.explanation, step.links)) {
    if (!seg.link) {
      appendText(p, seg.text);
      continue;
    }
    const target = linkTarget(model, step, seg.link);
    const a = el("button", "gs-narr-link", seg.text);
    a.type = "button";
    if (seg.link.node !== null) a.dataset.linkNode = String(seg.link.node);
    if (seg.link.tensor !== null) a.dataset.linkTensor = seg.link.tensor;
    const what = seg.link.tensor !== null ? `tensor ${seg.link.tensor}` : target !== null ? model.nodes[target].op : "";
    a.title = target !== null ? `Show ${what} in the graph` : what;
    const on = () => hooks.highlight(target === null ? [] : [target], seg.link.tensor);
    const off = () => hooks.highlight([], null);
    a.addEventListener("mouseenter", on);
    a.addEventListener("focus", on);
    a.addEventListener("mouseleave", off);
    a.addEventListener("blur", off);
    a.addEventListener("click", () => {
      if (target !== null) hooks.select(target);
    });
    p.append(a);
  }
  banner.append(p);
  const all = allChanges(model, index, hooks);
  if (all) banner.append(all);
  if (message) banner.append(el("div", "gs-banner-message", message));
  return tone;
}

/**
 * The step's .grad changes as rows {name, node, from, to}, in the tensors' order: what the
 * narration counts by module when there are many.
 */
export function gradChangeRows(model, index) {
  const step = model.step(index);
  if (!step) return [];
  const changes = model.gradChanges(index);
  const rows = [];
  for (const t of step.tensors) {
    const c = changes.get(t.name);
    if (c) rows.push({ name: t.name, node: t.node !== null && model.nodes[t.node] ? t.node : null, from: fmtGrad(c.old), to: fmtGrad(c.total) });
  }
  return rows;
}

/** Under a narration that summarised many .grad changes: all of them, on demand (built when opened). */
function allChanges(model, index, hooks) {
  if (model.gradChanges(index).size <= LISTED) return null;
  const rows = gradChangeRows(model, index);
  const details = el("details", "gs-narr-all");
  details.append(el("summary", "", `All ${rows.length} .grad changes`));
  details.addEventListener("toggle", () => {
    if (!details.open || details.querySelector("ol")) return;
    const list = el("ol", "gs-narr-all-list");
    for (const r of rows) {
      const li = el("li");
      li.dataset.tensor = r.name;
      const name = el("button", "gs-narr-link", r.name);
      name.type = "button";
      name.dataset.linkTensor = r.name;
      name.title = `Show tensor ${r.name} in the graph`;
      const on = () => hooks.highlight(r.node === null ? [] : [r.node], r.name);
      name.addEventListener("mouseenter", on);
      name.addEventListener("focus", on);
      name.addEventListener("mouseleave", () => hooks.highlight([], null));
      name.addEventListener("blur", () => hooks.highlight([], null));
      name.addEventListener("click", () => {
        if (r.node !== null) hooks.select(r.node);
      });
      li.append(name, `: ${r.from} → ${r.to}`);
      list.append(li);
    }
    details.append(list);
    // the banner is a few lines high: the list starts at its top, the page itself does not move
    const box = details.closest(".gs-banner");
    if (box) box.scrollTop += details.getBoundingClientRect().top - box.getBoundingClientRect().top;
  });
  return details;
}
