"""backward on a tensor that does not require grad."""

import torch

x = torch.tensor([1.0, 2.0])
with torch.no_grad():
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    y = (x * w).sum()
y.backward()
