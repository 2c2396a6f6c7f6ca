"""A failed backward can leave partial gradients

loss1.backward() without retain_graph frees the tensors saved by the trunk. loss2 then
fails when it reaches the trunk. This snippet fails: loss2.backward() raises a
RuntimeError ("Trying to backward through the graph a second time"). But before reaching
the trunk it already went through loss2's own head, whose saved tensors were never freed,
so w2.grad was written before the error.

Watch: when loss2.backward fails, w2.grad is already filled while w.grad still holds only
loss1's share; a failed backward is not all-or-nothing.
"""

import torch

x = torch.tensor([0.5, -1.0, 2.0])
w = torch.tensor([1.0, 0.5, -0.5], requires_grad=True)
w1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
w2 = torch.tensor([-1.0, 0.0, 1.0], requires_grad=True)

trunk = torch.tanh(x * w)
loss1 = (trunk * w1).sum()
loss2 = (trunk * w2).mean()

loss1.backward()
print("w.grad after loss1:", w.grad)
print("w2.grad before loss2:", w2.grad)  # None

loss2.backward()  # fails at the trunk, after w2.grad was already written
