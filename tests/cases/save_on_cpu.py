"""save_on_cpu: every saved tensor is packed into CPU memory and unpacked again in backward."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 4), nn.Sigmoid(), nn.Linear(4, 1))
x = torch.randn(5, 3)
with torch.autograd.graph.save_on_cpu(pin_memory=False):
    loss = model(x).pow(2).mean()
loss.backward()
print(model[0].weight.grad)
