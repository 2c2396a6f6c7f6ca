"""Forward under no_grad, loss outside it

Only the forward pass is inside torch.no_grad(), and the loss is computed after the block, where
autograd records again. But out, computed in the block, has no grad_fn, and neither has anything
computed from it: the cut travels with the tensor. This snippet fails: loss.backward() raises a
RuntimeError ("element 0 of tensors does not require grad and does not have a grad_fn").

Watch: no line builds a node, although net's parameters require grad. The diagnosis follows loss
back through out to the line inside the no_grad block, and its fix fills net.weight.grad.
"""

import torch

torch.manual_seed(0)
net = torch.nn.Linear(3, 2)
x = torch.randn(4, 3)

with torch.no_grad():  # as in an evaluation loop: autograd records nothing here
    out = net(x)
loss = out.pow(2).mean()
print("loss:", loss, "grad_fn:", loss.grad_fn)
loss.backward()
