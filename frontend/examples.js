// The example picker in the header and the card above the editor explaining the example shown.

import { h } from "./dom.js";

/**
 * createExamples({picker, list, current, info}, {api, onChoose}) → examples
 * picker: the <details> menu, list: its <ul>, current: the label of the example shown, info: the card.
 * onChoose(name) when a person picks one from the menu.
 */
export function createExamples({ picker, list, current, info }, { api, onChoose }) {
  let snippets = [];

  info.addEventListener("click", () => {
    info.classList.toggle("gs-open");
    info.title = info.classList.contains("gs-open") ? "" : "Click to show the whole explanation";
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
      for (const s of snippets) {
        const onclick = () => {
          picker.open = false;
          onChoose(s.name);
        };
        list.append(h("li", {},
          h("button", { type: "button", class: "gs-pick", "data-snippet": s.name, onclick },
            h("strong", { text: s.title }),
            s.fails && h("em", { class: "gs-fails", text: "fails on purpose" }),
            h("span", { text: s.summary }))));
      }
    },
    /** The example `name` with its code (asked of the server the first time), or undefined. */
    async get(name) {
      const s = snippets.find((x) => x.name === name);
      if (s && !s.code) Object.assign(s, await api.snippet(name));
      return s;
    },
    /** Show example `s` as the current one: its card, and its name in the menu. */
    show(s) {
      info.replaceChildren(...[
        h("p", { class: "gs-info-edited", text: "You changed this example's code: the explanation below is about the original." }),
        h("h1", { text: s.title }),
        s.summary && h("p", { text: s.summary }),
        s.watch && h("p", { class: "gs-watch" }, h("strong", { text: "Watch: " }), s.watch),
      ].filter(Boolean));
      info.classList.remove("gs-open");
      info.title = "Click to show the whole explanation";
      current.textContent = s.title;
      for (const b of list.querySelectorAll("button")) b.setAttribute("aria-current", b.dataset.snippet === s.name ? "true" : "false");
    },
    /** Whether an example's card is showing (a shared link empties it). */
    get showing() {
      return info.childElementCount > 0;
    },
  };
}
