"""Second derivative with create_graph

With create_graph=True the backward pass is itself recorded as a graph, so the gradient
it produces can be differentiated again. Using backward for both steps mixes the two
derivatives in x.grad: the second call adds the second derivative on top of the first
one. At x = 3 they are easy to tell apart: the first derivative 3 * x**2 is 27, the
second derivative 6 * x is 18. torch.autograd.grad keeps them apart. PyTorch also warns
that backward(create_graph=True) creates a reference cycle between x and x.grad.

Watch: after the first backward x.grad is 27 and has a grad_fn (it is part of a graph);
the second backward adds the second derivative, 18, so x.grad ends at 45 = 27 + 18 — the
added part is the second derivative, not the first one counted twice.
"""

import torch

x = torch.tensor(3.0, requires_grad=True)
y = x**3

y.backward(create_graph=True)  # warns about a reference cycle
dy_dx = x.grad
print("first derivative:", dy_dx)  # 3 * x**2 = 27, with a grad_fn

dy_dx.backward()
print("x.grad after second backward:", x.grad)  # 27 + 6 * x = 27 + 18 = 45: the second derivative added

# The clean way: autograd.grad returns each derivative without touching .grad
z = torch.tensor(3.0, requires_grad=True)
(first,) = torch.autograd.grad(z**3, z, create_graph=True)
(second,) = torch.autograd.grad(first, z)
print("first:", first, "second:", second, "z.grad:", z.grad)  # 27, 18, None
