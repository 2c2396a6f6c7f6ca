"""Forward-mode AD with dual tensors next to a reverse-mode backward on the same function."""

import torch
import torch.autograd.forward_ad as fwAD

x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
tangent = torch.tensor([1.0, 0.0, 0.0])


def f(v):
    return (v.sin() * v).sum()


with fwAD.dual_level():
    dual = fwAD.make_dual(x, tangent)
    out = f(dual)
    primal, jvp = fwAD.unpack_dual(out)
print(primal, jvp)  # jvp = df/dx[0]
loss = f(x)
loss.backward()
print(x.grad)
