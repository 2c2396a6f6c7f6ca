"""set_detect_anomaly(True) on a run that produces no NaN: nothing changes but the checks."""

import torch

torch.autograd.set_detect_anomaly(True)
x = torch.tensor([1.0, 4.0], requires_grad=True)
y = (x.sqrt() * x).sum()
y.backward()
torch.autograd.set_detect_anomaly(False)
print(x.grad)
