"""torch.func.grad next to an ordinary backward on the same parameters."""

import torch
from torch.func import grad

w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
x = torch.tensor([1.0, 2.0, 3.0])


def loss_fn(weights, inputs):
    return (weights * inputs).tanh().sum()


dw = grad(loss_fn)(w, x)  # computed functionally: w.grad stays None
print(dw, w.grad)
loss = loss_fn(w, x)
loss.backward()
print(w.grad)
