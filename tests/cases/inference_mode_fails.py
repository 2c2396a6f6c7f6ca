"""A tensor made under inference_mode cannot be saved for backward; the error says so."""

import torch

w = torch.tensor([1.0, 2.0], requires_grad=True)
with torch.inference_mode():
    features = torch.tensor([3.0, 4.0]) * 2
(w * 2).sum().backward()
print(w.grad, features.is_inference())
loss = (w * features).sum()  # saving an inference tensor for backward raises
