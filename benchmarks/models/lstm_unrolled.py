# An LSTM unrolled over 100 time steps with an LSTMCell in a Python loop: every
# step adds its gates to one chain (about 1,500 autograd nodes, 800 ranks deep).
import torch

torch.manual_seed(0)
cell = torch.nn.LSTMCell(8, 16)
head = torch.nn.Linear(16, 1)
xs = torch.randn(100, 4, 8)
h = torch.zeros(4, 16)
c = torch.zeros(4, 16)
for x in xs:
    h, c = cell(x, (h, c))
loss = head(h).pow(2).mean()
loss.backward()
