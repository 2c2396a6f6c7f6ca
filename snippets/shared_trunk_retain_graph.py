"""Two losses on a shared trunk: two backwards

Instead of summing the losses you can call backward on each. The first call must pass
retain_graph=True, because the second one walks through the same trunk again and needs
the tensors the trunk saved. The gradients in w.grad add up to the same values as
backward on the sum.

Watch: after loss1.backward the trunk's buffers stay retained and w.grad holds loss1's
share; loss2.backward then adds its share to w.grad and fills w2.grad.
"""

import torch

x = torch.tensor([0.5, -1.0, 2.0])
w = torch.tensor([1.0, 0.5, -0.5], requires_grad=True)
w1 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
w2 = torch.tensor([-1.0, 0.0, 1.0], requires_grad=True)

trunk = torch.tanh(x * w)
loss1 = (trunk * w1).sum()
loss2 = (trunk * w2).mean()

loss1.backward(retain_graph=True)
print("w.grad after loss1:", w.grad)

loss2.backward()
print("w.grad after loss2:", w.grad)
print("w1.grad:", w1.grad)
print("w2.grad:", w2.grad)
