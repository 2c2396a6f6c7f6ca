"""Retain graph: the second backward accumulates

With retain_graph=True the saved tensors survive the first backward, so you can call
backward again. The second call computes the very same first derivative, 7 * x**6, and
adds it to x.grad, which now holds twice that value. It is not a second derivative.

Watch: x.grad goes from 7 * x**6 to double that; the saved buffer of the PowBackward0 node
stays retained after the first call.
"""

import torch

x = torch.tensor(2.0, requires_grad=True)
y = x**7

y.backward(retain_graph=True)
print("after first backward:", x.grad)  # 7 * 2**6 = 448

y.backward()
print("after second backward:", x.grad)  # 896 = 2 * 448, not the second derivative 42 * x**5 = 1344
