"""Two losses on a shared trunk: sum them

A trunk (here a tanh layer with weight w) feeds two heads, each with its own loss.
The simplest way to train both is to add the losses and call backward once: the trunk
is walked a single time, and no retain_graph is needed.

Watch: one backward call fills w.grad, w1.grad and w2.grad; the trunk's TanhBackward0
node runs once and its buffer is freed once.
"""

import torch

x = torch.tensor([0.5, -1.0, 2.0])
w = torch.tensor([1.0, 0.5, -0.5], requires_grad=True)
w1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
w2 = torch.tensor([-1.0, 0.0, 1.0], requires_grad=True)

trunk = torch.tanh(x * w)
loss1 = (trunk * w1).sum()
loss2 = (trunk * w2).mean()

total = loss1 + loss2
total.backward()
print("w.grad:", w.grad)
print("w1.grad:", w1.grad)
print("w2.grad:", w2.grad)
