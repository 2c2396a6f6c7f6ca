"""Backward twice without retain_graph

By default backward frees the tensors each node saved for its gradient, as soon as it has
used them. A second backward through the same graph then has nothing to work with.
This snippet fails: the second y.backward() raises a RuntimeError ("Trying to backward
through the graph a second time") because the first call freed the saved tensors.

Watch: after the first backward the saved buffers of PowBackward0 are freed, and x.grad
keeps the value from the first call when the second one fails.
"""

import torch

x = torch.tensor(2.0, requires_grad=True)
y = x**7

y.backward()
print("after first backward:", x.grad)  # 7 * 2**6 = 448

y.backward()  # fails: the saved x was freed by the first call
