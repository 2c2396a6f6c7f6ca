"""autograd.grad with create_graph, then backward through the gradient."""

import torch

x = torch.tensor([0.5, 1.5], requires_grad=True)
y = (x**3).sum()
(g,) = torch.autograd.grad(y, x, create_graph=True)  # g = 3 x^2, with a graph
penalty = (g**2).sum()
penalty.backward()
print(x.grad)  # d/dx sum(9 x^4) = 36 x^3
