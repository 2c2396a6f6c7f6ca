"""autograd.grad with an input the output does not depend on."""

import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
unused = torch.tensor([5.0], requires_grad=True)
y = (x**2).sum()
gx, gu = torch.autograd.grad(y, [x, unused], allow_unused=True, retain_graph=True)
print(gx, gu)
try:
    torch.autograd.grad(y, [x, unused])
except RuntimeError as e:
    print("without allow_unused:", type(e).__name__)
(gx2,) = torch.autograd.grad(y, x)
