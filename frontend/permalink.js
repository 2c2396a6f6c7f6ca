// A snippet's code in a URL, and the parameters of app permalinks and embeds.
//
// code=<c>: c = base64url without padding of the raw DEFLATE stream of the UTF-8 code — the
// same codec as server/gradstep/permalink.py, so links decode on both sides.
// Embed URL: /embed?snippet=NAME&step=N&theme=light|dark|auto&editor=hidden|readonly|editable&autoplay=1
// &predict=SPEC (the exercise mode: exercise-spec.js; `predict` alone or predict=1: the code's comments),
// code in the fragment (/embed#code=<c>&step=3): fragment parameters override query ones.

export const MAX_CODE_BYTES = 64 * 1024; // the API's limit: longer code could never run
// Characters of c: 64 KB never deflates to more than itself plus a few bytes of block headers
// (incompressible data is stored), i.e. ~87,400 base64url characters. A longer c is refused
// before anything is inflated (a 194 K-character link used to grow the tab to ~155 MB first).
export const MAX_ENCODED = 90_000;
const INFLATE_CHUNK = 1024; // compressed bytes fed at a time: each inflates to at most ~1 MB
export const THEMES = ["light", "dark", "auto"];
export const EDITOR_MODES = ["hidden", "readonly", "editable"];
export const MAX_PREDICT = 500; // characters of an exercise spec (exercise-spec.js MAX_SPEC)

function toBase64Url(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromBase64Url(c) {
  if (!/^[A-Za-z0-9_-]*$/.test(c) || c.length % 4 === 1) {
    throw new Error("The link's code is not valid base64url: the link was probably cut or altered.");
  }
  const bin = atob(c.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (c.length % 4)) % 4));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The code, compressed for a URL. */
export async function encodeCode(code) {
  const stream = new Blob([new TextEncoder().encode(code)]).stream().pipeThrough(new CompressionStream("deflate-raw"));
  return toBase64Url(new Uint8Array(await new Response(stream).arrayBuffer()));
}

/** The code in c; throws an Error with a readable message when c is corrupt or too large. */
export async function decodeCode(c) {
  if (typeof c !== "string" || !c) throw new Error("The link's code is empty.");
  if (c.length > MAX_ENCODED) throw new Error(`The code in this link is too long (${c.length} characters; at most ${MAX_ENCODED}).`);
  const raw = fromBase64Url(c);
  // Feed the inflater a little at a time, on demand, and stop past the limit: however well a
  // link compresses, at most what one INFLATE_CHUNK inflates to is held at once.
  let at = 0;
  const compressed = new ReadableStream(
    {
      pull(controller) {
        if (at >= raw.length) return controller.close();
        controller.enqueue(raw.subarray(at, at + INFLATE_CHUNK));
        at += INFLATE_CHUNK;
      },
    },
    { highWaterMark: 0 },
  );
  const reader = compressed.pipeThrough(new DecompressionStream("deflate-raw")).getReader();
  const chunks = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.length;
      if (size > MAX_CODE_BYTES) {
        reader.cancel().catch(() => {});
        throw new Error(`The code in this link is larger than ${MAX_CODE_BYTES / 1024} KB, the most a run accepts.`);
      }
      chunks.push(value);
    }
  } catch (e) {
    if (e.message.startsWith("The code in this link")) throw e;
    throw new Error("The link's code is corrupt (it does not decompress): was it cut short?");
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const ch of chunks) {
    bytes.set(ch, offset);
    offset += ch.length;
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new Error("The link's code is not UTF-8 text.");
  }
}

/** Parameters of a URL: the query's, overridden by the fragment's (#code=…&step=3). */
export function urlParams(href) {
  const url = new URL(href);
  const params = Object.fromEntries(url.searchParams);
  const hash = url.hash.replace(/^#/, "");
  if (hash) Object.assign(params, Object.fromEntries(new URLSearchParams(hash)));
  return params;
}

/**
 * Validate embed parameters. Returns {snippet, code, step, theme, editor, autoplay, predict, errors}:
 * `predict` is null (no exercise), "code" (`predict` given empty) or the spec as given: its grammar
 * is checked by the exercise, which says what is wrong above the graph while the page steps as usual.
 * `code` is still compressed (decode it with decodeCode); errors are readable sentences.
 * `step` is a non-negative integer, clamped later to the trace's steps.
 */
export function embedOptions(params, snippetNames = null) {
  const errors = [];
  const out = { snippet: null, code: null, step: 0, theme: "auto", editor: "readonly", autoplay: false, predict: null, errors };
  if (params.code != null) {
    if (params.code.length > MAX_ENCODED) errors.push(`The code in this link is too long (${params.code.length} characters; at most ${MAX_ENCODED}).`);
    else out.code = params.code;
  } else if (params.snippet != null) {
    if (snippetNames && !snippetNames.includes(params.snippet)) {
      errors.push(`There is no example snippet named “${params.snippet.slice(0, 80)}”.`);
    } else out.snippet = params.snippet;
  } else {
    errors.push("This embed names no snippet: add ?snippet=NAME or #code=… to its URL.");
  }
  if (params.step != null && params.step !== "") {
    const n = Number(params.step);
    if (!Number.isFinite(n) || !/^\s*[+-]?\d+\s*$/.test(params.step)) errors.push(`The step “${params.step.slice(0, 20)}” is not a whole number.`);
    else out.step = Math.max(0, n);
  }
  if (params.theme != null) {
    if (THEMES.includes(params.theme)) out.theme = params.theme;
    else errors.push(`Unknown theme “${params.theme.slice(0, 20)}”: use ${THEMES.join(", ")}.`);
  }
  if (params.editor != null) {
    if (EDITOR_MODES.includes(params.editor)) out.editor = params.editor;
    else errors.push(`Unknown editor mode “${params.editor.slice(0, 20)}”: use ${EDITOR_MODES.join(", ")}.`);
  }
  if (params.predict != null) {
    const p = params.predict.trim();
    if (p.length > MAX_PREDICT) errors.push(`The exercise in this link (predict=) is too long (${p.length} characters; at most ${MAX_PREDICT}).`);
    else if (/[\n\r]/.test(p)) errors.push("The exercise in this link (predict=) is one line: questions separated by commas.");
    else out.predict = p === "" ? "code" : p;
  }
  if (params.autoplay != null) out.autoplay = ["1", "true", "yes", ""].includes(params.autoplay);
  return out;
}

/** An app permalink: `${origin}/#code=<c>&step=N`. */
export async function permalink(origin, code, step = 0) {
  return `${origin}/#code=${await encodeCode(code)}&step=${step}`;
}

/** The embed URL for code at a step: `${origin}/embed#code=<c>&step=N`. */
export async function embedUrl(origin, code, step = 0) {
  return `${origin}/embed#code=${await encodeCode(code)}&step=${step}`;
}

/** A copy-able <iframe> for an embed URL. */
export const EMBED_HEIGHT = 1100; // px: the /embed page's content at a course page's width (~1030 px)

export function iframeSnippet(src, { width = "100%", height = EMBED_HEIGHT, title = "gradstep: step through PyTorch autograd", id = null } = {}) {
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
  const idAttr = id ? ` id="${esc(id)}"` : "";
  return `<iframe src="${esc(src)}"${idAttr} width="${esc(width)}" height="${esc(height)}" title="${esc(title)}" style="border:0" loading="lazy" allow="clipboard-write"></iframe>`;
}

/**
 * The one line that keeps a pasted frame as high as its content: the frame posts its height
 * ({context: "iframe.resize"}, docs/embed.md) and this sets it, for the frame with `id` only.
 * `id` must be a plain identifier ([A-Za-z0-9_-]).
 */
export function resizeScript(id) {
  if (!/^[A-Za-z0-9_-]+$/.test(id)) throw new Error("resizeScript: a plain id is needed");
  return `<script>addEventListener("message",function(e){var f=document.getElementById("${id}");if(f&&e.source===f.contentWindow&&e.data&&e.data.context==="iframe.resize")f.height=e.data.height})</script>`;
}
