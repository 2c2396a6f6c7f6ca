// The graph's stable data-* hooks on node elements (data-freed, data-stale, data-executed,
// data-failed, data-alive), read by tests and embedders (frontend/README.md). Painting a node writes
// them with the rest; on a virtual graph the nodes not painted (off screen) get theirs here, in
// small tasks after the step's frame, and the canvas fires `gs-hooks-settled` when all are current
// (`data-hooks-pending` on it until then).

import { nodeStatus } from "./model.js";

const HOOKS = ["freed", "stale", "executed", "failed", "alive"];

/** Write a node's hooks for status `st`: only the attributes that change (each write restyles it). */
export function setHooks(item, st) {
  const was = item.hookVals || [];
  const now = HOOKS.map((k) => (st[k] ? "true" : "false"));
  for (let i = 0; i < HOOKS.length; i++) if (was[i] !== now[i]) item.el.setAttribute(`data-${HOOKS[i]}`, now[i]);
  item.hookVals = now;
}

/** The deferred writer of a graph's off-screen hooks: defer() after a step that painted only some items. */
export function createHookWriter(ctx) {
  let cursor = 0;
  let timer = null;

  function flush() {
    timer = null;
    const step = ctx.current;
    if (!step) {
      delete ctx.root.dataset.hooksPending;
      return;
    }
    const sigs = ctx.signatures(step);
    const items = ctx.items;
    const end = Math.min(items.length, cursor + 400);
    for (; cursor < end; cursor++) {
      const item = items[cursor];
      if (item.d.kind !== "node") continue;
      const sig = sigs.items.get(item.d.key);
      if (item.hooksSig === sig) continue;
      setHooks(item, nodeStatus(ctx.model, step, item.d.id));
      item.hooksSig = sig;
    }
    if (cursor < items.length) timer = setTimeout(flush, 0);
    else {
      delete ctx.root.dataset.hooksPending;
      ctx.root.dispatchEvent(new CustomEvent("gs-hooks-settled"));
    }
  }

  return {
    defer() {
      cursor = 0;
      ctx.root.dataset.hooksPending = "true"; // read by tests: `[data-hooks-pending]` until settled
      // a task queued from requestAnimationFrame runs once that frame is painted (a plain timeout
      // may run before it, and hold the step's paint back)
      if (timer === null) timer = requestAnimationFrame(() => (timer = setTimeout(flush, 0)));
    },
  };
}
