"""Hooks on graph nodes: a prehook and a post hook."""

import torch

calls = []
a = torch.tensor([0.2, 0.4], requires_grad=True)
b = torch.tensor([1.5, -0.5], requires_grad=True)
c = a * b
d = c.tanh()
loss = d.sum()
d.grad_fn.register_prehook(lambda grad_outputs: calls.append("pre"))
c.grad_fn.register_hook(lambda grad_inputs, grad_outputs: calls.append("post"))
loss.backward(retain_graph=True)
loss.backward()
print(calls, a.grad, b.grad)
