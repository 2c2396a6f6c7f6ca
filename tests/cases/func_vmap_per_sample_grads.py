"""Per-sample gradients with vmap(grad(...)) and functional_call, then a batch backward."""

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

torch.manual_seed(0)
model = nn.Linear(3, 1)
data = torch.randn(4, 3)
targets = torch.randn(4, 1)
params = {k: v.detach() for k, v in model.named_parameters()}


def sample_loss(p, sample, target):
    pred = functional_call(model, p, (sample.unsqueeze(0),))
    return nn.functional.mse_loss(pred, target.unsqueeze(0))


per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, data, targets)
print(per_sample["weight"].shape)
loss = nn.functional.mse_loss(model(data), targets)
loss.backward()
print(torch.allclose(per_sample["weight"].mean(0), model.weight.grad, atol=1e-6), model.bias.grad)
