"""nn.Sequential: parameters are named model.<index>.<name>."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
x = torch.randn(5, 3)
target = torch.randn(5, 1)
loss = nn.functional.mse_loss(model(x), target)
loss.backward()
print(model[0].weight.grad.shape)
