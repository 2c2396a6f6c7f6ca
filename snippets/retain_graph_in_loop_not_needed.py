"""retain_graph=True that a loop does not need

retain_graph=True keeps a graph's saved tensors after backward, so that another backward
can go through the same graph again. In this training loop each iteration builds a new
graph and goes back through it once, so nothing ever uses what was kept: it only holds
memory until the next iteration replaces the graph.

Watch: after each loss.backward(retain_graph=True) the saved tensors stay held (not
freed). The diagnosis drops retain_graph=True and checks that every gradient is the same.
"""

import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(8, 4)

for step in range(3):
    optimizer.zero_grad()
    loss = model(inputs).pow(2).mean()
    loss.backward(retain_graph=True)  # nothing goes back through this graph again
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
