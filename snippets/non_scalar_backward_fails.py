"""backward on a vector needs a gradient

backward() with no argument only works on a single number (a scalar), because it starts
from d(output)/d(output) = 1. When the output is a vector PyTorch cannot guess which
combination of its entries you want the gradient of. This snippet fails: y.backward()
raises a RuntimeError ("grad can be implicitly created only for scalar outputs").

Watch: the graph for y is built, but backward stops before running any node, so x.grad
stays None.
"""

import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x**2
print("y:", y)  # a vector of 3 values, not a scalar

y.backward()  # fails: y has 3 elements
