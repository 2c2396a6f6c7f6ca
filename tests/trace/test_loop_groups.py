"""frontend/model.js groups a loop's iterations (NodeInfo.iteration), against plain torch: one
group per iteration the loop ran, each holding the nodes that iteration built."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from gradstep.pipeline import explained

ROOT = Path(__file__).resolve().parents[2]

RNN = """\
import torch
torch.manual_seed(0)
cell = torch.nn.RNNCell(3, 4)
xs = torch.randn(STEPS, 2, 3)
h = torch.zeros(2, 4)
for x in xs:
    h = cell(x, h)
h.sum().backward()
"""

TRAIN = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()) for _ in range(4)])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(5, 3)
for epoch in range(4):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
"""

LAYERS = """\
import torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(4)])
    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x
net = Net()
net(torch.randn(2, 3)).sum().backward()
"""


def _groups(trace: dict) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node")
    out = subprocess.run(
        [node, str(ROOT / "server" / "testkit" / "loop_groups_node.mjs")],
        input=json.dumps(trace),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def _new_nodes_per_step(steps: int) -> list[int]:
    """Plain torch: the autograd nodes (not AccumulateGrad) each step of RNN's loop adds to h's graph."""
    torch.manual_seed(0)
    cell = torch.nn.RNNCell(3, 4)
    xs = torch.randn(steps, 2, 3)
    h = torch.zeros(2, 4)
    seen: set = set()
    counts = []
    for x in xs:
        h = cell(x, h)
        stack, new = [h.grad_fn], 0
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            new += type(fn).__name__ != "AccumulateGrad"
            stack.extend(f for f, _ in fn.next_functions)
        counts.append(new)
    return counts


@pytest.mark.parametrize("steps", [12, 30])
def test_each_time_step_of_an_unrolled_cell_is_a_group_holding_the_nodes_it_built(steps):
    got = _groups(explained(RNN.replace("STEPS", str(steps))))
    iterations = [g for g in got["groups"] if g["kind"] == "iteration"]
    assert [g["iteration"] for g in iterations] == list(range(1, steps + 1))
    assert [len(g["nodes"]) for g in iterations] == _new_nodes_per_step(steps)
    assert all(g["label"] == f"cell · t={g['iteration']}" for g in iterations)


def test_the_iterations_are_in_one_box_for_their_loop():
    got = _groups(explained(RNN.replace("STEPS", "30")))
    loops = [g for g in got["groups"] if g["kind"] == "loop"]
    iterations = [g for g in got["groups"] if g["kind"] == "iteration"]
    assert len(loops) == 1 and loops[0]["label"] == "loop · 30 iterations"
    assert loops[0]["size"] == sum(len(g["nodes"]) for g in iterations)
    assert all(g["parent"] == loops[0]["id"] for g in iterations)


def test_a_loop_that_built_a_few_nodes_is_drawn_as_it_is():
    got = _groups(explained(RNN.replace("STEPS", "3")))
    assert not [g for g in got["groups"] if g["kind"] != "module"]


def test_a_training_loops_iterations_hold_their_modules_and_the_parameters_stay_in_the_module():
    got = _groups(explained(TRAIN))
    by_id = {g["id"]: g for g in got["groups"]}
    iterations = [g for g in got["groups"] if g["kind"] == "iteration"]
    assert [g["label"] for g in iterations] == [f"iteration {k}" for k in range(1, 5)]
    plain: dict = {}
    exec(compile(TRAIN, "<plain>", "exec"), plain)  # noqa: S102 - plain torch, no tracer
    with_params = {name.rsplit(".", 1)[0] for name, _ in plain["model"].named_parameters(prefix="model")}
    for it in iterations:
        # nested module boxes inside each iteration, named by the module's path
        inside = {g["module"] for g in got["groups"] if g["id"].startswith(f"{it['id']}.")}
        assert inside >= with_params
    # each parameter's AccumulateGrad is drawn once, in its module's own box, outside the loop
    for path in with_params:
        assert by_id[path]["kind"] == "module" and len(by_id[path]["nodes"]) == 2


def test_a_loop_inside_a_modules_forward_is_grouped_by_the_modules_not_as_iterations():
    got = _groups(explained(LAYERS))
    assert not [g for g in got["groups"] if g["kind"] != "module"]
    plain: dict = {}
    exec(compile(LAYERS, "<plain>", "exec"), plain)  # noqa: S102 - plain torch, no tracer
    layers = {f"net.layers.{i}" for i in range(len(plain["net"].layers))}
    assert layers <= {g["id"] for g in got["groups"]}
