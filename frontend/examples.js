// The example picker in the header and the card above the editor explaining the example shown.
// The picker is ordered as a course (retain_graph → accumulation → create_graph → autograd.grad →
// retain_grad → mistakes), grouped under headings, and filtered by what a person types.

import { h } from "./dom.js";

/** The course: groups in order, each with its examples in order. Examples not listed go last. */
export const COURSE = [
  ["Backward twice: retain_graph", [
    "backward_twice_fails", "exercise_retain_graph", "retain_graph_accumulates", "no_saved_tensors_backward_twice",
    "two_outputs_without_retain_fails", "two_outputs_retain_graph", "shared_trunk_partial_grads",
    "shared_trunk_retain_graph", "shared_trunk_sum_losses", "retain_graph_in_loop_not_needed",
    "stale_graph_training_loop_fails", "content_loss_retain_graph",
  ]],
  ["Accumulation: .grad adds up", [
    "training_loop_no_zero_grad", "exercise_accumulation", "zero_grad_before_step", "running_loss_keeps_graphs",
  ]],
  ["create_graph: derivatives of derivatives", ["create_graph_second_derivative", "exercise_create_graph"]],
  ["torch.autograd.grad", [
    "backward_vs_autograd_grad", "autograd_grad_many_inputs", "non_scalar_backward_fails", "non_scalar_backward_gradient",
  ]],
  ["retain_grad: .grad of intermediate tensors", ["retain_grad_before_or_after", "retain_grad_after_backward"]],
  ["Common mistakes", [
    "item_cuts_the_graph", "inplace_modified_saved_tensor_fails", "forward_under_no_grad_fails",
    "no_grad_forward_then_loss_fails", "sgd_update_outside_no_grad_fails", "rebound_leaf_keeps_grad",
    "rnn_hidden_not_detached_fails", "rnn_hidden_detached", "sqrt_at_zero_nan_grad", "gpu_code_runs_on_cpu",
  ]],
  ["Beyond the basics", ["checkpoint_recomputes_forward", "saved_tensor_hooks_pack_unpack"]],
  ["A real model", ["gpt_training_step"]],
];

/** The snippets grouped in course order: [{title, items}] (pure; unknown names in a last group). */
export function courseGroups(snippets) {
  const byName = new Map(snippets.map((s) => [s.name, s]));
  const placed = new Set();
  const groups = [];
  for (const [title, names] of COURSE) {
    const items = names.filter((n) => byName.has(n)).map((n) => byName.get(n));
    for (const s of items) placed.add(s.name);
    if (items.length) groups.push({ title, items });
  }
  const rest = snippets.filter((s) => !placed.has(s.name));
  if (rest.length) groups.push({ title: "More examples", items: rest });
  return groups;
}

/** Whether the code is still (an edit of) the example's: most of its lines are the example's. */
export function isStillExample(code, exampleCode) {
  const norm = (c) => c.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  const mine = norm(code);
  const theirs = norm(exampleCode);
  if (!theirs.length) return mine.length === 0;
  const pool = new Map();
  for (const l of theirs) pool.set(l, (pool.get(l) || 0) + 1);
  let kept = 0;
  for (const l of mine) {
    const n = pool.get(l) || 0;
    if (n) {
      kept++;
      pool.set(l, n - 1);
    }
  }
  // half of the example's lines kept, and they are half of the code now
  return kept * 2 >= theirs.length && kept * 2 >= mine.length;
}

/**
 * createExamples({picker, list, current, info}, {api, onChoose}) → examples
 * picker: the <details> menu, list: its <ul>, current: the label of the example shown, info: the card.
 * onChoose(name) when a person picks one from the menu.
 */
export function createExamples({ picker, list, current, info }, { api, onChoose }) {
  let snippets = [];
  let shownName = null;

  // the filter, above the list inside the menu
  const filter = h("input", {
    type: "search", id: "gs-picker-filter", class: "gs-picker-filter", placeholder: "Filter examples…",
    "aria-label": "Filter examples", autocomplete: "off", spellcheck: "false",
  });
  const noMatch = h("p", { class: "gs-picker-none", hidden: true, text: "No example matches." });
  list.before(filter);
  list.after(noMatch);
  filter.addEventListener("input", () => applyFilter());
  filter.addEventListener("keydown", (ev) => {
    if (ev.key === "ArrowDown") {
      ev.preventDefault();
      list.querySelector("li:not([hidden]) .gs-pick")?.focus();
    } else if (ev.key === "Enter") {
      ev.preventDefault();
      list.querySelector("li:not([hidden]) .gs-pick")?.click();
    }
  });
  list.addEventListener("keydown", (ev) => {
    if (ev.key !== "ArrowDown" && ev.key !== "ArrowUp") return;
    const buttons = [...list.querySelectorAll("li:not([hidden]) .gs-pick")];
    const i = buttons.indexOf(document.activeElement);
    if (i < 0) return;
    ev.preventDefault();
    if (ev.key === "ArrowUp" && i === 0) filter.focus();
    else buttons[Math.min(buttons.length - 1, Math.max(0, i + (ev.key === "ArrowDown" ? 1 : -1)))].focus();
  });
  picker.addEventListener("toggle", () => {
    if (picker.open) filter.focus();
  });

  function applyFilter() {
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    let any = false;
    for (const group of list.querySelectorAll(".gs-pick-group")) {
      let shown = 0;
      for (const li of group.querySelectorAll("li")) {
        const text = li.dataset.search;
        const ok = words.every((w) => text.includes(w));
        li.hidden = !ok;
        if (ok) shown++;
      }
      group.hidden = shown === 0;
      any ||= shown > 0;
    }
    noMatch.hidden = any;
  }

  // the card: a <button> that shows the whole explanation (keyboard-reachable, says its state)
  const more = h("button", { type: "button", class: "gs-info-more", "aria-expanded": "false" }, "Show the whole explanation");
  more.addEventListener("click", () => setOpen(!info.classList.contains("gs-open")));
  function setOpen(open) {
    info.classList.toggle("gs-open", open);
    more.setAttribute("aria-expanded", String(open));
    more.textContent = open ? "Show less" : "Show the whole explanation";
  }
  info.addEventListener("click", (ev) => {
    if (ev.target.closest("p")) setOpen(true);
  });
  document.addEventListener("click", (ev) => {
    if (picker.open && !picker.contains(ev.target)) picker.open = false;
  });
  picker.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") {
      picker.open = false;
      picker.querySelector("summary").focus();
    }
  });

  return {
    get all() {
      return snippets;
    },
    /** Fill the menu with `list` (from the page, else asked of the server). */
    async load(listed) {
      snippets = listed;
      if (!snippets.length) {
        try {
          snippets = await api.snippets();
        } catch {
          snippets = [];
        }
      }
      list.replaceChildren();
      courseGroups(snippets).forEach((g, gi) => {
        const headId = `gs-pick-group-${gi}`;
        list.append(h("li", { class: "gs-pick-group" },
          h("h2", { class: "gs-pick-group-title", id: headId, text: g.title }),
          h("ul", { "aria-labelledby": headId }, g.items.map((s) => {
            const onclick = () => {
              picker.open = false;
              onChoose(s.name);
            };
            return h("li", { "data-search": `${s.title} ${s.summary || ""} ${s.name} ${g.title}`.toLowerCase() },
              h("button", { type: "button", class: "gs-pick", "data-snippet": s.name, onclick },
                h("strong", { text: s.title }),
                s.fails && h("em", { class: "gs-fails", text: "fails on purpose" }),
                h("span", { text: s.summary })));
          }))));
      });
      applyFilter();
    },
    /** The example `name` with its code (asked of the server the first time), or undefined. */
    async get(name) {
      const s = snippets.find((x) => x.name === name);
      if (s && !s.code) Object.assign(s, await api.snippet(name));
      return s;
    },
    /** Show example `s` as the current one: its card, and its name in the menu. */
    show(s) {
      shownName = s.name;
      info.replaceChildren(...[
        h("p", { class: "gs-info-edited", text: "You changed this example's code: the explanation below is about the original." }),
        h("h1", { text: s.title }),
        s.summary && h("p", { text: s.summary }),
        s.watch && h("p", { class: "gs-watch" }, h("strong", { text: "Watch: " }), s.watch),
        more,
      ].filter(Boolean));
      setOpen(false);
      current.textContent = s.title;
      for (const b of list.querySelectorAll("button")) b.setAttribute("aria-current", b.dataset.snippet === s.name ? "true" : "false");
    },
    /** The code is no longer an example's: no card, and the menu says "Your code". */
    showOwn(label = "Your code") {
      shownName = null;
      info.replaceChildren();
      current.textContent = label;
      for (const b of list.querySelectorAll("button")) b.setAttribute("aria-current", "false");
    },
    /** Whether an example's card is showing (a shared link empties it). */
    get showing() {
      return info.childElementCount > 0;
    },
    get shownName() {
      return shownName;
    },
  };
}
