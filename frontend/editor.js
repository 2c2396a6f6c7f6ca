// The code editor: CodeMirror 6 with Python highlighting and line numbers, plus
// the decorations the viewer drives — the current step's line, the line linked
// to a hovered node, and error messages shown inline under their line.

import {
  EditorState, StateField, StateEffect, Compartment,
  EditorView, keymap, lineNumbers, highlightActiveLineGutter, highlightSpecialChars, drawSelection,
  highlightActiveLine, Decoration, WidgetType,
  defaultKeymap, history, historyKeymap, indentWithTab,
  syntaxHighlighting, HighlightStyle, indentOnInput, bracketMatching,
  searchKeymap, highlightSelectionMatches, python, tags,
} from "./vendor/codemirror.js";

const setMarks = StateEffect.define();

class ErrorWidget extends WidgetType {
  constructor(err) {
    super();
    this.err = err;
  }
  eq(other) {
    return other.err.key === this.err.key;
  }
  toDOM() {
    const div = document.createElement("div");
    div.className = `gs-inline-error gs-inline-${this.err.kind || "error"}`;
    div.setAttribute("role", "alert");
    div.setAttribute("data-error-line", String(this.err.line));
    const head = document.createElement("strong");
    head.textContent = this.err.title;
    div.append(head);
    if (this.err.message) {
      const msg = document.createElement("span");
      msg.className = "gs-inline-error-msg";
      msg.textContent = ` ${this.err.message}`;
      div.append(msg);
    }
    if (this.err.hint) {
      const hint = document.createElement("div");
      hint.className = "gs-inline-error-hint";
      hint.textContent = this.err.hint;
      div.append(hint);
    }
    return div;
  }
  ignoreEvent() {
    return true;
  }
}

class CaretWidget extends WidgetType {
  constructor(attributes) {
    super();
    this.attributes = attributes;
  }
  eq(other) {
    return other.attributes["data-error-column"] === this.attributes["data-error-column"];
  }
  toDOM() {
    const span = document.createElement("span");
    span.className = "gs-error-col gs-error-col-end";
    for (const [k, v] of Object.entries(this.attributes)) span.setAttribute(k, v);
    span.textContent = "\u200b";
    return span;
  }
}

function buildDecorations(state, marks) {
  const ranges = [];
  const doc = state.doc;
  const lineAt = (n) => (n >= 1 && n <= doc.lines ? doc.line(n) : null);
  const cur = lineAt(marks.current);
  if (cur) ranges.push(Decoration.line({ class: "gs-line-current", attributes: { "data-current-line": "true" } }).range(cur.from));
  for (const n of marks.linked || []) {
    const l = lineAt(n);
    if (l && n !== marks.current) ranges.push(Decoration.line({ class: "gs-line-linked" }).range(l.from));
  }
  for (const n of marks.changed || []) {
    const l = lineAt(n);
    if (l) ranges.push(Decoration.line({ class: "gs-line-changed", attributes: { "data-changed-line": String(n) } }).range(l.from));
  }
  for (const d of marks.diagnoses || []) {
    const l = lineAt(d.line);
    if (l) ranges.push(Decoration.line({ class: `gs-line-diagnosis gs-line-diagnosis-${d.severity}`, attributes: { "data-diagnosis-line": String(d.line) } }).range(l.from));
  }
  for (const e of marks.errors || []) {
    const l = lineAt(e.line) || lineAt(doc.lines);
    if (!l) continue;
    ranges.push(Decoration.line({ class: "gs-line-error" }).range(l.from));
    if (e.column && lineAt(e.line)) {
      // the column the error points at (1-based, as Python's SyntaxError.offset): a wavy mark under
      // that character, or a caret widget when it points past the end of the line
      const at = l.from + Math.min(e.column - 1, l.length);
      const attributes = { "data-error-column": String(e.column), title: e.title.replace(/:$/, "") };
      if (at < l.to) ranges.push(Decoration.mark({ class: "gs-error-col", attributes }).range(at, at + 1));
      else ranges.push(Decoration.widget({ widget: new CaretWidget(attributes), side: 1 }).range(at));
    }
    ranges.push(Decoration.widget({ widget: new ErrorWidget(e), block: true, side: 1 }).range(l.to));
  }
  ranges.sort((a, b) => a.from - b.from || a.value.startSide - b.value.startSide);
  return Decoration.set(ranges, true);
}

const emptyMarks = { current: null, linked: [], errors: [], diagnoses: [], changed: [] };

/** The first line after a module docstring at the top of `code` (1 when there is none). */
export function firstCodeLine(code) {
  const lines = code.split("\n");
  let i = 0;
  while (i < lines.length && !lines[i].trim()) i++;
  const m = /^\s*[rRbBuU]?("""|''')/.exec(lines[i] || "");
  if (!m) return i + 1;
  const quote = m[1];
  const rest = lines[i].slice(lines[i].indexOf(quote) + 3);
  let end = rest.includes(quote) ? i : -1;
  for (let j = i + 1; end < 0 && j < lines.length; j++) if (lines[j].includes(quote)) end = j;
  if (end < 0) return 1;
  let k = end + 1;
  while (k < lines.length && !lines[k].trim()) k++;
  return k < lines.length ? k + 1 : 1;
}

/** Marks are plain data (numbers, strings, arrays of them): equal when their JSON is. */
function sameMarks(a, b) {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}

const marksField = StateField.define({
  create: () => ({ marks: emptyMarks, deco: Decoration.none }),
  update(value, tr) {
    for (const e of tr.effects) if (e.is(setMarks)) return { marks: e.value, deco: buildDecorations(tr.state, e.value) };
    if (tr.docChanged) {
      // editing invalidates what the last run said about lines
      return { marks: emptyMarks, deco: Decoration.none };
    }
    return value;
  },
  provide: (f) => EditorView.decorations.from(f, (v) => v.deco),
});

const highlight = HighlightStyle.define([
  { tag: tags.keyword, class: "tok-keyword" },
  { tag: [tags.string, tags.special(tags.string)], class: "tok-string" },
  { tag: tags.comment, class: "tok-comment" },
  { tag: [tags.number, tags.bool, tags.null], class: "tok-number" },
  { tag: [tags.function(tags.variableName), tags.function(tags.propertyName)], class: "tok-function" },
  { tag: tags.definition(tags.variableName), class: "tok-def" },
  { tag: [tags.operator], class: "tok-operator" },
  { tag: tags.propertyName, class: "tok-property" },
  { tag: tags.className, class: "tok-class" },
]);

let hintIds = 0;

export function createEditor(parent, { doc = "", readOnly = false, onRun, onHoverLine, onChange, label = "Python code" } = {}) {
  let hovered = null;
  let ownScrolls = 0; // scrolls asked for by the page (not by typing), pending in CodeMirror
  // Tab indents in the editor (CodeMirror's guidance: say how to leave it where a keyboard user sees it)
  const hintId = `gs-editor-hint-${++hintIds}`;
  const hint = document.createElement("div");
  hint.className = "gs-editor-hint";
  hint.id = hintId;
  hint.textContent = "Tab indents here. To leave the editor: Esc, then Tab.";
  parent.classList.add("gs-has-editor-hint");
  const readOnlyConf = new Compartment();
  const extensions = [
    lineNumbers(),
    highlightActiveLineGutter(),
    highlightSpecialChars(),
    history(),
    drawSelection(),
    indentOnInput(),
    bracketMatching(),
    highlightActiveLine(),
    highlightSelectionMatches(),
    syntaxHighlighting(highlight),
    python(),
    EditorView.lineWrapping,
    marksField,
    readOnlyConf.of([EditorState.readOnly.of(readOnly), EditorView.editable.of(!readOnly)]),
    // focusable even when read-only (its text can be read and scrolled by keyboard)
    EditorView.contentAttributes.of({ "aria-label": label, "aria-describedby": hintId, tabindex: "0" }),
    keymap.of([
      { key: "Mod-Enter", run: () => (onRun ? (onRun(), true) : false), preventDefault: true },
      ...defaultKeymap,
      ...historyKeymap,
      ...searchKeymap,
      indentWithTab,
    ]),
    // The page's own scrolls (a step's line, the code's start) move the editor's text only, never
    // the page around it: on a phone the graph above would be scrolled away by every step.
    EditorView.scrollHandler.of((v, range, opts) => {
      if (!ownScrolls) return false;
      ownScrolls--;
      // the lines' heights CodeMirror measured (reading coordinates is not allowed here)
      const pad = v.documentPadding.top;
      const top = v.lineBlockAt(range.from).top + pad;
      const bottom = v.lineBlockAt(range.to).bottom + pad;
      const scroller = v.scrollDOM;
      const from = scroller.scrollTop;
      const h = scroller.clientHeight;
      const m = opts.yMargin ?? 5;
      let to = from;
      if (opts.y === "start") to = top - m;
      else if (top - m < from) to = top - m;
      else if (bottom + m > from + h) to = Math.min(bottom + m - h, top - m);
      if (to !== from) scroller.scrollTop = Math.max(0, to);
      return true;
    }),
    EditorView.updateListener.of((u) => {
      if (u.docChanged && onChange) onChange(u.state.doc.toString());
    }),
    EditorView.domEventHandlers({
      mousemove(ev, view) {
        const pos = view.posAtCoords({ x: ev.clientX, y: ev.clientY }, false);
        const line = pos === null ? null : view.state.doc.lineAt(pos).number;
        if (line !== hovered) {
          hovered = line;
          if (onHoverLine) onHoverLine(line);
        }
      },
      mouseleave() {
        if (hovered !== null) {
          hovered = null;
          if (onHoverLine) onHoverLine(null);
        }
      },
    }),
  ];
  const view = new EditorView({ parent, state: EditorState.create({ doc, extensions }) });
  parent.append(hint);
  hint.hidden = readOnly; // a read-only editor leaves Tab alone
  // Open on the code, not inside the docstring above it: new text is scrolled there when its first
  // step is shown (the page around has its final size then), or at once when no step follows.
  let codeStart = null; // the line to open on, until the first step after setCode is shown
  function scrollToCode() {
    codeStart = Math.min(firstCodeLine(view.state.doc.toString()), view.state.doc.lines);
    queue();
  }
  let marks = emptyMarks;
  // Marks and scrolling asked for while a step is shown go out as one transaction at the end of
  // that task (one editor update, one measure), and not at all when they change nothing.
  let pendingMarks = null;
  let pendingReveal = null;
  let queued = false;
  let stepLine = null; // the line showStep last revealed
  const flush = () => {
    queued = false;
    const effects = [];
    if (pendingMarks && !sameMarks(pendingMarks, view.state.field(marksField).marks)) {
      effects.push(setMarks.of(pendingMarks));
    }
    if (codeStart !== null && codeStart <= view.state.doc.lines) {
      effects.push(EditorView.scrollIntoView(view.state.doc.line(codeStart).from, { y: "start" }));
      // the step's line is revealed only when it is far below the code's start
      if (pendingReveal !== null && pendingReveal < codeStart + 8) pendingReveal = null;
    }
    if (pendingReveal !== null && pendingReveal <= view.state.doc.lines) {
      // room below for an inline error under the line (and none asked above it: the code above the
      // first step stays where setCode put it)
      const doc = view.state.doc;
      const line = doc.line(pendingReveal);
      const below = doc.line(Math.min(doc.lines, pendingReveal + 4));
      const range = view.state.selection.constructor.range(line.from, below.to); // EditorSelection.range
      effects.push(EditorView.scrollIntoView(range, { y: "nearest", yMargin: 12 }));
    }
    pendingMarks = null;
    pendingReveal = null;
    if (effects.some((e) => !e.is(setMarks))) ownScrolls = 1; // CodeMirror keeps the last scroll of a transaction
    if (effects.length) view.dispatch({ effects });
  };
  const queue = () => {
    if (!queued) queueMicrotask(flush);
    queued = true;
  };
  if (doc) scrollToCode();
  const api = {
    view,
    getCode: () => view.state.doc.toString(),
    setCode(code) {
      if (queued) flush(); // marks asked for before belong to the old text
      stepLine = null;
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: code } });
      scrollToCode();
    },
    /**
     * A step's marks and line, applied at once: the viewer calls this before it writes the rest of
     * the step, so the editor's update (which reads the DOM selection, forcing a layout) sees a
     * clean layout. Nothing is dispatched when the marks show already and the line is the one last
     * revealed (scrolling away from it by hand is left alone until the line or its errors change).
     */
    showStep(next, line) {
      // an inline error under the line (new or gone) changes what must fit in view
      const errorsChanged = !sameMarks(marks.errors, next.errors ?? marks.errors);
      marks = { ...marks, ...next };
      pendingMarks = marks;
      if (line && (line !== stepLine || errorsChanged) && line <= view.state.doc.lines) pendingReveal = line;
      stepLine = line || null;
      flush();
      codeStart = null;
    },
    setMarks(next) {
      marks = { ...marks, ...next };
      pendingMarks = marks;
      queue();
    },
    clearMarks() {
      marks = emptyMarks;
      pendingMarks = marks;
      queue();
    },
    /** Scroll the line into view without moving the cursor. */
    revealLine(n) {
      if (!n || n < 1 || n > view.state.doc.lines) return;
      pendingReveal = n;
      queue();
    },
    focus: () => view.focus(),
    setReadOnly(ro) {
      hint.hidden = ro;
      view.dispatch({ effects: readOnlyConf.reconfigure([EditorState.readOnly.of(ro), EditorView.editable.of(!ro)]) });
    },
  };
  return api;
}
