"""torch.func.vjp returns the output and a function for vector-Jacobian products."""

import torch
from torch.func import vjp

x = torch.tensor([0.5, 1.0, 1.5], requires_grad=True)
out, vjp_fn = vjp(torch.sin, x)
(vx,) = vjp_fn(torch.ones(3))
print(out, vx)
y = (x.sin() * x).sum()
y.backward()
print(x.grad)
