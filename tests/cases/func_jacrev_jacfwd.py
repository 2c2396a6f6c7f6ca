"""torch.func.jacrev and jacfwd agree; a backward through ordinary ops follows."""

import torch
from torch.func import jacfwd, jacrev

x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)


def f(v):
    return v.sin() * v.sum()


j_rev = jacrev(f)(x)
j_fwd = jacfwd(f)(x)
print(torch.allclose(j_rev, j_fwd), j_rev)
f(x).sum().backward()
print(x.grad)
