"""Narration of an update step (an optimizer call): what it did to .grad, the parameters, the rate.

Part of ``narrate.py`` (a pure function of the trace), kept apart: ``narrate_update`` writes into
the narrator's text, linking the parameters the step lists.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from gradstep import cells
from gradstep.printing import fmt_number, quoted

MAX_LISTED = 6  # parameters named one by one before the rest is summarised

# the names a call of each op goes by in code (``opt.step()``, ``nn.utils.clip_grad_norm_(...)``)
_CALLED = {
    "zero_grad": ("zero_grad",),
    "step": ("step",),
    "lr_step": ("step",),
    "clip_grad_norm": ("clip_grad_norm_", "clip_grad_norm"),
    "clip_grad_value": ("clip_grad_value_",),
}
_DEFAULT = {
    "zero_grad": "zero_grad()",
    "step": "optimizer.step()",
    "lr_step": "scheduler.step()",
    "clip_grad_norm": "clip_grad_norm_(…)",
    "clip_grad_value": "clip_grad_value_(…)",
}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Sources:
    """The update calls as the code wrote them, by line (parsed once per code)."""

    def __init__(self, code: str) -> None:
        self.by_line: dict[int, list[tuple[str, str]]] = {}  # line -> (called name, source)
        try:
            tree, _ = cells.parse(code)
        except (SyntaxError, ValueError):
            return
        names = {n for ns in _CALLED.values() for n in ns}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.end_lineno == node.lineno:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name in names:
                    segment = ast.get_source_segment(code, node)
                    if segment:
                        self.by_line.setdefault(node.lineno, []).append((name, segment))

    def call(self, op: str, line: int | None) -> str:
        found = [src for name, src in self.by_line.get(line, []) if name in _CALLED[op]] if line else []
        return found[0] if len(found) == 1 and len(found[0]) <= 80 else _DEFAULT[op]


def _lrs(lrs: list | None) -> str:
    known = [fmt_number(v) for v in lrs or () if v is not None]
    if not known:
        return "?"
    return known[0] if len(set(known)) == 1 else ", ".join(known)


def narrate_update(
    step: dict, t: Any, sources: Sources, name_link: Callable[[str, str], None], where: str
) -> None:
    """Write what ``step``'s update did into ``t`` (the narrator's text); ``name_link(name, label)``
    writes a tensor's label, linked when the step lists it; ``where`` is the step's line as said."""
    update = step["update"]
    op = update["op"]
    params = update.get("params") or []
    t.add(f"`{sources.call(op, step.get('line'))}`")
    at = [f"line {where}"] if step.get("line") is not None else []
    if step.get("iteration"):
        at.append(f"iteration {step['iteration']}")
    if at:
        t.add(f" ({', '.join(at)})")
    error = step.get("error")
    if error:
        t.add(f" failed: {error['type']}: {quoted(error['message'].split(chr(10))[0])}")
        t.add(".")
        return

    def names(items: list[dict], write: Callable[[dict], None]) -> None:
        shown = items[:MAX_LISTED]
        for i, p in enumerate(shown):
            if i:
                t.add(" and " if i == len(shown) - 1 and len(items) == len(shown) else ", ")
            write(p)
        if len(items) > len(shown):
            t.add(f" and {len(items) - len(shown)} more")

    def plain(p: dict) -> None:
        name_link(p["name"], p["name"])

    def grad_norms(p: dict) -> None:  # a clipped .grad: its norm before and after
        name_link(p["name"], f"{p['name']}.grad")
        t.add(f" ‖{fmt_number(p['grad_norm_before'])}‖ → ‖{fmt_number(p['grad_norm_after'])}‖")

    if op == "zero_grad":
        cleared = [p for p in params if p.get("grad")]
        if not cleared:
            t.add(f" found no .grad to clear: none of its {_plural(len(params), 'parameter')} had one.")
            return
        to_none = [p for p in cleared if p["grad"] == "set_to_none"]
        zeroed = [p for p in cleared if p["grad"] == "zeroed"]
        if to_none:
            t.add(f" set the .grad of {_plural(len(to_none), 'parameter')} to None: ")
            names(to_none, plain)
            t.add(". The next backward writes a fresh .grad instead of adding to the old one.")
        if zeroed:
            t.add(" ")
            t.add(
                f"{'It ' if to_none else ''}filled the .grad of {_plural(len(zeroed), 'parameter')} with zeros: "
            )
            names(zeroed, plain)
            t.add(" (set_to_none=False: the tensors stay allocated, and the next backward adds to zero).")
        return

    if op == "step":
        moved = [p for p in params if p.get("updated")]
        still = [p for p in params if not p.get("updated")]
        lr = update.get("lr_before")
        kind = update.get("of_class") or "the optimizer"
        grads = {te["name"]: te.get("grad") for te in step.get("tensors") or ()}
        no_grad = [p for p in still if p["name"] in grads and grads[p["name"]] is None]
        zero = [p for p in still if p not in no_grad]

        def unchanged() -> None:
            if no_grad:
                t.add(" ")
                names(no_grad, plain)
                one = len(no_grad) == 1
                t.add(
                    f" {'has' if one else 'have'} no .grad, and "
                    f"{'a parameter with no .grad is' if one else 'parameters with no .grad are'} skipped."
                )
            if zero:
                t.add(" ")
                names(zero, plain)
                t.add(f" did not move: {'its' if len(zero) == 1 else 'their'} update was zero.")

        if not moved:
            t.add(f" changed no parameter ({kind}, lr {_lrs(lr)}).")
            unchanged()
            return
        t.add(f" updated {_plural(len(moved), 'parameter')} ({kind}, lr {_lrs(lr)}): ")

        def moved_by(p: dict) -> None:
            name_link(p["name"], p["name"])
            t.add(f" by ‖{fmt_number(p['delta_norm'])}‖")

        names(moved, moved_by)
        t.add(".")
        unchanged()
        whose = "Its" if len(moved) == 1 else "Their"
        t.add(f" {whose} .grad is left as it is: the next backward adds to it unless zero_grad clears it.")
        return

    if op == "clip_grad_norm":
        clipped = [p for p in params if p.get("grad") == "clipped"]
        have = [p for p in params if p.get("grad_norm_before") is not None]
        before, after = update.get("total_norm_before"), update.get("total_norm_after")
        max_norm = update.get("max_norm")
        if clipped:
            t.add(
                f" scaled the .grad of {_plural(len(clipped), 'parameter')} down by one factor: their total norm went from "
            )
            t.add(f"{fmt_number(before)} to {fmt_number(after)} (max_norm {fmt_number(max_norm)}): ")

            names(clipped, grad_norms)
            t.add(".")
        elif have:
            t.add(
                f" left the .grad of {_plural(len(have), 'parameter')} as it was: their total norm "
                f"{fmt_number(before)} is within max_norm {fmt_number(max_norm)}, so none was scaled."
            )
        else:
            t.add(" found no .grad to clip.")
        return

    if op == "clip_grad_value":
        clipped = [p for p in params if p.get("grad") == "clipped"]
        bound = fmt_number(update.get("clip_value"))
        if clipped:
            t.add(f" clamped the .grad of {_plural(len(clipped), 'parameter')} into [-{bound}, {bound}]: ")

            names(clipped, grad_norms)
            t.add(".")
        else:
            t.add(f" changed no .grad: every value was within [-{bound}, {bound}].")
        return

    if op == "lr_step":
        before, after = _lrs(update.get("lr_before")), _lrs(update.get("lr_after"))
        kind = update.get("of_class") or "the scheduler"
        if before != after:
            t.add(
                f" changed the learning rate from {before} to {after} ({kind}); the next optimizer step uses it."
            )
        else:
            t.add(f" kept the learning rate at {after} ({kind}).")
