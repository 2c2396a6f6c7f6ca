"""A rebound name: the old leaf keeps its .grad

w = w - 0.1 * w.grad looks like a gradient step, but it does not change the leaf w: it builds a
new tensor, a non-leaf whose graph starts at the old leaf, and binds the name w to it. The leaf
is still alive (the new w's graph holds it), so the next backward flows through the subtraction
into the old leaf and its .grad accumulates, while w.grad, of a non-leaf, stays None. The update
belongs under torch.no_grad(), in place: w -= 0.1 * w.grad.

Watch: after line 24 the tensors panel lists w (line 17) beside the new w; the second backward
accumulates into w (line 17).grad, from [1., 2., 3.] to [2., 4., 6.], and the loop stops because
w.grad is None.
"""

import torch

torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
x = torch.tensor([1.0, 2.0, 3.0])
for epoch in range(3):
    y = (w * x).sum()
    y.backward()
    if w.is_leaf:
        print(f"epoch {epoch}: w is a leaf, w.grad = {w.grad}")
        w = w - 0.1 * w.grad  # a new non-leaf named w; the leaf lives on in its graph
    else:
        print(f"epoch {epoch}: w is a non-leaf now ({w.grad_fn.name()}), so w.grad stays None")
        break
