"""Cost of the update steps (tracer/updates.py) in a training loop: traced with them vs traced without
(the optimizer calls left unpatched), and plain, interleaved in one process.

Two loops: the tracer benchmark's 24-layer TransformerEncoder trained by Adam for 8 iterations (its
first 3 iterations' zero_grad and step are steps: ~300 parameters copied and normed each), and a
small Linear model trained by SGD for 200 iterations (past 3, update calls run untouched). Prints
the median wall time of each kind of run, the ratios, and the step counts. Usage:
    python benchmarks/update_steps_cost.py [--repeat N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from gradstep.tracer import patches, record, updates

BIG = """
import torch
from torch import nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.1, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=24, enable_nested_tensor=False)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(8, 16, 64)
for epoch in range(8):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
"""

SMALL = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 8)
y = torch.randn(32, 1)
for epoch in range(200):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
"""


@contextlib.contextmanager
def _untraced(rec):
    yield


def plain(code: str) -> int:
    exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})
    return 0


def traced(code: str) -> int:
    return len(record(code)["steps"])


def traced_without_updates(code: str) -> int:
    saved = patches.updates.installed
    patches.updates.installed = _untraced
    try:
        return len(record(code)["steps"])
    finally:
        patches.updates.installed = saved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core each: the machine's other load disturbs less
    assert updates.installed is patches.updates.installed
    kinds = {"plain": plain, "traced, no update steps": traced_without_updates, "traced": traced}
    for name, code in (("transformer, Adam, 8 iterations", BIG), ("Linear, SGD, 200 iterations", SMALL)):
        times: dict[str, list[float]] = {k: [] for k in kinds}
        steps: dict[str, int] = {}
        for fn in kinds.values():
            fn(code)  # warm-up
        for _ in range(args.repeat):
            for kind, fn in kinds.items():
                t0 = time.perf_counter()
                steps[kind] = fn(code)
                times[kind].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name}:")
        for kind in kinds:
            print(f"  {kind:>24}: {med[kind] * 1000:8.1f} ms  ({steps[kind]} steps)")
        print(f"  update steps cost: x{med['traced'] / med['traced, no update steps']:.3f} of the traced run")


if __name__ == "__main__":
    main()
