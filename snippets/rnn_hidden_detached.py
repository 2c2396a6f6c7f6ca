"""RNN hidden state detached

The fix for the previous example: h = h.detach() at the start of each step cuts h off
from the old graph. It keeps its value but becomes a fresh tensor with no history, so
each backward only walks through the current step (truncated backpropagation through
time).

Watch: after detach, each step's graph starts at a fresh h with no grad_fn; W.grad and
U.grad accumulate across the three steps.
"""

import torch

torch.manual_seed(0)
W = torch.randn(2, 3, requires_grad=True)
U = torch.randn(2, 2, requires_grad=True)
inputs = torch.randn(3, 3)  # 3 time steps, 3 features each
h = torch.zeros(2)

for step, x_t in enumerate(inputs):
    h = h.detach()  # cut the link to the previous step's graph
    h = torch.tanh(W @ x_t + U @ h)
    loss = h.sum()
    loss.backward()
    print(f"step {step}: loss {loss.item():.4f}, W.grad[0] {W.grad[0]}")
