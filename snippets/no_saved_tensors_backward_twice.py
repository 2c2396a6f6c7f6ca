"""Backward twice through nodes that saved nothing

The "backward through the graph a second time" error only happens when a node needs a
tensor it saved and that tensor was freed. Addition needs no saved values to compute its
gradient, and neither does sum. So a graph made only of such nodes can be walked again
without retain_graph=True, and x.grad simply accumulates. (x * 2 would not work: the
multiply node saves the 2 as a tiny tensor, and that gets freed.)

Watch: the AddBackward0 and SumBackward0 nodes show no saved buffers, so nothing is freed;
the second backward succeeds and x.grad goes from 1 to 2.
"""

import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x + 1
loss = y.sum()

loss.backward()
print("x.grad after first backward:", x.grad)  # ones

loss.backward()  # no retain_graph, still works
print("x.grad after second backward:", x.grad)  # twos
