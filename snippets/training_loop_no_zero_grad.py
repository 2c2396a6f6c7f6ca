"""Training loop without zero_grad

Every backward call adds its gradients into .grad; nothing resets them automatically.
That is why a training loop calls optimizer.zero_grad() each iteration. This loop forgets
it, so each step uses the sum of all gradients so far instead of the current one.

Watch: model.weight.grad keeps growing (-4.07, then -6.82, then -7.35 in its first entry):
each backward adds this step's gradient to all the earlier ones.
"""

import torch

torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
targets = torch.tensor([[1.0], [2.0]])

for step in range(3):
    # optimizer.zero_grad()  <- forgotten
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    print(f"step {step}: loss {loss.item():.4f}, weight.grad {model.weight.grad}")
    optimizer.step()
