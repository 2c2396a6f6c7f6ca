"""Exercise: create_graph, and the second backward

Predict before each backward call is shown. backward(create_graph=True) records the backward
pass itself as a graph, so the gradient it leaves in x.grad can be differentiated again; here
that gradient's own backward is called next. What does each call leave in x.grad, and does a
call with create_graph=True free the saved tensors of the graph?

Watch: predict x.grad after each call (at x = 3) and what the first call frees; the narration
then says what each call added to x.grad, and what it kept.
"""

import torch

x = torch.tensor(3.0, requires_grad=True)
y = x**3

y.backward(create_graph=True)  # predict: x.grad, freed
first = x.grad
print("x.grad after the first backward:", first)

first.backward()  # predict: x.grad
print("x.grad after the second backward:", x.grad)
