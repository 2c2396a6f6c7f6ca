"""A backward through a graph whose saved tensors an earlier call already released.

Fixes: keep the graph with ``retain_graph=True`` on the earlier call, or (two
different losses) one backward on their sum, which gives the same gradients
for less memory.
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts, hidden_state, stale_graph
from gradstep.diagnose.calls import api_of, output_of, replace_output, set_keyword, the_call_at
from gradstep.diagnose.candidate import Candidate, CandidateFix, fix_of
from gradstep.diagnose.source import Source, assigned_names, keyword, moved_line, names_in
from gradstep.diagnose.toolkit import calls_failing_with
from gradstep.printing import fmt_bytes

KIND = "backward_through_freed_graph"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = (
    "backward_twice_fails",
    "shared_trunk_partial_grads",
    "two_outputs_without_retain_fails",
    "exercise_retain_graph",
)


def _call_label(src: Source, call: ast.Call) -> str:
    text = src.text(call)
    return text if len(text) <= 60 and "\n" not in text else api_of(call)


def _retain_fix(src: Source, call: ast.Call, line: int) -> CandidateFix | None:
    code = src.apply([set_keyword(src, call, "retain_graph", "True")])
    if code is None:
        return None

    fixed_line = moved_line(src.code, code, line)

    def explain(fixed: dict) -> str:
        held = next((s for s in facts.calls(fixed) if s.get("line") == fixed_line), None)
        size = f" ({fmt_bytes(held.get('saved_bytes', 0))} in this run)" if held else ""
        return (
            f"retain_graph=True on the call at line {line} keeps every tensor the graph saved{size} until the "
            "graph itself is dropped, so the later backward can go through it again; its gradients add to .grad. "
            "It costs that memory for as long as the graph lives."
        )

    return CandidateFix("retain", f"Keep the graph: retain_graph=True at line {line}", explain, code)


def _sum_fix(src: Source, first: ast.Call, second: ast.Call) -> CandidateFix | None:
    """One backward on ``a + b`` instead of ``a.backward(); b.backward()`` (statements of the same block)."""
    stmts = [src.statement_of(first), src.statement_of(second)]
    if any(
        not isinstance(s, ast.Expr) or s.value is not c for s, c in zip(stmts, (first, second), strict=True)
    ):
        return None
    if api_of(first) == "torch.autograd.grad" or api_of(second) == "torch.autograd.grad":
        return None
    for call in (first, second):
        extra = [k.arg for k in call.keywords if k.arg != "retain_graph"]
        if extra or len(call.args) > (0 if api_of(call) == "Tensor.backward" else 1):
            return None
    a, b = output_of(first), output_of(second)
    if a is None or b is None or src.text(a) == src.text(b):
        return None
    where_a, where_b = src.body_of(stmts[0]), src.body_of(stmts[1])
    if where_a is None or where_b is None or where_a[0] is not where_b[0] or where_a[1] >= where_b[1]:
        return None
    body, i, j = where_a[0], where_a[1], where_b[1]
    rebound = set().union(*(assigned_names(s) for s in body[i + 1 : j])) if j > i + 1 else set()
    if rebound & names_in(a):
        return None
    a_text, b_text = src.text(a), src.text(b)
    edits = [src.delete(stmts[0]), replace_output(src, second, f"({a_text} + {b_text})")]
    retain = keyword(second, "retain_graph")
    if retain is not None:
        edits.append(src.replace(retain.value, "False"))

    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        # the gradient of a sum is the sum of the gradients: same .grad as two retained backwards
        return facts.same_grads(facts.final_grads(fixed), facts.final_grads(siblings["retain"]))

    return fix_of(
        src,
        edits,
        "sum",
        f"One backward on the summed losses: ({a_text} + {b_text}).backward()",
        (
            f"The gradient of a sum is the sum of the gradients, so `({a_text} + {b_text}).backward()` gives every "
            ".grad the same value as the two backward calls with retain_graph=True (checked on this run). It walks "
            "the shared part of the graph once and frees each saved tensor as soon as it is used, so it needs less "
            "memory than keeping the whole graph for a second call."
        ),
        intent=intent,
        needs=("retain",),
    )


def find(trace: dict, src: Source) -> list[Candidate]:
    for step in calls_failing_with(trace, facts.FREED_MARK):
        if hidden_state.carried_through(trace, src, step) is not None:
            return []  # the loop's hidden state is the cause: that rule says so
        if stale_graph.explains(trace, src, step):
            return []  # a training loop on a graph built before it: that rule says so
        failed = facts.failed_node(step)
        line = step.get("line")
        freeing = facts.freed_by(trace, failed, step["index"]) if failed is not None else None
        if failed is None or freeing is None:
            message = (
                f"The backward at line {line} goes through a graph whose saved tensors were already released by an "
                "earlier backward: by default backward frees them as soon as it has used them."
            )
            return [Candidate(KIND, "error", line, message)]
        node = trace["nodes"][failed]
        first_line = freeing.get("line")
        message = (
            f"The backward at line {line} goes through {node['op']} (built at line {node.get('line')}), whose saved "
            f"tensors the {'autograd.grad' if freeing['kind'] == 'grad' else 'backward'} call at line {first_line} "
            "already released: by default a backward frees what the graph saved as soon as it has used it."
        )
        fixes = []
        first_call, second_call = the_call_at(src, first_line), the_call_at(src, line)
        if first_call is not None:
            fix = _retain_fix(src, first_call, first_line)
            if fix:
                fixes.append(fix)
            if second_call is not None and first_call is not second_call:
                fix = _sum_fix(src, first_call, second_call)
                if fix:
                    fixes.append(fix)
        return [Candidate(KIND, "error", line, message, fixes)]
    return []
