// The /embed page: one stepper with minimal chrome, for an <iframe> on a course page.
//
// Parameters (query, overridden by the fragment; docs/embed.md): snippet=NAME or #code=<c>,
// step (from 0, clamped), theme=light|dark|auto, editor=hidden|readonly|editable, autoplay=1,
// predict=SPEC (the exercise: its answers go to the framing page only, through the messenger).
// Bad parameters get a readable message in the frame (and a gradstep:error message to the parent),
// never a blank frame. Framed, no document-wide key handlers: keys work once the stepper has focus, so
// the frame never takes keys from the page around it; opened on its own, the stepper is the page and
// takes its keys (embed.js, pageKeys).

import { render } from "./embed.js";
import { createFrameMessenger } from "./messages.js";
import { decodeCode, embedOptions, encodeCode, urlParams } from "./permalink.js";
import { embedState, exposeEmbed } from "./testing.js";

const $ = (sel) => document.querySelector(sel);
const config = (() => {
  try {
    return JSON.parse($("#gs-config").textContent);
  } catch {
    return {};
  }
})();
const api = config.api || "";
const frame = $("#gs-frame");
const status = $("#gs-frame-status");
const host = $("#gs-frame-viewer");
let viewer = null;
let encoded = null; // the code as it goes in a link

const messenger = createFrameMessenger({
  parents: config.parents ?? null,
  onMessage(msg) {
    if (!viewer) return;
    if (msg.type === "gradstep:goto" && Number.isInteger(msg.step)) viewer.setStep(msg.step);
    else if (msg.type === "gradstep:play") viewer.play();
    else if (msg.type === "gradstep:pause") viewer.stop();
  },
});

function setStatus(kind, text) {
  status.className = `gs-run-status gs-status-${kind}`;
  status.textContent = text;
  status.hidden = !text;
}

function fail(messages) {
  const text = messages.join(" ");
  setStatus("error", text);
  status.setAttribute("role", "alert");
  frame.removeAttribute("aria-busy");
  embedState("error");
  messenger.post({ type: "gradstep:error", message: text });
  messenger.postHeight();
}

async function fetchJSON(url, init, tries = 3) {
  for (let attempt = 1; ; attempt++) {
    let res;
    try {
      res = await fetch(url, init);
    } catch {
      throw new Error("The gradstep server could not be reached.");
    }
    if (res.ok) return res.json();
    let message = `${res.status} ${res.statusText}`;
    try {
      message = (await res.json()).error || message;
    } catch {}
    const retry = Number(res.headers.get("retry-after"));
    // Busy or rate-limited (a whole class opening the page at once): wait as told, a few times.
    if ((res.status === 429 || res.status === 503) && attempt < tries && retry <= 10) {
      setStatus("running", `${message} Retrying in ${retry || 1} s…`);
      await new Promise((r) => setTimeout(r, (retry || 1) * 1000));
      continue;
    }
    throw new Error(message);
  }
}

const runTrace = (code) =>
  fetchJSON(`${api}/api/trace`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ code }) });

function updateOpenLink() {
  if (encoded === null) return;
  $("#gs-frame-open").href = `${location.origin}/#code=${encoded}&step=${viewer ? viewer.step : 0}`;
}

async function rerun() {
  const code = viewer.editor.getCode();
  const runBtn = $("#gs-frame-run");
  runBtn.disabled = true;
  setStatus("running", "Running in the sandbox…");
  try {
    const trace = await runTrace(code);
    await viewer.setTrace(trace);
    encoded = await encodeCode(code);
    setStatus("", "");
    afterStep();
  } catch (e) {
    setStatus("error", `Could not run: ${e.message}`);
  } finally {
    runBtn.disabled = false;
    messenger.postHeight();
  }
}

function afterStep() {
  updateOpenLink();
  const steps = viewer.model ? viewer.model.steps.length : 0;
  messenger.post({ type: "gradstep:step", step: viewer.step, steps });
}

async function start() {
  const names = (config.snippets || []).map((s) => s.name);
  const opts = embedOptions(urlParams(location.href), names);
  if (opts.errors.length) return fail(opts.errors);
  if (opts.theme !== "auto") document.documentElement.dataset.theme = opts.theme;
  let code;
  try {
    if (opts.code !== null) {
      code = await decodeCode(opts.code);
      encoded = opts.code;
    } else {
      const inlined = config.code && Object.hasOwn(config.code, opts.snippet) ? config.code[opts.snippet] : null;
      setStatus("running", "Loading the snippet…");
      code = inlined ?? (await fetchJSON(`${api}/api/snippets/${encodeURIComponent(opts.snippet)}`)).code;
      encoded = await encodeCode(code);
    }
  } catch (e) {
    return fail([e.message]);
  }
  setStatus("running", "Running in the sandbox…");
  let trace;
  try {
    trace = await runTrace(code);
  } catch (e) {
    return fail([`Could not run the snippet: ${e.message}`]);
  }
  setStatus("", "");
  const editable = opts.editor === "editable";
  viewer = await render({
    trace,
    el: host,
    step: opts.step,
    theme: opts.theme,
    code: opts.editor !== "hidden",
    editable,
    onRun: editable ? () => rerun() : null,
    onStep: () => afterStep(),
    // Apply fix: the fix's run, which the server kept when it verified the fix
    runFix: (fixCode) => runTrace(fixCode),
    pageKeys: window.parent === window, // opened on its own, not framed
    predict: opts.predict,
    post: (msg) => messenger.post(msg), // the exercise's answers: to the framing page, as the step messages
  });
  if (editable) {
    $("#gs-frame-editbar").hidden = false;
    $("#gs-frame-run").addEventListener("click", () => rerun());
  }
  frame.removeAttribute("aria-busy");
  embedState("ready");
  updateOpenLink();
  const steps = viewer.model.steps.length;
  messenger.post({ type: "gradstep:ready", steps, step: viewer.step });
  messenger.postHeight();
  if (opts.autoplay) viewer.play();
  exposeEmbed({ viewer, options: opts });
}

// A host that changes only the fragment of the frame's src (#code=…) navigates without a reload.
window.addEventListener("hashchange", () => location.reload());

start().catch((e) => fail([`The embed failed: ${e.message}`]));
