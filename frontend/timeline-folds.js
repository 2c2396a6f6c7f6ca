// Which timeline chips fold into one: a real model's forward pass is dozens of steps (each
// line inside a module's forward, once per layer), a training loop's iterations repeat them.
// Consecutive forward steps of one loop iteration (or outside loops, with no call between
// them) fold into one chip that opens on demand; short timelines keep a chip per step.

/**
 * Runs of steps shown as one chip: [{start, end, iteration}] (end inclusive), in order.
 * `over`: a timeline of at most this many steps folds nothing; `least`: the shortest run folded.
 */
export function timelineFolds(steps, { over = 20, least = 3 } = {}) {
  if (steps.length <= over) return [];
  const folds = [];
  let start = 0;
  for (let i = 1; i <= steps.length; i++) {
    const same = i < steps.length && steps[i].kind === "forward" && steps[start].kind === "forward" && steps[i].iteration === steps[start].iteration;
    if (same) continue;
    if (steps[start].kind === "forward" && i - start >= least) {
      folds.push({ start, end: i - 1, iteration: steps[start].iteration ?? null });
    }
    start = i;
  }
  return folds;
}

/** What a fold's chip says: "forward ×14", or "forward 3/14" while step `at` of it shows. */
export function foldText(fold, at = null) {
  const n = fold.end - fold.start + 1;
  return at !== null && at >= fold.start && at <= fold.end ? `forward ${at - fold.start + 1}/${n}` : `forward ×${n}`;
}
