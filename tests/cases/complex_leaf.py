"""A complex leaf: the gradient of a real loss is the conjugate Wirtinger derivative."""

import torch

z = torch.tensor([1.0 + 2.0j, -0.5 + 0.5j], requires_grad=True)
loss = (z * z).real.sum()
loss.backward()
print(z.grad)
z.grad = None
mag = (z.abs() ** 2).sum()
mag.backward()
print(z.grad)  # 2 z
