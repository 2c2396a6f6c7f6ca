"""backward(inputs=...) only accumulates into the listed tensors."""

import torch

a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([3.0, 4.0], requires_grad=True)
c = a * b
c.retain_grad()
loss = (c * c).sum()
loss.backward(inputs=[a], retain_graph=True)
print(a.grad, b.grad)
loss.backward(inputs=[b, c])
print(a.grad, b.grad, c.grad)
