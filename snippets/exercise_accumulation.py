"""Exercise: .grad adds up across backward calls

Predict before each backward call is shown. A loop computes a loss and calls backward three
times, with no optimizer.zero_grad() (nor w.grad = None) between the iterations. The loss is
(w * x).sum() with the same w and x each time. Does each call replace w.grad, or add to it?

Watch: predict w.grad after each of the three calls (two numbers each), then compare with what
torch holds; the narration says what each call added.
"""

import torch

w = torch.tensor([1.0, -2.0], requires_grad=True)
x = torch.tensor([3.0, 0.5])

for step in range(3):
    loss = (w * x).sum()
    loss.backward()  # predict: w.grad
    print(f"step {step}: w.grad = {w.grad}")
