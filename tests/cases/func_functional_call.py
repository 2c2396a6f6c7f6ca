"""functional_call runs a module with other parameters; backward reaches those tensors."""

import torch
from torch import nn
from torch.func import functional_call

torch.manual_seed(0)
model = nn.Linear(2, 1)
w = torch.tensor([[1.0, -2.0]], requires_grad=True)
b = torch.tensor([0.5], requires_grad=True)
x = torch.tensor([[1.0, 3.0], [2.0, -1.0]])
out = functional_call(model, {"weight": w, "bias": b}, (x,))
out.pow(2).sum().backward()
print(w.grad, b.grad, model.weight.grad)
