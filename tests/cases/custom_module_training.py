"""A custom Module trained for a few steps with an optimizer."""

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(2, 3)
        self.out = nn.Linear(3, 1)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


torch.manual_seed(0)
net = MLP()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
data = torch.randn(4, 2)
for _ in range(3):
    opt.zero_grad()
    loss = net(data).pow(2).mean()
    loss.backward()
    opt.step()  # modifies the parameters in place, after their nodes were freed
print(loss.item())
