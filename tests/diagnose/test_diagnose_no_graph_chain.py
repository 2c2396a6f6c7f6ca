"""backward() on a loss whose graph was cut further up the chain it was computed through: the
diagnosis follows the tensor back to the cut (across lines, a helper function, a module's forward,
``.detach()``, ``.item()``, a NumPy round trip, ``inference_mode``), points at that line, and its fix
gives the gradients plain PyTorch gives for the code as meant (written out here by hand)."""

from __future__ import annotations

import pytest
import torch
from gradstep.diagnose.facts import final_grads
from gradstep.pipeline import run_locally
from gradstep.tracer import record
from test_diagnose import close, code_of, only, plain_ok
from testkit.truth import run_plain

KIND = "backward_without_graph"

NET = """
import torch
torch.manual_seed(0)
net = torch.nn.Linear(3, 2)
x = torch.randn(4, 3)
"""
NET_MEANT = (
    NET
    + """
out = net(x)
loss = out.pow(2).mean()
loss.backward()
"""
)
W = """
import torch
w = torch.tensor([1.0, -2.0], requires_grad=True)
data = torch.tensor([0.5, 1.5])
"""
W_MEANT = (
    W
    + """
pred = (w * data).sum()
loss = (pred - 1.0) ** 2
loss.backward()
"""
)

# shape -> (snippet, the line the diagnosis points at, what the cut says, the code as meant)
SHAPES = {
    "no_grad_lines_before": (
        NET
        + """
with torch.no_grad():
    out = net(x)
loss = out.pow(2).mean()
loss.backward()
""",
        "out = net(x)",
        "autograd records nothing",
        NET_MEANT,
    ),
    "no_grad_several_lines_between": (
        NET
        + """
with torch.no_grad():
    out = net(x)
hidden = out.relu()
scaled = hidden * 2.0
loss = scaled.pow(2).mean()
loss.backward()
""",
        "out = net(x)",
        "autograd records nothing",
        NET
        + """
out = net(x)
hidden = out.relu()
scaled = hidden * 2.0
loss = scaled.pow(2).mean()
loss.backward()
""",
    ),
    "no_grad_in_a_helper": (
        NET
        + """
def features(inp):
    with torch.no_grad():
        h = net(inp)
    return h.relu()
out = features(x)
loss = out.pow(2).mean()
loss.backward()
""",
        "h = net(inp)",
        "autograd records nothing",
        NET
        + """
out = net(x).relu()
loss = out.pow(2).mean()
loss.backward()
""",
    ),
    "helper_decorated_with_no_grad": (
        NET
        + """
@torch.no_grad()
def embed(inp):
    return net(inp)
feats = embed(x)
loss = feats.pow(2).mean()
loss.backward()
""",
        "feats = embed(x)",
        "autograd records nothing",
        NET
        + """
feats = net(x)
loss = feats.pow(2).mean()
loss.backward()
""",
    ),
    "no_grad_in_a_module_forward": (
        """
import torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
    def forward(self, x):
        with torch.no_grad():
            h = self.fc(x)
        return h * 2
net = Net()
x = torch.randn(4, 3)
loss = net(x).pow(2).mean()
loss.backward()
""",
        "h = self.fc(x)",
        "autograd records nothing",
        """
import torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
    def forward(self, x):
        return self.fc(x) * 2
net = Net()
x = torch.randn(4, 3)
loss = net(x).pow(2).mean()
loss.backward()
""",
    ),
    "inference_mode": (
        NET
        + """
with torch.inference_mode():
    out = net(x)
feats = out.clone()
loss = feats.pow(2).mean()
loss.backward()
""",
        "out = net(x)",
        "autograd records nothing",
        NET_MEANT,
    ),
    "detach": (
        NET
        + """
out = net(x).detach()
scaled = out * 3
loss = scaled.pow(2).mean()
loss.backward()
""",
        "out = net(x).detach()",
        "which keeps only the values",
        NET
        + """
out = net(x)
scaled = out * 3
loss = scaled.pow(2).mean()
loss.backward()
""",
    ),
    "item_into_a_new_tensor": (
        W
        + """
pred = (w * data).sum()
value = torch.tensor(pred.item())
loss = (value - 1.0) ** 2
loss.backward()
""",
        "value = torch.tensor(pred.item())",
        "which keeps only the values",
        W_MEANT,
    ),
    "numpy_round_trip": (
        W
        + """
pred = (w * data).sum()
arr = pred.detach().numpy()
back = torch.from_numpy(arr)
loss = (back - 1.0) ** 2
loss.backward()
""",
        "arr = pred.detach().numpy()",
        "which keeps only the values",
        W_MEANT,
    ),
}


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if line.strip() == text)


@pytest.mark.parametrize("shape", SHAPES)
def test_diagnosis_points_at_where_the_graph_was_cut(shape: str):
    snippet, at, why, _ = SHAPES[shape]
    code = code_of(snippet)
    assert "does not require grad" in run_plain(code).calls[-1].error["message"]
    d = only(code, KIND)
    assert d["severity"] == "error"
    assert d["line"] == _line_of(code, at)
    assert why in d["message"]


@pytest.mark.parametrize("shape", SHAPES)
def test_fix_gives_the_gradients_plain_torch_gives_for_the_code_as_meant(shape: str):
    snippet, _, _, meant = SHAPES[shape]
    d = only(code_of(snippet), KIND)
    assert len(d["fixes"]) == 1
    fixed = plain_ok(d["fixes"][0]["code"])
    expected = plain_ok(code_of(meant)).calls[-1].grads
    assert fixed.calls[-1].grads.keys() == expected.keys()
    for names, grad in expected.items():
        assert close(fixed.calls[-1].grads[names], grad), names


@pytest.mark.parametrize("shape", SHAPES)
def test_the_verified_fix_run_shows_the_gradients_plain_torch_computes(shape: str):
    d = only(code_of(SHAPES[shape][0]), KIND)
    code = d["fixes"][0]["code"]
    (traced,) = run_locally([code])
    shown = final_grads(traced)
    plain = plain_ok(code).calls[-1].grads
    assert shown and {n for names in plain for n in names} >= shown.keys()
    for names, grad in plain.items():
        name = next(n for n in names if n in shown)
        # the trace prints 4 significant digits, as torch prints them
        assert torch.allclose(grad.new_tensor(shown[name]["values"]).reshape(grad.shape), grad, rtol=1e-3), (
            name
        )


def test_a_tensor_made_under_no_grad_from_no_leaf_is_not_blamed():
    # the data was made under no_grad, but no tensor that requires grad was ever cut: nothing to blame there
    code = code_of(
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        with torch.no_grad():
            data = torch.tensor([0.5, 1.5]) * 2
        loss = (data**2).sum()
        loss.backward()
        """
    )
    d = only(code, KIND)
    assert "autograd records nothing" not in d["message"]
    assert d["fixes"] == []
    assert record(code)["status"] == "error"
