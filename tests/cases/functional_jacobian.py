"""torch.autograd.functional.jacobian, vectorized and not; then a backward on the same input."""

import torch
from torch.autograd.functional import jacobian


def f(v):
    return v.exp() * v.sum()


x = torch.tensor([0.1, 0.2, 0.3], requires_grad=True)
j_loop = jacobian(f, x)
j_vec = jacobian(f, x, vectorize=True)
print(torch.allclose(j_loop, j_vec), j_loop)
f(x).sum().backward()
print(x.grad)
