"""A running loss that keeps every graph

A loss is a tensor with a graph. Adding it to a running total (running += loss) makes the
total a tensor whose graph links to that loss's graph, iteration after iteration, so no
graph is ever freed: in a long training loop this is a memory leak. Adding loss.item(), a
plain number, keeps only the value.

Watch: the graph nodes alive grow each time the loss line runs (old iterations stay
attached to running). The diagnosis shows the climb, and its fix with loss.item() keeps it
flat.
"""

import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
inputs = torch.randn(8, 4)

running = 0.0
for _ in range(4):
    optimizer.zero_grad()
    loss = model(inputs).pow(2).mean()
    loss.backward()
    optimizer.step()
    running += loss  # should be loss.item()
print("running loss:", running)
