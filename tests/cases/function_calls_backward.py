"""backward called inside a function defined in the snippet."""

import torch

w = torch.tensor([2.0, -1.0], requires_grad=True)


def train_step(x):
    hidden = (w * x).sigmoid()
    hidden.retain_grad()
    loss = hidden.sum()
    loss.backward()
    return hidden


h1 = train_step(torch.tensor([1.0, 1.0]))
h2 = train_step(torch.tensor([0.5, -2.0]))
print(w.grad, h1.grad, h2.grad)
