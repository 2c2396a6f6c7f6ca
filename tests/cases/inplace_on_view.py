"""An in-place change through a view bumps the base's version too."""

import torch

w = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
h = w * 2
s = h.sin()  # SinBackward0 saves h
row = h[0]
row.mul_(3)  # modifies h through a view
s.sum().backward()
