"""torch.compile: the compiled region is one CompiledFunctionBackward node that saves what its
joint graph needs. (aot_eager here, so the plain run needs no C++ compiler either.)"""

import torch

torch.manual_seed(0)


def f(x, w):
    return (torch.sin(x @ w) * x.sum()).pow(2).mean()


compiled = torch.compile(f, backend="aot_eager")
x = torch.randn(3, 4, requires_grad=True)
w = torch.randn(4, 2, requires_grad=True)
loss = compiled(x, w)
loss.backward(retain_graph=True)
print(x.grad, w.grad)
loss.backward()
print(w.grad)
