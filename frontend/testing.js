// What browser tests and benchmarks read from the page, written in one place so the page's own
// code says "a run finished", not how a test finds out. Nothing here changes what a user sees.
//
//   window.gradstep           the app's viewer, editor, run, pick, compare, applyFix (app.js)
//   window.gradstepEmbed      the /embed page's viewer and options (embed-page.js)
//   window.gradstepTiming     the last run: request, render, total, painted, clickToPaint (ms), nodes
//   body[data-runs]           runs finished (whatever their outcome)
//   body[data-painted]        the run whose first frame was painted (benchmarks/render.py)
//   body[data-trace-status]   status of the trace shown, "request-error" or "link-error"
//   body[data-state]          the /embed page: "ready", "error", or "consent" (code from a foreign page waits for its Run)

export function exposeApp(api) {
  window.gradstep = api;
}

export function exposeEmbed(api) {
  window.gradstepEmbed = api;
}

export function runFinished(seq) {
  document.body.dataset.runs = String(seq);
}

export function traceStatus(status) {
  document.body.dataset.traceStatus = status;
}

export function embedState(state) {
  document.body.dataset.state = state;
}

/** Run `seq`'s times (performance.now() of click, arrival, render); `painted` once its frame is drawn. */
export function runTiming(seq, { t0, arrived, rendered, nodes }) {
  window.gradstepTiming = { request: arrived - t0, render: rendered - arrived, total: rendered - t0, nodes };
  // painted: the frame after the DOM was built has been drawn
  requestAnimationFrame(() => setTimeout(() => {
    const painted = performance.now();
    Object.assign(window.gradstepTiming, { painted: painted - arrived, clickToPaint: painted - t0 });
    document.body.dataset.painted = String(seq);
  }, 0));
}
