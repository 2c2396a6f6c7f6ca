"""register_post_accumulate_grad_hook: an optimizer step applied right after .grad is written."""

import torch

w = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
lr = 0.1


def sgd_step(param):
    with torch.no_grad():
        param -= lr * param.grad
    print("stepped, grad was", param.grad)
    param.grad = None


w.register_post_accumulate_grad_hook(sgd_step)
x = torch.tensor([2.0, 1.0, -1.0])
loss = ((w * x).sum() - 1.0) ** 2
loss.backward()
print(w, w.grad)
