"""torch.autograd.backward called directly, with a gradient."""

import torch
from torch.autograd import backward

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x.sqrt()
backward(y, torch.tensor([1.0, 1.0, 2.0]))
print(x.grad)
