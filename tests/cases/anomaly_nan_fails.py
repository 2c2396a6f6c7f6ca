"""detect_anomaly: sqrt at 0 times 0 makes a NaN gradient, and backward raises naming SqrtBackward0."""

import torch

x = torch.tensor([0.0, 4.0], requires_grad=True)
with torch.autograd.detect_anomaly():
    y = (x.sqrt() * torch.tensor([0.0, 1.0])).sum()  # d sqrt(x)/dx at 0 is inf; inf * 0 = nan
    y.backward()
