// gradstep's widget as a notebook saves it: this small module, not the ~780 KB front end.
// The front end (frontend/widget.js with everything it imports, gradstep.notebook.widget_esm) is
// asked of the kernel in a custom message, which no notebook saves with the widget's state; the
// page keeps it for every later widget. Without a kernel to answer, the view says what to do.
const WAIT_MS = 4000;
let frontEnd = null; // Promise of the front end's module, once a kernel sent it

function ask(model) {
  return new Promise((resolve, reject) => {
    const onMessage = (msg) => {
      if (!msg || msg.type !== "gradstep:esm" || typeof msg.source !== "string") return;
      try {
        model.off("msg:custom", onMessage);
      } catch {
        // a host without off
      }
      const url = URL.createObjectURL(new Blob([msg.source], { type: "text/javascript" }));
      import(url).then(resolve, reject);
    };
    model.on("msg:custom", onMessage);
    model.send({ type: "gradstep:esm?" });
  });
}

function hint(el) {
  const p = document.createElement("p");
  p.className = "gradstep-widget-hint";
  p.style.cssText = "font: 14px/1.45 system-ui, sans-serif; padding: 8px 12px; border: 1px dashed #8c94a4; border-radius: 6px;";
  p.textContent =
    "gradstep: this stepper's front end comes from the kernel (it is kept out of the saved notebook). " +
    "Run the cell to show it.";
  el.append(p);
  return p;
}

export default {
  async render({ model, el }) {
    let p = null;
    let pending;
    try {
      pending = frontEnd || ask(model);
    } catch (e) {
      hint(el);
      return;
    }
    const timer = setTimeout(() => {
      p = hint(el);
    }, WAIT_MS);
    let mod;
    try {
      mod = await pending;
    } catch (e) {
      clearTimeout(timer);
      if (!p) p = hint(el);
      p.textContent = `gradstep could not load its front end: ${e && e.message ? e.message : e}`;
      return;
    }
    frontEnd = pending;
    clearTimeout(timer);
    if (p) p.remove();
    return mod.default.render({ model, el });
  },
};
