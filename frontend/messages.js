// The frame's side of the postMessage API (docs/embed.md).
//
// Out, to the parent: {type:"gradstep:ready", steps, step}, {type:"gradstep:step", step, steps},
// {type:"gradstep:error", message}, the exercise's {type:"gradstep:answer", version:1, …} and
// {type:"gradstep:exercise", version:1, …} (exercise.js, posted through `post` below), and the height in the shapes hosts already listen for:
// {context:"iframe.resize", height, src} (Embedly/Observable hosts) and
// {subject:"lti.frameResize", height} (Canvas LMS).
// In, from the parent: {type:"gradstep:goto", step}, {type:"gradstep:play"}, {type:"gradstep:pause"}.
// Accepted only from the window that frames this page (event.source === window.parent) and, when the
// server restricts framing (GRADSTEP_FRAME_ANCESTORS), only from an origin that setting allows.

/** Does `origin` ("https://a.b:8080") match a CSP source ("https://*.b", "a.b", "https:", "'self'", "*")? */
export function originMatches(origin, source, self = "") {
  if (source === "*") return true;
  if (source === "'self'") return origin === self;
  if (source === "'none'") return false;
  let url;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  const m = /^(?:([a-z][a-z0-9+.-]*):(?:\/\/)?)?([^:/]*)(?::(\d+|\*))?$/i.exec(source);
  if (!m) return false;
  const [, scheme, host, port] = m;
  const wantScheme = scheme ? `${scheme.toLowerCase()}:` : null;
  if (wantScheme && url.protocol !== wantScheme) return false;
  if (!host) return Boolean(wantScheme); // a bare scheme source ("https:")
  if (!wantScheme && !/^https?:$/.test(url.protocol)) return false;
  const h = host.toLowerCase();
  if (h.startsWith("*.")) {
    if (!url.hostname.endsWith(h.slice(1))) return false;
  } else if (url.hostname !== h) return false;
  if (port === "*") return true;
  const defaultPort = url.protocol === "https:" ? "443" : "80";
  return (url.port || defaultPort) === (port || defaultPort);
}

/**
 * createFrameMessenger({ parents, onMessage }) → { post(msg), postHeight(), inFrame, destroy() }
 * parents: null (any parent window may talk) or a list of CSP sources the parent's origin must match.
 */
export function createFrameMessenger({ parents = null, onMessage = () => {} } = {}) {
  const inFrame = window.parent !== window;
  const allowed = (origin) => parents === null || parents.some((s) => originMatches(origin, s, location.origin));
  // Where outgoing messages go: the parent's origin when the browser tells it (ancestorOrigins), else
  // any origin — nothing in them is private (a step number, a height) — unless framing is restricted.
  const parentOrigin = () => {
    const a = location.ancestorOrigins;
    if (a && a.length) return a[0];
    try {
      return document.referrer ? new URL(document.referrer).origin : null;
    } catch {
      return null;
    }
  };
  const target = () => {
    const o = parentOrigin();
    if (parents === null) return "*";
    return o && o !== "null" && allowed(o) ? o : null;
  };
  const post = (msg) => {
    if (!inFrame) return;
    const t = target();
    if (t) window.parent.postMessage(msg, t);
  };
  const listener = (ev) => {
    if (!inFrame || ev.source !== window.parent) return; // not from the window that frames us
    if (parents !== null && !allowed(ev.origin)) return;
    const d = ev.data;
    if (!d || typeof d !== "object" || typeof d.type !== "string" || !d.type.startsWith("gradstep:")) return;
    onMessage(d);
  };
  window.addEventListener("message", listener);

  let lastHeight = -1;
  const postHeight = () => {
    const height = Math.ceil(document.documentElement.getBoundingClientRect().height);
    if (height === lastHeight) return;
    lastHeight = height;
    post({ context: "iframe.resize", height, src: location.href });
    post({ subject: "lti.frameResize", height });
  };
  let observer = null;
  if (inFrame && typeof ResizeObserver === "function") {
    observer = new ResizeObserver(() => postHeight());
    observer.observe(document.documentElement);
  }
  return {
    inFrame,
    post,
    postHeight,
    destroy() {
      window.removeEventListener("message", listener);
      if (observer) observer.disconnect();
    },
  };
}
