"""An in-place change on a tensor no node saved is fine."""

import torch

x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
y = x + 1  # AddBackward0 saves nothing
y.mul_(2)  # MulBackward0 with a number saves nothing either
loss = y.sum()
loss.backward()
print(x.grad)
