"""Two outputs from one graph

d and e both hang off the same node c, so they share the part of the graph a -> b -> c.
Backward from d with retain_graph=True keeps the saved tensors of that shared part alive,
so backward from e can run through it afterwards. a.grad sums both contributions.

Watch: the saved buffers of the shared nodes PowBackward0 (b = a**2) and MulBackward0
(c = b * 2) stay retained after d.backward; a.grad grows between the two calls.
"""

import torch

a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
b = a**2
c = b * 2
d = c.mean()
e = c.sum()

d.backward(retain_graph=True)
print("a.grad after d.backward:", a.grad)  # 4a / 3

e.backward()
print("a.grad after e.backward:", a.grad)  # 4a / 3 + 4a
