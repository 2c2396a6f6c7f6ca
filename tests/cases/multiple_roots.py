"""torch.autograd.backward on two roots at once."""

import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x.sin()
z = x.cos()
torch.autograd.backward([y.sum(), z * 2], grad_tensors=[None, torch.tensor([1.0, 0.0, -1.0])])
print(x.grad)
torch.autograd.backward([y, z], [torch.ones(3), torch.ones(3)])  # y and z were freed
