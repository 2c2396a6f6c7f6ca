"""Narration of a step where the code raised outside a backward/grad call (``Step.kind`` "error").

Said first: which line raised what, and that the run ended there with the graph as shown. Then
the failure's autograd cause, where the trace shows one, and only then:

* a ``.grad`` that is None (a ``NoneType`` in the message, at a line that reads ``x.grad``): ``x``
  names a non-leaf (the node that made it, and its line), or is a leaf no backward has reached,
  or a leaf whose ``.grad`` held a gradient and was set back to None;
* ``numpy()`` of a tensor that requires grad;
* an in-place change of a leaf that requires grad (read as the ``inplace_on_leaf`` rule reads it).

Anything else is said plainly. A pure function of the trace, like the rest of ``narrate``.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from gradstep import cells
from gradstep.printing import quoted
from gradstep.trace_dicts import StepDict

if TYPE_CHECKING:
    from gradstep.narrate import _Narrator, _Text

MAX_SOURCE = 80  # a statement quoted in the narration, at most
NONE_MARK = "NoneType"  # what Python names None in a TypeError's or AttributeError's message
NUMPY_MARK = "Can't call numpy() on Tensor that requires grad"


class _Line:
    """The syntax of the line that raised: the statement, the ``.grad`` reads and ``.numpy()`` calls."""

    def __init__(self, code: str, line: int) -> None:
        self.statement: ast.stmt | None = None
        self.grad_reads: list[str] = []  # the tensors whose .grad the line reads, as the trace names them
        self.numpy_of: list[str] = []  # the tensors the line calls .numpy() of
        self.code = code
        try:
            tree, _ = cells.parse(code)
        except (SyntaxError, ValueError):
            return
        spans = lambda n: n.lineno <= line <= (n.end_lineno or n.lineno)  # noqa: E731
        simple = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.stmt)
            and spans(n)
            and not any(isinstance(c, ast.stmt) for c in ast.iter_child_nodes(n))
        ]
        if simple:
            self.statement = min(simple, key=lambda s: (s.end_lineno or s.lineno) - s.lineno)
        for n in ast.walk(self.statement) if self.statement is not None else ():
            if isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.ctx, ast.Load) and spans(n):
                self.grad_reads.append(ast.unparse(n.value))
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "numpy"
                and spans(n)
            ):
                self.numpy_of.append(ast.unparse(n.func.value))

    def source(self) -> str | None:
        """The statement as written, when it is one short line."""
        s = self.statement
        if s is None or s.end_lineno != s.lineno:
            return None
        text = ast.get_source_segment(self.code, s)
        return text if text and len(text) <= MAX_SOURCE else None


def explain(n: _Narrator, step: StepDict, states: dict, t: _Text) -> None:
    """The narration of error step ``step`` into ``t`` (``states``: its node states that say more than
    their id)."""
    error = step.get("error") or {}
    kind = error.get("type") or "an error"
    message = error.get("message") or ""
    line = step.get("line")
    code = n.source_of(step.get("file"))
    syntax = _Line(code, line) if line is not None else None
    source = syntax.source() if syntax is not None else None
    if source:
        t.add(f"`{source}` (line {n.at(step)}) raised {kind}")
    elif line is not None:
        t.add(f"Line {n.at(step)} raised {kind}")
    else:
        t.add(f"The code raised {kind}")
    if kind == "SystemExit":
        t.add(f" (exit code {quoted(message, 40)})" if message and message != "None" else "")
    t.add(", which ended the run: the graph is shown as it stood then.")
    if syntax is None:
        return
    facts = _Facts(n, step, states)
    if NONE_MARK in message:
        _none_grad(n, facts, syntax, t)
    elif NUMPY_MARK in message:
        _numpy(n, facts, syntax, t)
    else:
        _leaf_in_place(n, facts, syntax, message, t)


class _Facts:
    """What the trace says about the tensors at the step that raised, and before it."""

    def __init__(self, n: _Narrator, step: StepDict, states: dict) -> None:
        self.step = step
        self.index = step["index"]
        self.tensors = {te["name"]: te for te in step.get("tensors") or ()}
        self.grad_fn_of: dict[str, int] = {}  # variable -> the node that is its grad_fn
        for nid, st in states.items():
            if 0 <= nid < len(n.nodes) and n.nodes[nid]["op"] != "AccumulateGrad":
                for var in st.get("vars") or ():
                    self.grad_fn_of.setdefault(var, nid)
        self.alive = {st["id"] for st in step.get("nodes") or () if not st.get("dropped")}
        self.earlier = (n.trace.get("steps") or [])[: self.index]

    def requires_grad(self, name: str) -> str | None:
        """How the trace shows that ``name`` requires grad: "leaf", "graph", or None (it does not show it)."""
        te = self.tensors.get(name)
        if te is not None and te["requires_grad"]:
            return "leaf" if te["is_leaf"] else "graph"
        return "graph" if name in self.grad_fn_of else None

    def last_grad(self, leaf: dict) -> StepDict | None:
        """The last earlier step at which the leaf ``leaf`` (a tensor of this step) had a .grad: the one
        with its AccumulateGrad node, or while no graph holds one, the leaf of its name."""
        node = leaf.get("node")
        for step in reversed(self.earlier):
            for te in step.get("tensors") or ():
                same = (
                    te.get("node") == node
                    if node is not None and te.get("node") is not None
                    else (te["name"] == leaf["name"] and te["is_leaf"])
                )
                if same and te.get("grad") is not None:
                    return step
        return None

    def leaf_before(self, name: str) -> int | None:
        """The AccumulateGrad node of the leaf ``name`` named at an earlier step (the latest such)."""
        for step in reversed(self.earlier):
            for te in step.get("tensors") or ():
                if te["name"] == name and te["is_leaf"] and te.get("node") is not None:
                    return te["node"]
        return None


def _none_grad(n: _Narrator, facts: _Facts, syntax: _Line, t: _Text) -> None:
    """A ``.grad`` read on this line was None: why, for the first read the trace can explain."""
    for name in syntax.grad_reads:
        te = facts.tensors.get(name)
        if te is not None and te.get("grad") is None and te["is_leaf"] and te["requires_grad"]:
            _leaf_without_grad(n, facts, name, te, t)
            return
        if te is None and name in facts.grad_fn_of:
            _non_leaf(n, facts, syntax, name, facts.grad_fn_of[name], t)
            return


def _leaf_without_grad(n: _Narrator, facts: _Facts, name: str, te: dict, t: _Text) -> None:
    t.sentence_break()
    n.tensor_or_text(t, name, f"{name}.grad")
    node = te.get("node")
    had = facts.last_grad(te)
    if had is not None:
        t.add(
            f" is None: it held a gradient at step {had['index'] + 1} (line {n.at(had)}) and was set back to "
        )
        t.add("None since (zero_grad() does that by default, as does assigning None to it).")
        return
    t.add(" is None: ")
    n.tensor_or_text(t, name, name)
    t.add(" is a leaf that requires grad, but no backward call has reached it yet")
    if node is not None:
        t.add(" (its ")
        t.node(node, n.label(node))
        t.add(" has not run)")
    t.add(": a leaf's .grad stays None until one does.")


def _non_leaf(n: _Narrator, facts: _Facts, syntax: _Line, name: str, nid: int, t: _Text) -> None:
    info = n.nodes[nid]
    made = info.get("line")
    t.sentence_break()
    t.add(f"`{name}.grad` is None: `{name}` names a non-leaf")
    if made is not None:
        t.add(f" since line {n.at(info)}")
    t.add(" (")
    t.node(nid, n.label(nid))
    t.add("), and torch keeps .grad only for leaves (or tensors that called retain_grad()).")
    leaf = facts.leaf_before(name)
    if leaf is not None and leaf in facts.alive:
        t.add(f" Before that, `{name}` named a leaf, still in the graph as ")
        t.node(leaf, n.label(leaf))
        ran = n.ran_at.get(leaf)
        if ran is not None:
            call = facts.earlier[ran]
            t.add(f": the backward at line {n.at(call)} (step {ran + 1}) accumulated into its .grad, ")
            t.add(f"not into `{name}`'s.")
        else:
            t.add(".")
    stmt = syntax.statement
    rebinds = (
        isinstance(stmt, ast.Assign)
        and made is not None
        and stmt.lineno <= made <= (stmt.end_lineno or stmt.lineno)
        and any(isinstance(target, ast.Name) and target.id == name for target in stmt.targets)
    )
    if rebinds:
        t.add(f" To keep `{name}` the same leaf, update it in place under torch.no_grad() (`{name} -= …`).")


def _numpy(n: _Narrator, facts: _Facts, syntax: _Line, t: _Text) -> None:
    t.sentence_break()
    known = [(name, facts.requires_grad(name)) for name in syntax.numpy_of]
    known = [(name, how) for name, how in known if how is not None]
    if len(known) == 1:
        name, how = known[0]
        n.tensor_or_text(t, name, name)
        if how == "leaf":
            t.add(" is a leaf that requires grad")
        else:
            nid = facts.grad_fn_of.get(name)
            t.add(" is computed in the graph")
            if nid is not None:
                t.add(" (its grad_fn is ")
                t.node(nid, n.label(nid))
                t.add(")")
            t.add(", so it requires grad")
        t.add(
            f": torch will not hand its memory to NumPy, where autograd could not follow it. "
            f"`{name}.detach().numpy()` gives the same values without the graph."
        )
        return
    t.add(
        "The tensor requires grad: torch will not hand its memory to NumPy, where autograd could not follow "
        "it. `.detach()` it first (`t.detach().numpy()`)."
    )


def _leaf_in_place(n: _Narrator, facts: _Facts, syntax: _Line, message: str, t: _Text) -> None:
    from gradstep.diagnose import leaf_inplace  # the rule's own reading of the statement

    if leaf_inplace.LEAF_MARK not in message or syntax.statement is None:
        return
    name = leaf_inplace._changed(syntax.statement)
    te = facts.tensors.get(name) if name else None
    t.sentence_break()
    view = leaf_inplace.VIEW_MARK in message
    if te is None or not (te["is_leaf"] and te["requires_grad"]):
        t.add(
            "It changes "
            + ("a view of " if view else "")
            + "a leaf that requires grad in place, outside torch.no_grad(): autograd would have to record the "
            "change in the graph that starts at that leaf, so torch refuses."
        )
        return
    t.add("It changes " + ("a view of " if view else ""))
    n.tensor_or_text(t, name, name)
    t.add(
        f" in place, and `{name}` is a leaf that requires grad: autograd would have to record the change in the "
        f"graph that starts at `{name}`, so torch refuses. Under torch.no_grad() the change is not recorded and "
        f"`{name}` stays the same leaf."
    )
