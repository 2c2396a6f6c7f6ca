"""Two outputs, graph freed too early

Same graph as before: d and e share a -> b -> c. This time d.backward() runs without
retain_graph, which frees the tensors saved along a -> b -> c. This snippet fails:
e.backward() needs those saved tensors and raises a RuntimeError ("Trying to backward
through the graph a second time").

Watch: after d.backward the buffers of MulBackward0 and PowBackward0 are freed; a.grad
keeps d's contribution when e.backward fails.
"""

import torch

a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
b = a**2
c = b * 2
d = c.mean()
e = c.sum()

d.backward()
print("a.grad after d.backward:", a.grad)

e.backward()  # fails: the shared nodes' saved tensors were freed by d.backward
