"""One autograd.grad call for many inputs

Five weights feed into one long shared chain of operations. Asking for all five
gradients in one torch.autograd.grad call walks the shared chain once. Asking for them
one at a time walks it five times (and needs retain_graph=True on every call so the
graph survives). The answers are identical; only the work differs.

Watch: the shared chain of SinBackward0 and MulBackward0 nodes runs once for the single
call and once per call in the loop; the chain_runs counter goes from 1 to 6.
"""

import torch

weights = [torch.tensor(0.01 * i, requires_grad=True) for i in range(1, 6)]
w1, w2, w3, w4, w5 = weights
chain_runs = []

start = w1 + 2 * w2 + 3 * w3 + 4 * w4 + 5 * w5
start.register_hook(lambda grad: chain_runs.append(1))  # called each time backward reaches `start`
deep = start
for _ in range(4):
    deep = torch.sin(deep) * 2
loss = deep**2

together = torch.autograd.grad(loss, [w1, w2, w3, w4, w5], retain_graph=True)
print("one call:", together, "chain runs:", len(chain_runs))

one_by_one = [torch.autograd.grad(loss, wi, retain_graph=True)[0] for wi in weights]
print("five calls:", one_by_one, "chain runs:", len(chain_runs))
