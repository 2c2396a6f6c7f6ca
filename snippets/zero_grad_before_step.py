"""zero_grad() before step(): a model that never learns

optimizer.step() updates the parameters with whatever is in .grad at that moment. Here
zero_grad() runs between backward() and step(), so the gradient is cleared just before it
is used: step() finds none and changes nothing. Nothing raises; the loss just stays the
same.

Watch: every backward computes exactly the same model.weight.grad, and the printed loss
never changes. The diagnosis moves zero_grad() after step().
"""

import torch

torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
targets = torch.tensor([[1.0], [2.0]])

for step in range(3):
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    optimizer.zero_grad()  # clears the gradient step() was about to use
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
