"""A nan gradient from sqrt at zero

A distance sqrt((x - y)²) is 0 where x equals y, and the derivative of sqrt(u) is
1 / (2·sqrt(u)): infinite at u = 0. Backward multiplies it by the zero from the square and
gets 0 · inf = nan. Nothing raises; the nan just sits in x.grad and would spread into x at
the next optimizer step.

Watch: x.grad's first entry is nan, and SqrtBackward0 is the node where the gradient
first went non-finite. The diagnosis adds an epsilon (or clamps) under the sqrt and
checks the gradients are finite.
"""

import torch

x = torch.tensor([0.0, 3.0, 4.0], requires_grad=True)
y = torch.zeros(3)

distance = torch.sqrt((x - y) ** 2)  # 0 at the first entry
distance.sum().backward()
print("x.grad:", x.grad)
