"""Tensors held in a list and a tuple are named var[i]."""

import torch

params = [torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor(0.5, requires_grad=True)]
pair = (torch.tensor([3.0], requires_grad=True), torch.tensor([4.0]))
y = (params[0] * params[1]).sum() + (pair[0] * pair[1]).sum()
y.backward()
print(params[0].grad, params[1].grad, pair[0].grad)
