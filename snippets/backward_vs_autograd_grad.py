"""backward vs torch.autograd.grad

loss.backward() writes gradients into the .grad of every leaf, adding to what is already
there. torch.autograd.grad(loss, inputs) instead returns the gradients to you and leaves
.grad alone, so calling it twice does not accumulate anything.

Watch: after the two autograd.grad calls w.grad is still None; after backward it is set.
"""

import torch

w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
loss = (w**2).sum()

(g1,) = torch.autograd.grad(loss, w, retain_graph=True)
(g2,) = torch.autograd.grad(loss, w, retain_graph=True)
print("returned:", g1, g2)
print("w.grad after autograd.grad:", w.grad)  # None

loss.backward()
print("w.grad after backward:", w.grad)  # 2 * w
