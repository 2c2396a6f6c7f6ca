"""The graph silently cut: a parameter the snippet trains gets no gradient, and nothing raises.

The trace shows it: after the last backward a leaf that requires grad has ``.grad``
None (the backward never reached it) or zero, and the snippet expects its gradient
(reads its ``.grad``, or gives it to an optimizer). The syntax tree shows where the
path from it to the loss was cut: ``.item()``, ``.tolist()``, ``.numpy()``,
``.detach()``, ``.data`` or ``torch.tensor(...)`` of a tensor computed from it, whose
result the loss was computed from. A deliberate ``.detach()`` (of a target, of a
frozen teacher's output) cuts a path from tensors nobody trains: it stays silent.

Fix: keep the tensor itself where it was cut (checked: the parameter's ``.grad`` is
now filled and not zero; the explanation quotes it).
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass

from gradstep.diagnose import facts
from gradstep.diagnose.calls import output_of, the_call_at
from gradstep.diagnose.candidate import Candidate, CandidateFix
from gradstep.diagnose.source import Edit, Source, call_name, moved_line
from gradstep.diagnose.toolkit import dotted_name
from gradstep.printing import fmt_number

KIND = "graph_cut"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("item_cuts_the_graph",)
_CUT_METHODS = ("item", "tolist", "numpy", "detach")
_CUT_FUNCTIONS = ("torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.from_numpy", "float", "int")
_OUTPUT = "<output>"  # the tensor a backward call differentiates, as a node of the name graph
MAX_REPORTED = 4
MAX_CUTS = 4  # cuts one fix removes on a path


@dataclass(frozen=True)
class Cut:
    node: ast.expr  # the cutting expression (the call or the .data attribute)
    inner: ast.expr  # the tensor it cuts
    how: str  # ".detach()", ".data", "torch.tensor(...)"


def _cut_of(node: ast.AST) -> Cut | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _CUT_METHODS and not node.args:
            return Cut(node, func.value, f".{func.attr}()")
        name = call_name(node)
        if name in _CUT_FUNCTIONS and len(node.args) == 1:
            return Cut(node, node.args[0], f"{name}(...)")
    if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load):
        return Cut(node, node.value, ".data")
    return None


def _reads(expr: ast.AST) -> tuple[set[str], list[tuple[Cut, set[str]]]]:
    """Names ``expr`` reads with their gradient path intact, and each cut in it with the names under it."""
    whole: set[str] = set()
    cuts: list[tuple[Cut, set[str]]] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        cut = _cut_of(node)
        if cut is not None:
            under = {n.id for n in ast.walk(cut.inner) if isinstance(n, ast.Name)}
            cuts.append((cut, under))
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            whole.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return whole, cuts


class Flow:
    """Which name is computed from which (one walk of the tree; order and scopes ignored: a loop feeds back)."""

    def __init__(self, src: Source, outputs: list[ast.expr]):
        self.intact: dict[str, set[str]] = {}
        self.cut: list[tuple[Cut, set[str], set[str]]] = []  # (cut, names under it, names it flows into)
        for node in src.walk():
            targets, value = self._assignment(src, node)
            if value is not None:
                self._add(value, targets)
        for out in outputs:
            self._add(out, {_OUTPUT})

    @staticmethod
    def _assignment(src: Source, node: ast.AST) -> tuple[set[str], ast.AST | None]:
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            return names, node.value
        if isinstance(node, ast.Return) and node.value is not None:
            fn = src.enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                return {fn.name}, node.value  # a call of the function reads its name
        if isinstance(node, ast.For | ast.AsyncFor):
            return {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}, node.iter
        return set(), None

    def _add(self, value: ast.AST, targets: set[str]) -> None:
        whole, cuts = _reads(value)
        for name in whole:
            self.intact.setdefault(name, set()).update(targets)
        for cut, under in cuts:
            self.cut.append((cut, under, targets))

    def carried(self, start: str) -> set[str]:
        """Names computed from ``start`` along intact paths."""
        seen, todo = {start}, deque([start])
        while todo:
            for nxt in self.intact.get(todo.popleft(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    def first_cut(self, root: str, reaching: set[str] | None = None) -> Cut | None:
        """A cut on a path from ``root`` to the output (None when the path is intact or there is none)."""
        carried = self.carried(root)
        if _OUTPUT in carried:
            return None
        return self.cut_between(carried, self.reaching_output() if reaching is None else reaching)

    def cut_between(self, carried: set[str], reaching: set[str]) -> Cut | None:
        """The first cut (by position) that takes a name in ``carried`` into one the output is computed from."""
        found = [c for c, under, targets in self.cut if under & carried and targets & reaching]
        return min(found, key=lambda c: (c.node.lineno, c.node.col_offset), default=None)

    def reaching_output(self) -> set[str]:
        """Names the output is computed from, along any path (cut or not): one walk backwards."""
        back: dict[str, set[str]] = {}
        for name, targets in self.intact.items():
            for t in targets:
                back.setdefault(t, set()).add(name)
        for _, under, targets in self.cut:
            for t in targets:
                back.setdefault(t, set()).update(under)
        seen, todo = {_OUTPUT}, deque([_OUTPUT])
        while todo:
            for prev in back.get(todo.popleft(), ()):
                if prev not in seen:
                    seen.add(prev)
                    todo.append(prev)
        return seen


def root_of(tensor: str) -> str:
    """``model`` of ``model.0.weight``, ``w`` of ``w``, ``params`` of ``params[0]``."""
    return tensor.split(".", 1)[0].split("[", 1)[0]


class _Wanted:
    """Whose gradients the snippet uses: ``.grad`` reads, and what it gives optimizers (one walk)."""

    def __init__(self, src: Source):
        self.read: set[str] = set()  # paths whose .grad is read
        self.owners: set[str] = set()  # `model` of optim.X(model.parameters())
        self.listed: set[str] = set()  # names in optim.X([w1, w2])
        for node in src.walk():
            if isinstance(node, ast.Attribute) and node.attr == "grad":
                path = dotted_name(node.value)
                if path is not None:
                    self.read.add(path)
            elif isinstance(node, ast.Call) and ".optim." in f".{call_name(node)}" and node.args:
                for part in ast.walk(node.args[0]):
                    if isinstance(part, ast.Call) and call_name(part).endswith("parameters"):
                        owner = dotted_name(part.func.value) if isinstance(part.func, ast.Attribute) else None
                        if owner is not None:
                            self.owners.add(owner)
                    path = dotted_name(part) if isinstance(part, ast.Name | ast.Attribute) else None
                    if path is not None:
                        self.listed.add(path)

    def __contains__(self, name: str) -> bool:
        """The snippet wants ``name``'s gradient: it reads its ``.grad`` or gives it to an optimizer."""
        if name in self.read or name in self.listed:
            return True
        return any(name.startswith(owner + ".") or owner == root_of(name) for owner in self.owners)


def _ungraded(trace: dict) -> tuple[dict, list[str]] | None:
    """The last call step that ran, and the leaves requiring grad whose .grad it left None or zero."""
    ran = [s for s in facts.calls(trace) if not s.get("error")]
    if not ran:
        return None
    last = ran[-1]
    names = [
        t["name"]
        for t in last.get("tensors") or ()
        if t["requires_grad"] and t["is_leaf"] and (t.get("grad") is None or t["grad"]["norm"] == 0)
    ]
    return last, names


def outputs_at(src: Source, lines: list[int | None]) -> list[ast.expr]:
    """What the backward/grad calls at ``lines`` differentiate."""
    calls = (the_call_at(src, line) for line in dict.fromkeys(lines))
    return [out for call in calls if call is not None and (out := output_of(call)) is not None]


def heal(src: Source, root: str, lines: list[int | None], cut: Cut) -> tuple[str, str] | None:
    """The code with ``cut`` and every further cut between ``root`` and the outputs removed (a
    ``torch.tensor(pred.item())`` cuts twice), one at a time, at most ``MAX_CUTS``; and a title."""
    code = src.apply([uncut(src, cut)])
    removed, removed_inner, removed_node = [cut.how], cut.inner, cut.node
    for _ in range(MAX_CUTS - 1):
        new = Source.parse(code) if code is not None else None
        if new is None:
            return None
        moved = [moved_line(src.code, code, line) for line in lines]
        cut = Flow(new, outputs_at(new, moved)).first_cut(root)
        if cut is None:
            if len(removed) == 1:
                title = f"Keep the tensor: use {src.text(removed_inner)} instead of {src.text(removed_node)}"
            else:
                title = f"Keep the graph: remove {' and '.join(removed)} on the way to the loss"
            return code, title
        removed.append(cut.how)
        code = new.apply([uncut(new, cut)])
    return None


def find(trace: dict, src: Source) -> list[Candidate]:
    found = _ungraded(trace)
    if found is None or not found[1]:
        return []
    last, names = found
    lines = [s.get("line") for s in facts.calls(trace)]
    outputs = outputs_at(src, lines)
    flow = Flow(src, outputs)
    out_label = src.text(outputs[-1]) if outputs else "the loss"
    wanted = _Wanted(src)
    reaching = flow.reaching_output()
    carried_by_root: dict[str, set[str]] = {}  # parameters of one module share their root's flow
    by_cut: dict[int, tuple[Cut, list[str]]] = {}
    for name in names:
        if name not in wanted:
            continue
        root = root_of(name)
        if root not in carried_by_root:
            carried_by_root[root] = flow.carried(root)
        carried = carried_by_root[root]
        if _OUTPUT in carried:
            continue  # an intact path exists: its gradient is zero for another reason
        cut = flow.cut_between(carried, reaching)
        if cut is not None:
            by_cut.setdefault(id(cut.node), (cut, []))[1].append(name)
    heal_lines = list(dict.fromkeys(lines))
    others = any(t["is_leaf"] and (t.get("grad") or {}).get("norm") for t in last.get("tensors") or ())
    grads = {t["name"]: t.get("grad") for t in last.get("tensors") or ()}
    return [
        _candidate(src, cut, cut_names, grads[cut_names[0]], last, out_label, others, heal_lines)
        for cut, cut_names in list(by_cut.values())[:MAX_REPORTED]
    ]


def _candidate(
    src: Source,
    cut: Cut,
    names: list[str],
    grad: dict | None,
    last: dict,
    out_label: str,
    others: bool,
    lines: list[int | None],
) -> Candidate:
    name = names[0]
    inner = src.text(cut.inner)
    more = f" (and {', '.join(names[1:])})" if len(names) > 1 else ""
    result = {
        ".item()": "a Python number",
        ".tolist()": "a Python list",
        ".numpy()": "a NumPy array",
    }.get(cut.how, "a new tensor with no history")
    state = "None: the backward never reached it" if grad is None else "all zeros"
    line = cut.node.lineno
    message = (
        f"`{name}`{more} requires grad, but after the backward at line {last.get('line')} its .grad is {state}. "
        f"Line {line} cuts the path from it to `{out_label}`: `{src.text(cut.node)}` turns `{inner}` into "
        f"{result}, so what is computed from it carries no gradient back to `{name}`. Nothing raises, because "
        f"`{out_label}` still has a graph "
        + ("through other tensors." if others else "(a new one, from a tensor created with requires_grad).")
    )
    fixes = []
    healed = heal(src, root_of(name), lines, cut)
    if healed:
        code, title = healed

        def intent(fixed: dict, original: dict, siblings: dict) -> bool:
            got = facts.final_grads(fixed).get(name)
            return got is not None and (got["norm"] or 0) > 0

        def explain(fixed: dict) -> str:
            got = facts.final_grads(fixed).get(name) or {}
            return (
                f"Using the tensor itself keeps its graph, so the backward reaches `{name}` (checked: {name}.grad is "
                f"filled, norm {fmt_number(got.get('norm') or 0.0)}, where it was {state.split(':')[0]}). To log a "
                "value, take .item() of it separately and keep the tensor for the loss."
            )

        fixes.append(
            CandidateFix(
                "keep_graph",
                title,
                explain,
                code,
                intent,
            )
        )
    return Candidate(KIND, "warning", line, message, fixes)


def uncut(src: Source, cut: Cut) -> Edit:
    """The cutting expression replaced by the tensor it cut."""
    inner = src.text(cut.inner)
    simple = isinstance(cut.inner, ast.Name | ast.Attribute | ast.Call | ast.Subscript)
    return src.replace(cut.node, inner if simple else f"({inner})")
