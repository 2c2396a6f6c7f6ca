// What the editor needs from CodeMirror 6, bundled into vendor/codemirror.js by build.mjs.
export { EditorState, StateField, StateEffect, RangeSetBuilder, Compartment } from "@codemirror/state";
export {
  EditorView, keymap, lineNumbers, highlightActiveLineGutter, highlightSpecialChars, drawSelection,
  highlightActiveLine, Decoration, WidgetType, ViewPlugin, gutter, GutterMarker, placeholder,
} from "@codemirror/view";
export { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
export {
  syntaxHighlighting, HighlightStyle, indentOnInput, bracketMatching, foldGutter, foldKeymap,
} from "@codemirror/language";
export { searchKeymap, highlightSelectionMatches } from "@codemirror/search";
export { python } from "@codemirror/lang-python";
export { tags } from "@lezer/highlight";
