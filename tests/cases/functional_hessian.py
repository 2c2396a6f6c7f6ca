"""torch.autograd.functional.hessian, vectorized and not, with create_graph on."""

import torch
from torch.autograd.functional import hessian


def energy(v):
    return (v**3).sum() + v[0] * v[1]


x = torch.tensor([1.0, -0.5], requires_grad=True)
h_loop = hessian(energy, x)
h_vec = hessian(energy, x, vectorize=True, create_graph=True)
print(h_loop, h_vec.requires_grad)
h_vec.trace().backward()
print(x.grad)  # d/dx of trace(H) = 6 per entry
