"""RNN hidden state not detached

A recurrent network feeds its hidden state h back in at each step. If you call backward
every step but keep using the same h, the new graph is chained onto the old one, and
backward tries to go back through the previous step, whose saved tensors were already
freed. This snippet fails: the second loss.backward() raises a RuntimeError ("Trying to
backward through the graph a second time").

Watch: at step 1 the graph for h reaches back into step 0's TanhBackward0, whose buffer
was freed by the first backward.
"""

import torch

torch.manual_seed(0)
W = torch.randn(2, 3, requires_grad=True)
U = torch.randn(2, 2, requires_grad=True)
inputs = torch.randn(3, 3)  # 3 time steps, 3 features each
h = torch.zeros(2)

for step, x_t in enumerate(inputs):
    h = torch.tanh(W @ x_t + U @ h)
    loss = h.sum()
    print(f"step {step}: loss {loss.item():.4f}")
    loss.backward()  # fails at step 1: it goes back into step 0's freed graph
