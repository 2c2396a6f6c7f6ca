"""A running total of losses that keeps every iteration's graph alive: plain PyTorch shows the total's
graph growing with the iterations; the diagnosis quotes the climb and the fix (.item()) holds no graph,
with the same total; totals kept as numbers, or summed on purpose for one backward, stay silent."""

from __future__ import annotations

import re

import pytest
import torch
from test_diagnose import code_of, diagnoses, only, plain_ok

KIND = "running_total_keeps_graph"

VARIANTS = {
    "in_a_loop": """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        running = 0.0
        for step in range(4):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            running += loss
        print(running)
        """,
    "in_a_function": """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        def train(steps):
            running = 0.0
            for _ in range(steps):
                opt.zero_grad()
                loss = model(x).pow(2).mean()
                loss.backward()
                opt.step()
                running = running + loss
            return running
        running = train(4)
        print(running)
        """,
    "evaluation_loop": """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        batches = torch.randn(4, 8, 4)
        total = 0.0
        for x in batches:
            loss = model(x).pow(2).mean()
            total += loss
        print(total / len(batches))
        """,
}
TOTAL = {"in_a_loop": "running", "in_a_function": "running", "evaluation_loop": "total"}
ACCUMULATES = {
    "in_a_loop": "running += loss",
    "in_a_function": "running = running + loss",
    "evaluation_loop": "total += loss",
}


def namespace(code: str) -> dict:
    scope = {"__name__": "__main__"}
    exec(compile(code, "<snippet>", "exec"), scope)
    return scope


def graph_size(t: torch.Tensor) -> int:
    """Nodes reachable from a tensor's grad_fn, in plain torch."""
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
    return len(seen)


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if line.strip() == text)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_plain_torch_shows_the_total_holding_every_iterations_graph(variant: str):
    ns = namespace(code_of(VARIANTS[variant]))
    total, last = ns[TOTAL[variant]], ns.get("loss")
    one = graph_size(last) if last is not None else graph_size(ns["model"](ns["x"]).pow(2).mean())
    assert graph_size(total) > 3 * (one - 2)  # 4 iterations' graphs (they share only the parameters' leaves)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_fires_at_the_accumulating_line_with_a_climbing_count(variant: str):
    code = code_of(VARIANTS[variant])
    d = only(code, KIND)
    assert d["severity"] == "warning"
    assert d["line"] == _line_of(code, ACCUMULATES[variant])
    counts = [int(n) for n in re.search(r"grow: ([\d → ]+)", d["message"]).group(1).split(" → ")]
    assert len(counts) >= 3 and counts == sorted(set(counts))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_item_fix_keeps_no_graph_and_the_same_total(variant: str):
    code = code_of(VARIANTS[variant])
    f = only(code, KIND)["fixes"][0]
    plain_ok(f["code"])
    original, fixed = namespace(code)[TOTAL[variant]], namespace(f["code"])[TOTAL[variant]]
    assert isinstance(fixed, float)  # a number: no graph to keep
    assert abs(fixed - original.item()) <= 1e-5 * max(1.0, abs(fixed))
    flat = re.search(r"checked: graph nodes alive at line \d+: ([\d → ]+)", f["explanation"]).group(1)
    assert len(set(flat.split(" → ")[1:])) == 1  # flat from the second iteration on


@pytest.mark.parametrize(
    "code",
    [
        VARIANTS["in_a_loop"].replace("running += loss", "running += loss.item()"),
        VARIANTS["in_a_loop"].replace("running += loss", "running += loss.detach()"),
        """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        total = 0.0
        for x in torch.randn(3, 8, 4):
            total = total + model(x).pow(2).mean()
        total.backward()
        """,
        """
        import torch
        x = torch.tensor(2.0, requires_grad=True)
        y = x**2
        total = torch.zeros(())
        for _ in range(3):
            total = total + y
        print(total)
        """,
    ],
    ids=["item", "detach", "summed_for_one_backward", "adds_a_tensor_made_once"],
)
def test_stays_quiet_when_the_total_is_a_number_or_meant_to_be_differentiated(code: str):
    assert diagnoses(code_of(code)) == []
