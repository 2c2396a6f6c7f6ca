"""GPU code as it is pasted: a model moved with .cuda(), a batch with .to(device), factories with
device="cuda", a CUDA generator, cuDNN settings, and the leaf that .cuda() copies on a GPU. Run
on the CPU, it is the same code with its devices set to the CPU."""

import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = True
torch.manual_seed(0)
torch.cuda.manual_seed_all(0)
device = torch.device("cuda")
g = torch.Generator(device="cuda")
g.manual_seed(1)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1)).cuda()
head = nn.Linear(1, 1).to(device)
x = torch.randn(5, 4, generator=g, device="cuda")
y = torch.randn(5, 1).to(device, non_blocking=True)
scale = torch.ones(1, device=device, requires_grad=True)
bias = torch.zeros(1, requires_grad=True).cuda()
out = head(model(x)) * scale + bias
loss = nn.functional.mse_loss(out, y)
loss.backward(retain_graph=True)
print(loss.item(), scale.grad, x.device)
loss.backward()
print(model[0].weight.grad.norm())
loss.backward()
