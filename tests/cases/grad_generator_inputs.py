"""Generators and tuples as inputs: model.parameters() goes straight into grad and backward."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(2, 2)
x = torch.randn(3, 2)
loss = model(x).sum()
gw, gb = torch.autograd.grad(loss, model.parameters(), retain_graph=True)
print(gw, gb)
loss.backward(inputs=model.parameters(), retain_graph=True)
print(model.weight.grad, model.bias.grad)
torch.autograd.backward((loss,), inputs=(model.bias,))
print(model.bias.grad)
