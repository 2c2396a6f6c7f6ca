"""Self-contained snippets of models people train, at any size, for benchmarks and screenshots.

Each function returns a snippet's code (no downloads, seeded). From the shell:

    python benchmarks/models/catalog.py gpt 12          # a 12-layer nanoGPT-style model, one step
    python benchmarks/models/catalog.py resnet18
    python benchmarks/models/catalog.py mlp 24
    python benchmarks/models/catalog.py loop 20         # a 20-iteration training loop
    python benchmarks/models/catalog.py gpttrain 2 5    # a 2-layer GPT trained for 5 iterations
    python benchmarks/models/catalog.py lstm 100        # an LSTM cell unrolled over 100 steps
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# The model's classes are the curated snippet's (snippets/gpt_training_step.py): one copy, what a
# reader of that snippet sees; its own sizes and training step are left out.
_CURATED = Path(__file__).resolve().parents[2] / "snippets" / "gpt_training_step.py"
_CLASSES = re.search(r"^import math\n.*?(?=^model = GPT\()", _CURATED.read_text(), re.S | re.M)
assert _CLASSES is not None, f"{_CURATED} no longer defines the model as the catalog expects"
GPT_MODEL = (
    _CLASSES.group(0).replace("{", "{{").replace("}", "}}")
    + """\
model = GPT(vocab={vocab}, block={block}, layers={layers}, d={d}, heads={heads})
idx = torch.randint(0, {vocab}, (2, {block}))
targets = torch.randint(0, {vocab}, (2, {block}))
"""
)

GPT_STEP = """\
logits = model(idx)
loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
loss.backward()
"""

GPT_TRAIN = """\
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for it in range({iterations}):
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def gpt(layers: int, d: int = 128, heads: int = 4, block: int = 16, vocab: int = 64) -> str:
    """A nanoGPT-style model (token and position embeddings, pre-norm blocks), one backward."""
    return GPT_MODEL.format(vocab=vocab, block=block, layers=layers, d=d, heads=heads) + GPT_STEP


def gpt_training(layers: int, iterations: int, d: int = 128) -> str:
    """The same model trained with AdamW for ``iterations`` steps in a loop."""
    return GPT_MODEL.format(vocab=64, block=16, layers=layers, d=d, heads=4) + GPT_TRAIN.format(
        iterations=iterations
    )


def mlp(layers: int, width: int = 64) -> str:
    """A deep MLP: Linear + ReLU ``layers`` times in an nn.Sequential, one backward."""
    return f"""\
import torch
import torch.nn as nn

torch.manual_seed(0)
layers = []
for _ in range({layers}):
    layers += [nn.Linear({width}, {width}), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear({width}, 1))
x = torch.randn(32, {width})
loss = model(x).pow(2).mean()
loss.backward()
"""


def training_loop(iterations: int) -> str:
    """A small classifier trained with SGD for ``iterations`` steps: the loop people write first."""
    return f"""\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 4)
y = torch.randint(0, 3, (64,))
for epoch in range({iterations}):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
"""


RESNET = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        self.layer1, self.layer2, self.layer3, self.layer4 = (
            nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)) for cin, cout, stride in widths
        )
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


model = ResNet18()
x = torch.randn(2, 3, {size}, {size})
y = torch.tensor([3, 7])
loss = F.cross_entropy(model(x), y)
loss.backward()
"""


def resnet18(size: int = 64) -> str:
    """A CIFAR-style ResNet-18 on ``size``×``size`` images, batch 2, one backward."""
    return RESNET.format(size=size)


def lstm(steps: int = 100) -> str:
    """An LSTM cell unrolled over ``steps`` time steps in a Python loop (one long chain)."""
    return f"""\
import torch

torch.manual_seed(0)
cell = torch.nn.LSTMCell(8, 16)
head = torch.nn.Linear(16, 1)
xs = torch.randn({steps}, 4, 8)
h = torch.zeros(4, 16)
c = torch.zeros(4, 16)
for x in xs:
    h, c = cell(x, (h, c))
loss = head(h).pow(2).mean()
loss.backward()
"""


MODELS = {
    "gpt": gpt,
    "gpttrain": gpt_training,
    "resnet18": resnet18,
    "mlp": mlp,
    "loop": training_loop,
    "lstm": lstm,
}

if __name__ == "__main__":
    name, *args = sys.argv[1:] or ["gpt", "12"]
    sys.stdout.write(MODELS[name](*map(int, args)))
