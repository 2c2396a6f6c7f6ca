"""inference_mode for evaluation between training steps: nothing recorded, grads untouched."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(2, 1)
x = torch.randn(3, 2)
model(x).sum().backward()
with torch.inference_mode():
    preds = model(x)
print(preds.requires_grad, preds.grad_fn)
features = preds.clone()  # a normal tensor copied outside inference mode can be used again
(model(x) * features).sum().backward()
print(model.weight.grad)
