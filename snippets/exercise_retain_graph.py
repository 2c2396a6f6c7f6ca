"""Exercise: backward twice, with and without retain_graph

Predict before each backward call is shown. The graph of y = x**3 saves x, which its backward
needs to compute 3 * x**2. retain_graph=True keeps such saved tensors after a backward call;
without it, backward frees them as it goes. Which call frees them, what does x.grad hold, and
which call can still run?

Watch: answer each question before the step shows it, then read the narration: it says which
saved tensors each call kept or freed and why a call fails when it does.
"""

import torch

x = torch.tensor(2.0, requires_grad=True)
y = x**3

y.backward(retain_graph=True)  # predict: x.grad, freed
print("after the first backward:", x.grad)

y.backward()  # predict: error, freed
print("after the second backward:", x.grad)

try:
    y.backward()  # predict: error
except RuntimeError as e:
    print("the third backward failed:", str(e).split(".")[0])
