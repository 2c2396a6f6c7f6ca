"""nn.functional.linear_cross_entropy: projection and cross-entropy in one call, reference and chunked."""

import torch
from torch import nn

torch.manual_seed(0)
hidden = torch.randn(4, 3, requires_grad=True)
weight = torch.randn(5, 3, requires_grad=True)
target = torch.tensor([0, 4, 2, 1])
loss = nn.functional.linear_cross_entropy(hidden, weight, target)
loss.backward()
print(loss.item(), weight.grad[0])
weight.grad = None
hidden.grad = None
chunked = nn.functional.linear_cross_entropy(hidden, weight, target, options=nn.LinearCrossEntropyOptions())
chunked.backward()
print(torch.allclose(chunked, loss), hidden.grad)
