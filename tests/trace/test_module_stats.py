"""frontend/module-stats.js (a module box's facts, the gradient-flow chart) against plain torch."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from gradstep.pipeline import explained

ROOT = Path(__file__).resolve().parents[2]

CODE = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(3, 4),
    torch.nn.Tanh(),
    torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
    torch.nn.Linear(4, 1),
)
x = torch.randn(5, 3)
loss = model(x).pow(2).mean()
loss.backward(retain_graph=True)
loss.backward()
"""


def _stats(trace: dict) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node")
    out = subprocess.run(
        [node, str(ROOT / "server" / "testkit" / "module_stats_node.mjs")],
        input=json.dumps(trace),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def _module_norms(model: torch.nn.Module) -> dict[str, float]:
    """The L2 norm over each module's parameters' .grad, by the snippet's module path."""
    out: dict[str, float] = {}
    for path, mod in model.named_modules(prefix="model"):
        grads = [p.grad for p in mod.parameters() if p.grad is not None]
        if grads:
            out[path] = math.sqrt(sum(float(g.double().norm()) ** 2 for g in grads))
    return out


def test_each_modules_grad_norm_is_torchs_after_each_backward():
    trace = explained(CODE)
    stats = _stats(trace)
    calls = [i for i, s in enumerate(trace["steps"]) if s["kind"] == "backward"]
    assert len(calls) == 2
    plain: dict = {}
    exec(compile(CODE, "<plain>", "exec"), plain)  # plain torch, no tracer
    want = _module_norms(plain["model"])
    # the second call doubled every .grad: its norms are twice the first's
    for i, scale in zip(calls, (0.5, 1.0), strict=True):
        got = {p: m["gradNorm"] for p, m in stats[i].items() if m["gradNorm"] is not None}
        assert set(got) == set(want)
        for path, norm in want.items():
            assert got[path] == pytest.approx(norm * scale, rel=1e-6), path


def test_a_module_counts_the_nodes_that_ran_and_the_bytes_the_last_call_freed():
    trace = explained(CODE)
    stats = _stats(trace)
    first, last = (i for i, s in enumerate(trace["steps"]) if s["kind"] == "backward")
    whole = stats[first]["model"]
    assert whole["executed"] == whole["alive"] > 0
    # retained by the first call, released by the second
    assert whole["savedFreed"] == 0 and whole["savedHeld"] > 0
    assert stats[last]["model"]["savedHeld"] == 0
    assert stats[last]["model"]["savedFreed"] == whole["savedHeld"]
    assert stats[first]["model.2"]["nodes"] < whole["nodes"]
