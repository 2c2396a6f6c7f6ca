"""Optimizers with fused=True (one fused kernel per step) on CPU: two training steps each."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(3, 2)
x = torch.randn(4, 3)
target = torch.randn(4, 2)
for opt in (
    torch.optim.SGD(model.parameters(), lr=0.1, fused=True),
    torch.optim.Adam(model.parameters(), lr=0.01, fused=True),
    torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1, fused=True),
):
    for _ in range(2):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
print(loss.item(), model.bias)
