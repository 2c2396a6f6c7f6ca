"""The snippet fails before any backward: no backward step at all."""

import torch

x = torch.ones(2, 3, requires_grad=True)
y = x * 2
z = y @ torch.ones(2, 3)  # shapes do not match
z.sum().backward()
