"""Training loop on a loss built before the loop

The loss is computed once, before the loop, so every iteration calls backward on the one graph
that line built, from the weights as they were then. The first backward frees that graph's saved
tensors. This snippet fails: the second loss.backward() raises a RuntimeError ("Trying to backward
through the graph a second time"). retain_graph=True would make it run, but every epoch would
then get the first epoch's gradient, whatever opt.step() did to the weights.

Watch: the printed loss is the same every epoch (nothing recomputes it). The diagnosis offers
moving the forward into the loop first and retain_graph=True second, and each fix says what its
run computes: with retain_graph=True, model.weight.grad is the same after every backward.
"""

import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 3)
y = torch.randn(8, 1)

loss = ((model(x) - y) ** 2).mean()  # built once, before the loop
for epoch in range(3):
    print(f"epoch {epoch}: loss {loss.item():.4f}")
    opt.zero_grad()
    loss.backward()
    opt.step()
