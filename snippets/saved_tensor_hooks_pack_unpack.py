"""Saved-tensor hooks: what backward keeps goes through pack and unpack

Inside torch.autograd.graph.saved_tensors_hooks(pack, unpack), every tensor a node saves
for backward is handed to pack, and whatever pack returns is what the graph keeps (here a
copy); backward calls unpack on it to get a tensor back. x.exp() saves its result and
the multiply saves both of its factors: three packs. torch.autograd.graph.save_on_cpu is
built on the same hooks: it packs each saved tensor into CPU memory and unpacks it back
to the tensor's device.

Watch: the three packs print on the forward line, the three unpacks only while
loss.backward() runs; the gradient with save_on_cpu is the same, (1 + x) * exp(x).
"""

import torch


def pack(t):
    print("pack  ", tuple(t.shape))
    return t.detach().clone()  # the graph keeps this copy


def unpack(saved):
    print("unpack", tuple(saved.shape))
    return saved


x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    y = x.exp() * x
loss = y.sum()
loss.backward()
print("x.grad:", x.grad)

first = x.grad.clone()
x.grad = None
with torch.autograd.graph.save_on_cpu():
    y = x.exp() * x
y.sum().backward()
print("same with save_on_cpu:", torch.allclose(x.grad, first))
