"""An in-place change breaks one backward; rebuilding the graph fixes it."""

import torch

x = torch.tensor([0.5, 1.0, 1.5], requires_grad=True)
y = x.exp()  # ExpBackward0 saves its result, y itself
z = (y * x).sum()
y.add_(1)  # bumps y's version: ExpBackward0 and MulBackward0 hold a stale y

try:
    z.backward()
except RuntimeError as e:
    print("failed:", type(e).__name__)

y = x.exp()
z = (y * x).sum()
z.backward()
print(x.grad)
