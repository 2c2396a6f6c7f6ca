// The /embed page: one stepper with minimal chrome, for an <iframe> on a course page.
//
// Parameters (query, overridden by the fragment; docs/embed.md): snippet=NAME or #code=<c>,
// step (from 0, clamped), theme=light|dark|auto, editor=hidden|readonly|editable, autoplay=1,
// predict=SPEC (the exercise: its answers go to the framing page only, through the messenger).
// Bad parameters get a readable message in the frame (and a gradstep:error message to the parent),
// never a blank frame. Framed, no document-wide key handlers: keys work once the stepper has focus, so
// the frame never takes keys from the page around it; opened on its own, the stepper is the page and
// takes its keys (embed.js, pageKeys).
// Code from the link (#code=…) in a frame of a page of another origin runs only when the reader
// presses Run, unless its trace is already in the server's cache (asked for without running
// anything) or that origin is one the server lets run code at once (config.runOrigins, from
// GRADSTEP_EMBED_RUN_ORIGINS): else any page could have its visitors' browsers run code of its
// choosing on the server, from as many addresses as it has visitors. Curated snippets always run.

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

/** The cached trace of `code`, or null when the server has none (it then runs nothing). */
async function cachedTrace(code) {
  try {
    const res = await fetch(`${api}/api/trace`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-gradstep-cached-only": "1" },
      body: JSON.stringify({ code }),
    });
    return res.ok ? await res.json() : null;
  } catch {
    return null;
  }
}

/** The origin of the page that frames this one ("" when it cannot be known: treated as foreign). */
function parentOrigin() {
  try {
    if (location.ancestorOrigins && location.ancestorOrigins.length) return location.ancestorOrigins[0];
  } catch {}
  try {
    return document.referrer ? new URL(document.referrer).origin : "";
  } catch {
    return "";
  }
}

/** Whether code from the link may run without the reader's click (see the top of this file). */
function runsAtOnce(fromLink) {
  if (!fromLink || window.parent === window) return true; // a curated snippet, or the page on its own
  const origin = parentOrigin();
  const allowed = config.runOrigins || [];
  return origin === location.origin || allowed.includes("*") || (origin !== "" && allowed.includes(origin));
}

/** Show the code and a Run button; resolves when the reader presses it. */
function askToRun(code) {
  const note = document.createElement("p");
  note.className = "gs-frame-consent";
  note.textContent = "This page embeds code of its own. Press Run to run it in gradstep's sandbox.";
  const shown = document.createElement("pre");
  shown.className = "gs-frame-consent-code";
  shown.textContent = code;
  shown.style.cssText = "max-height: 24em; overflow: auto; white-space: pre-wrap; font-size: 0.85rem;";
  host.append(note, shown);
  const bar = $("#gs-frame-editbar");
  const runBtn = $("#gs-frame-run");
  bar.hidden = false;
  setStatus("", "");
  frame.removeAttribute("aria-busy");
  embedState("consent");
  messenger.postHeight();
  return new Promise((resolve) => {
    runBtn.addEventListener(
      "click",
      () => {
        note.remove();
        shown.remove();
        bar.hidden = true;
        frame.setAttribute("aria-busy", "true");
        resolve();
      },
      { once: true },
    );
  });
}

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
  let trace = null;
  if (!runsAtOnce(opts.code !== null)) {
    setStatus("running", "Loading…");
    trace = await cachedTrace(code);
    if (trace === null) await askToRun(code);
  }
  try {
    if (trace === null) {
      setStatus("running", "Running in the sandbox…");
      trace = await runTrace(code);
    }
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
