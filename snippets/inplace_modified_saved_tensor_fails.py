"""In-place change of a saved tensor

sigmoid saves its output, because its gradient is y * (1 - y). Changing that output in
place (y.mul_(2)) afterwards would make the saved value wrong, so PyTorch tracks a version
counter on every tensor and checks it during backward. This snippet fails:
backward raises a RuntimeError ("one of the variables needed for gradient computation
has been modified by an inplace operation").

Watch: after mul_ y's version goes from 0 to 1 and its grad_fn becomes MulBackward0, while
SigmoidBackward0 still expects version 0 of the output it saved.
"""

import torch

x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
y = x.sigmoid()
print("y:", y, "version:", y._version)

y.mul_(2)  # changes the tensor SigmoidBackward0 saved
print("y after mul_:", y, "version:", y._version)

y.sum().backward()  # fails: the saved output is at version 1, expected 0
