"""retain_grad() after backward is too late

retain_grad() asks the backward calls that run after it to keep a non-leaf's gradient.
Called after the only backward, it keeps nothing: the gradient flowed through h's
grad_fn and was passed on to x, never stored in h. PyTorch says nothing (h does retain
now), and h.grad is None.

Watch: the step at h.retain_grad() says the backward already ran through h's
MulBackward0; the diagnosis moves the call before the backward, and the fixed run
fills h.grad with dz/dh = 2h.
"""

import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
h = x * 3
z = (h * h).sum()
z.backward()
h.retain_grad()  # too late: the backward above already ran
print("h.grad:", h.grad)  # None
print("x.grad:", x.grad)  # 18 * x
