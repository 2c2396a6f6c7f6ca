"""A sparse COO matrix times a dense leaf; gradients flow to the dense side and the sparse values."""

import torch

i = torch.tensor([[0, 1, 2], [2, 0, 1]])
v = torch.tensor([1.0, 2.0, 3.0])
a = torch.sparse_coo_tensor(i, v, (3, 3)).requires_grad_()
w = torch.tensor([[0.5, -1.0], [1.5, 2.0], [-0.5, 1.0]], requires_grad=True)
out = torch.sparse.mm(a, w)
out.sum().backward()
print(w.grad)
print(a.grad.to_dense())
d = torch.tensor([[1.0, 0.0], [0.0, 2.0]], requires_grad=True)
(d.to_sparse() * 3).to_dense().sum().backward()
print(d.grad)
