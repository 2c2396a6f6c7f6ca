"""retain_grad before or after later ops

Only leaf tensors keep a .grad by default; intermediate (non-leaf) tensors drop theirs.
Calling retain_grad() on a non-leaf asks PyTorch to keep it. It works whether you call it
right after creating the tensor or later, after more operations were built on top of it:
what matters is that it is called before backward runs.

Watch: both hidden_early.grad and hidden_late.grad are filled after the backward call,
while other non-leaf tensors (like out) keep .grad = None.
"""

import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)

hidden_early = x * 2
hidden_early.retain_grad()  # called right away
hidden_late = hidden_early**2
out = hidden_late.sum()
hidden_late.retain_grad()  # called after `out` was already built on top of it

out.backward()
print("hidden_early.grad:", hidden_early.grad)  # 2 * hidden_early
print("hidden_late.grad:", hidden_late.grad)  # ones
print("x.grad:", x.grad)
