"""A training loop whose backward goes through a graph built once, before the loop: the first fix
moves the forward into the loop and trains as plain PyTorch trains the loop as meant (the forward
inside it); retain_graph=True comes second, with its consequence stated, and trains to other weights.
Each fix says what its run computes, measured on the runs."""

from __future__ import annotations

import pytest
import torch
from test_diagnose import FREED, code_of, diagnoses, only, plain_ok
from testkit.truth import named_tensors, run_plain
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

KIND = "stale_graph_in_loop"
CONSEQUENCE = (
    "Every iteration gets the same gradient: the graph was built from the first iteration's weights."
)

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 3); y = torch.randn(8, 1)
"""

# the loop as meant for the variants whose loss is an mse_loss of the model: built in the loop
MEANT_MSE = (
    SETUP
    + """
for epoch in range(3):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
)

# variant -> (snippet, the same loop as meant: the forward inside it, written out by hand)
VARIANTS = {
    "one_line_loop_body": (
        SETUP
        + """
loss = ((model(x) - y) ** 2).mean()   # built once, before the loop
for epoch in range(3):
    opt.zero_grad(); loss.backward(); opt.step()
""",
        SETUP
        + """
for epoch in range(3):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
""",
    ),
    "forward_over_several_lines": (
        SETUP
        + """
pred = model(x)
err = pred - y
loss = (err ** 2).mean()
for step in range(4):
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
        SETUP
        + """
for step in range(4):
    pred = model(x)
    err = pred - y
    loss = (err ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    ),
    "one_statement_over_several_lines": (
        SETUP
        + """
loss = torch.nn.functional.mse_loss(
    model(x),
    y,
)
for epoch in range(3):
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
        MEANT_MSE,
    ),
    "a_penalty_added_to_the_loss": (
        SETUP
        + """
loss = ((model(x) - y) ** 2).mean()
loss += 0.01 * model.weight.pow(2).sum()
for epoch in range(3):
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
        SETUP
        + """
for epoch in range(3):
    loss = ((model(x) - y) ** 2).mean()
    loss += 0.01 * model.weight.pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    ),
    "helper_function": (
        SETUP
        + """
def compute_loss():
    return torch.nn.functional.mse_loss(model(x), y)
loss = compute_loss()
for epoch in range(3):
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
        MEANT_MSE,
    ),
    "while_loop": (
        SETUP
        + """
loss = ((model(x) - y) ** 2).mean()
step = 0
while step < 3:
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
""",
        SETUP
        + """
step = 0
while step < 3:
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
""",
    ),
    "module_with_a_forward": (
        """
import torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 4)
        self.fc2 = torch.nn.Linear(4, 1)
    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))
net = Net()
opt = torch.optim.Adam(net.parameters(), lr=0.05)
x = torch.randn(8, 3)
y = torch.randn(8, 1)
out = net(x)
loss = torch.nn.functional.mse_loss(out, y)
for epoch in range(3):
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
        """
import torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 4)
        self.fc2 = torch.nn.Linear(4, 1)
    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))
net = Net()
opt = torch.optim.Adam(net.parameters(), lr=0.05)
x = torch.randn(8, 3)
y = torch.randn(8, 1)
for epoch in range(3):
    out = net(x)
    loss = torch.nn.functional.mse_loss(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    ),
    "update_by_hand_under_no_grad": (
        """
import torch
w = torch.tensor([1.0, -2.0], requires_grad=True)
data = torch.tensor([0.5, 1.5])
loss = ((w * data).sum() - 1.0) ** 2
for i in range(3):
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w.grad.zero_()
""",
        """
import torch
w = torch.tensor([1.0, -2.0], requires_grad=True)
data = torch.tensor([0.5, 1.5])
for i in range(3):
    loss = ((w * data).sum() - 1.0) ** 2
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w.grad.zero_()
""",
    ),
    "batches_in_an_epoch_loop": (
        SETUP
        + """
loss = ((model(x) - y) ** 2).mean()
for epoch in range(2):
    for batch in range(2):
        opt.zero_grad()
        loss.backward()
        opt.step()
""",
        SETUP
        + """
for epoch in range(2):
    for batch in range(2):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
""",
    ),
    "loss_read_before_the_loop": (
        SETUP
        + """
loss = ((model(x) - y) ** 2).mean()
print("initial loss", loss.item())
for epoch in range(3):
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
        SETUP
        + """
loss = ((model(x) - y) ** 2).mean()
print("initial loss", loss.item())
for epoch in range(3):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    ),
}

RETAINED = (
    SETUP
    + """
loss = ((model(x) - y) ** 2).mean()
for epoch in range(3):
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
"""
)


def final_params(code: str) -> dict[frozenset, torch.Tensor]:
    """The tensors that require grad after ``code`` ran under plain PyTorch (the trained weights)."""
    globs: dict = {"__name__": "__main__"}
    torch.manual_seed(0)
    exec(compile(code, "<snippet>", "exec"), globs)
    return {
        names: t.detach().clone()
        for t, names in named_tensors(globs).values()
        if t.is_leaf and t.requires_grad
    }


def same_params(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-7) for k in a)


def _diagnosis(variant: str) -> dict:
    return only(code_of(VARIANTS[variant][0]), KIND)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_run_fails_at_the_second_backward_in_plain_torch(variant: str):
    run = run_plain(code_of(VARIANTS[variant][0]))
    assert (
        run.calls[0].error is None
        and "backward through the graph a second time" in run.calls[1].error["message"]
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_diagnosed_as_a_stale_graph_at_the_backward_not_as_a_freed_graph(variant: str):
    code = code_of(VARIANTS[variant][0])
    d = _diagnosis(variant)
    assert d["severity"] == "error"
    assert (
        code.splitlines()[d["line"] - 1]
        .strip()
        .startswith(("loss.backward()", "opt.zero_grad(); loss.backward()"))
    )
    assert FREED not in [x["kind"] for x in diagnoses(code)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_first_fix_moves_the_forward_into_the_loop_and_trains_as_the_loop_as_meant(variant: str):
    first = _diagnosis(variant)["fixes"][0]
    assert "forward" in first["title"] and "into the loop" in first["title"]
    plain_ok(first["code"])
    assert same_params(final_params(first["code"]), final_params(code_of(VARIANTS[variant][1])))


# the step changes in place weights the retained graph saved (fc2's weight, saved for the gradient to the
# hidden layer; model.weight, saved by the penalty): retain_graph=True fails there too
RETAIN_FAILS = ("module_with_a_forward", "a_penalty_added_to_the_loss")
RETAIN_RUNS = [v for v in VARIANTS if v not in RETAIN_FAILS]


@pytest.mark.parametrize("variant", RETAIN_RUNS)
def test_retain_graph_comes_second_with_its_consequence_and_trains_to_other_weights(variant: str):
    fixes = _diagnosis(variant)["fixes"]
    assert [("into the loop" in f["title"], "retain_graph=True" in f["title"]) for f in fixes] == [
        (True, False),
        (False, True),
    ]
    retained = fixes[1]
    assert CONSEQUENCE in retained["explanation"] and "same gradient" in retained["title"]
    plain_ok(retained["code"])
    assert not same_params(final_params(retained["code"]), final_params(code_of(VARIANTS[variant][1])))


def test_outcomes_quote_each_iterations_grad_as_plain_torch_computes_it():
    variant = "forward_over_several_lines"
    moved, retained = _diagnosis(variant)["fixes"]

    def norms(code: str) -> list[float]:
        return [
            next(g for n, g in c.grads.items() if "model.weight" in n).norm().item()
            for c in run_plain(code).calls
        ]

    for fix, label in ((moved, "Computed in the loop"), (retained, "With retain_graph=True")):
        assert fix["outcome"].startswith(
            f"{label}: `model.weight.grad` after each backward in the loop has norm"
        )
        quoted = fix["outcome"].split("has norm ", 1)[1].split(";", 1)[0].split(" — ")[0]
        values = [float(v) for v in quoted.split(", ")]
        assert values == pytest.approx(norms(fix["code"]), rel=1e-3)
    assert "the same every iteration" in retained["outcome"] and "the same every" not in moved["outcome"]
    # each quotes the other, so the card shows the difference
    assert (
        "With retain_graph=True: norm" in moved["outcome"]
        and "Computed in the loop: norm" in retained["outcome"]
    )


def test_a_retained_stale_graph_that_runs_is_a_warning_whose_fix_trains_as_meant():
    code = code_of(RETAINED)
    d = only(code, KIND)
    assert d["severity"] == "warning" and "same node" in d["message"]
    (fix,) = d["fixes"]
    assert "retain_graph" not in fix["code"]
    meant = code_of(VARIANTS["forward_over_several_lines"][1].replace("range(4)", "range(3)"))
    assert same_params(final_params(fix["code"]), final_params(meant))
    assert not same_params(final_params(fix["code"]), final_params(code))
    assert "\nAs written: norm" in fix["outcome"]


def test_a_retained_graph_whose_saved_weights_the_optimizer_changed_is_diagnosed_as_stale():
    # Adam's step changes in place the weights the retained graph saved: torch refuses the second backward
    code = code_of(VARIANTS["module_with_a_forward"][0]).replace(
        "loss.backward()", "loss.backward(retain_graph=True)"
    )
    assert "modified by an inplace operation" in run_plain(code).calls[1].error["message"]
    d = only(code, KIND)
    assert d["severity"] == "error" and "changed in place" in d["message"]
    (fix,) = d["fixes"]
    assert "retain_graph" not in fix["code"]
    assert same_params(final_params(fix["code"]), final_params(code_of(VARIANTS["module_with_a_forward"][1])))


def test_a_loss_read_before_the_loop_stays_there_and_is_computed_again_in_it():
    (moved, _) = _diagnosis("loss_read_before_the_loop")["fixes"]
    assert moved["title"].startswith("Repeat the forward")
    assert moved["code"].count("loss = ((model(x) - y) ** 2).mean()") == 2


@pytest.mark.parametrize(
    "code",
    [
        # the loss computed in the loop: a graph of its own each time
        SETUP
        + """
for epoch in range(3):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
""",
        # backward twice on one graph with nothing trained in between: the freed-graph rule's case
        SETUP
        + """
loss = ((model(x) - y) ** 2).mean()
for i in range(2):
    loss.backward(retain_graph=True)
print(model.weight.grad)
""",
    ],
    ids=["forward_in_the_loop", "no_update_in_the_loop"],
)
def test_stays_quiet_when_the_loop_does_not_train_on_a_graph_built_before_it(code: str):
    assert KIND not in [d["kind"] for d in diagnoses(code_of(code))]


@pytest.mark.parametrize("variant", RETAIN_FAILS)
def test_retain_graph_is_not_offered_where_it_would_fail_too(variant: str):
    code = code_of(VARIANTS[variant][0])
    (fix,) = only(code, KIND)["fixes"]
    assert "into the loop" in fix["title"]
    retained = code.replace("loss.backward()", "loss.backward(retain_graph=True)")
    assert "modified by an inplace operation" in run_plain(retained).calls[1].error["message"]


GRAD_LOOP = """
import torch
w = torch.tensor([1.0, -2.0], requires_grad=True)
data = torch.tensor([0.5, 1.5])
loss = ((w * data).sum() - 1.0) ** 2
for i in range(3):
    (g,) = torch.autograd.grad(loss, w)
    with torch.no_grad():
        w -= 0.1 * g
print(w)
"""


def test_an_autograd_grad_loop_is_diagnosed_and_its_outcome_quotes_what_grad_returned():
    code = code_of(GRAD_LOOP)
    moved, retained = only(code, KIND)["fixes"]
    meant = code.replace("loss = ((w * data).sum() - 1.0) ** 2\nfor i in range(3):\n", "for i in range(3):\n")
    meant = meant.replace("    (g,)", "    loss = ((w * data).sum() - 1.0) ** 2\n    (g,)")
    assert same_params(final_params(moved["code"]), final_params(meant))
    assert not same_params(final_params(retained["code"]), final_params(meant))
    returned = [c.returned[0].norm().item() for c in run_plain(moved["code"]).calls]
    quoted = moved["outcome"].split("has norm ", 1)[1].split(";", 1)[0]
    assert [float(v) for v in quoted.split(", ")] == pytest.approx(returned, rel=1e-3)
    assert "returned by each autograd.grad call" in moved["outcome"]


def test_outcomes_quote_how_far_each_optimizer_step_moved_the_weights_as_plain_torch_does():
    moved, retained = _diagnosis("forward_over_several_lines")["fixes"]

    def step_moves(code: str) -> list[float]:
        """‖after − before‖ of model.weight at each optimizer step of a plain run."""
        before: dict[int, torch.Tensor] = {}
        moves: dict[int, list[float]] = {}

        def pre(opt, args, kwargs):
            for group in opt.param_groups:
                for p in group["params"]:
                    before[id(p)] = p.detach().clone()

        def post(opt, args, kwargs):
            for group in opt.param_groups:
                for p in group["params"]:
                    moves.setdefault(id(p), []).append((p.detach() - before[id(p)]).norm().item())

        hooks = [
            register_optimizer_step_pre_hook(pre),
            register_optimizer_step_post_hook(post),
        ]
        globs: dict = {"__name__": "__main__"}
        try:
            torch.manual_seed(0)
            exec(compile(code, "<snippet>", "exec"), globs)
        finally:
            for h in hooks:
                h.remove()
        (weight,) = [t for t, names in named_tensors(globs).values() if "model.weight" in names]
        return moves[id(weight)]

    for fix in (moved, retained):
        quoted = fix["outcome"].split("\n")[0].split("moved `model.weight` by ", 1)[1].rstrip(".")
        values = [float(v) for v in quoted.split(", ")]
        plain = step_moves(fix["code"])
        assert values == pytest.approx(plain[: len(values)], rel=1e-3)
        # a loop longer than the steps a trace records of one line says it quotes the first ones
        assert len(values) == len(plain) or f"the first {len(values)} optimizer steps moved" in fix["outcome"]
