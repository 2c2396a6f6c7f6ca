"""CSR: to_sparse_csr() in a matmul, and sampled_addmm, with backward to the dense leaves."""

import torch

m = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
csr = m.to_sparse_csr()
w = torch.tensor([[0.5], [-1.0], [2.0]], requires_grad=True)
out = csr @ w
out.sum().backward()
print(w.grad)
a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
b = torch.tensor([[0.5, -1.0], [1.0, 0.5]], requires_grad=True)
mask = torch.eye(2).to_sparse_csr()
s = torch.sparse.sampled_addmm(mask, a, b)
s.to_dense().sum().backward()
print(a.grad, b.grad)
