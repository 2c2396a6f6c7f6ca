"""Second backward: the part that saves nothing works, the rest fails."""

import torch

a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([0.5, 0.5], requires_grad=True)
s = a + b  # AddBackward0: saves nothing
total = s.sum()
total.backward()
total.backward()  # works: nothing was freed
p = (s * b).sum()  # MulBackward0 saves s and b
p.backward()
try:
    p.backward()
except RuntimeError:
    print("second backward through MulBackward0 fails")
print(a.grad, b.grad)
