"""autograd.grad with a dict of parameters returns a dict; dict values and backward(inputs=dict) work too."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(3, 2)
x = torch.randn(4, 3)
loss = model(x).pow(2).mean()
params = dict(model.named_parameters())
grads = torch.autograd.grad(loss, params, retain_graph=True)
print(sorted(grads), grads["bias"])
gw, gb = torch.autograd.grad(loss, params.values(), retain_graph=True)
print(torch.equal(gb, grads["bias"]))
loss.backward(inputs=params)
print(model.weight.grad, model.bias.grad)
