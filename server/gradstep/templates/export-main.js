const el = document.getElementById("gradstep");

// In a frame: the frame messages of the /embed page (docs/embed.md) — the page's height in the
// shapes hosts listen for, ready and step, and goto/play/pause from the host.
function talkToHost(viewer, steps, autoTheme) {
  const post = (msg) => window.parent.postMessage(msg, "*");
  let last = 0;
  new ResizeObserver(() => {
    const height = Math.ceil(document.documentElement.scrollHeight);
    if (height === last) return;
    last = height;
    post({ context: "iframe.resize", height });
    post({ subject: "lti.frameResize", height });
  }).observe(document.body);
  window.addEventListener("message", (ev) => {
    if (ev.source !== window.parent || !ev.data || typeof ev.data !== "object") return;
    if (ev.data.type === "gradstep:goto" && Number.isInteger(ev.data.step)) viewer.setStep(ev.data.step);
    else if (ev.data.type === "gradstep:play") viewer.play();
    else if (ev.data.type === "gradstep:pause") viewer.stop();
    else if (ev.data.type === "gradstep:theme" && autoTheme && (ev.data.theme === "light" || ev.data.theme === "dark")) {
      // "auto" follows the host page's own theme (a notebook's), where it says one
      document.documentElement.dataset.theme = ev.data.theme;
      el.dataset.theme = ev.data.theme;
    }
  });
  post({ type: "gradstep:ready", steps, step: viewer.step });
}

// The runs of the trace's fixes, made when the page was exported: Apply fix shows them offline.
function shippedFixes() {
  const node = document.getElementById("gradstep-fixes");
  const runs = node ? JSON.parse(node.textContent) : {};
  return async (code) => (Object.hasOwn(runs, code) ? runs[code] : null);
}

try {
  const trace = JSON.parse(document.getElementById("gradstep-trace").textContent);
  // predict (present when the page is an exercise): the questions, a spec string or "code"
  const { step, theme, predict } = JSON.parse(document.getElementById("gradstep-options").textContent);
  const steps = trace.steps ? trace.steps.length : 0;
  const framed = window.parent !== window;
  const onStep = framed ? (i) => window.parent.postMessage({ type: "gradstep:step", step: i, steps }, "*") : null;
  // opened on its own, the stepper is the page: it takes the page's keys (embed.js, pageKeys)
  const viewer = await render({
    trace, el, step, theme, styles: false, onStep, runFix: shippedFixes(), pageKeys: !framed, predict,
  });
  window.gradstepViewer = viewer;
  document.body.dataset.ready = "true";
  if (framed) talkToHost(viewer, steps, theme === "auto");
} catch (e) {
  el.replaceChildren();
  const p = document.createElement("p");
  p.className = "gs-export-failed";
  p.textContent = `gradstep could not show this trace: ${e && e.message ? e.message : e}`;
  el.append(p);
  throw e;
}
