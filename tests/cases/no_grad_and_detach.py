"""no_grad and detach keep parts of the computation out of the graph."""

import torch

w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
with torch.no_grad():
    scale = w.sum()  # no graph
frozen = (w * 2).detach()  # value only
out = (w * scale + frozen * w).sum()
out.backward()
print(w.grad)
with torch.no_grad():
    w -= 0.1 * w.grad
w.grad = None
(w**2).sum().backward()
