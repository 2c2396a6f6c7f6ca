"""Code as learners paste it, shared by the tests of several layers (tracer, narration, page)."""

# A hand-written gradient step that rebinds its leaf: `w` names a non-leaf from line 8 on, the leaf
# from line 2 keeps accumulating, and `w.grad` (None) ends the run with a TypeError in iteration 2.
REBOUND_LEAF_LOOP = """\
import torch
w = torch.randn(3, requires_grad=True)
x = torch.tensor([1., 2., 3.])
for epoch in range(3):
    y = (w * x).sum()
    y.backward()
    print(w.grad)
    w = w - 0.1 * w.grad
"""
