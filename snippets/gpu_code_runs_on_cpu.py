"""GPU code runs here on the CPU

Code from a GPU project moves its model with .cuda() and its batches with .to(device).
This server has no GPU, so it runs the same code with its devices set to the CPU:
autograd builds the same graph and computes the same gradients on either device.

Watch: the note above the graph names the lines that asked for CUDA; after backward()
every parameter of the model has its .grad, and the printed device is the CPU.
"""

import torch
import torch.nn as nn

torch.manual_seed(0)
device = torch.device("cuda")
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).cuda()
x = torch.randn(16, 4).to(device)
y = torch.randn(16, 1, device=device)

loss = nn.functional.mse_loss(model(x), y)
loss.backward()
print("loss", loss.item(), "on", loss.device)
print("first layer's weight.grad norm:", model[0].weight.grad.norm().item())
