"""Update steps (the optimizer calls) checked against plain PyTorch.

Each test records a training loop and runs the same code plainly, with each optimizer call's line
bracketed by captures of the parameters, their ``.grad`` and the learning rates (same line numbers:
the captures are added on the call's own line). What the trace says each call did must be what the
plain run shows it did.
"""

from __future__ import annotations

import contextlib
import io
import math
import textwrap
import warnings
from dataclasses import dataclass, field

import pytest
import torch
from gradstep.columns import pack
from gradstep.narrate import narrate
from gradstep.schema import Trace
from gradstep.tracer import record
from gradstep.tracer.limits import Limits


@dataclass
class Capture:
    line: int
    iteration: int  # executions of this line so far (its loop's iteration, one call per iteration)
    params: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor | None]
    lrs: list[float]
    after_params: dict[str, torch.Tensor] = field(default_factory=dict)
    after_grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    after_lrs: list[float] = field(default_factory=list)


def plain(code: str, lines: list[int]) -> list[Capture]:
    """Run ``code`` under plain torch; the statement on each of ``lines`` is bracketed by captures of
    ``model``'s parameters (named as the trace names them), their .grad and ``opt``'s rates."""
    src = code.splitlines()
    for n in lines:
        text = src[n - 1]
        indent = text[: len(text) - len(text.lstrip())]
        stmt = text.split("#")[0].strip()
        src[n - 1] = f"{indent}__cap__({n}, 0); {stmt}; __cap__({n}, 1)"
    captures: list[Capture] = []
    counts: dict[int, int] = {}
    g: dict = {"__name__": "__main__"}

    def state():
        named = dict(g["model"].named_parameters())
        params = {f"model.{k}": p.detach().clone() for k, p in named.items()}
        grads = {f"model.{k}": None if p.grad is None else p.grad.clone() for k, p in named.items()}
        lrs = [float(pg["lr"]) for pg in g["opt"].param_groups] if "opt" in g else []
        return params, grads, lrs

    def cap(line: int, after: int) -> None:
        params, grads, lrs = state()
        if not after:
            counts[line] = counts.get(line, 0) + 1
            captures.append(Capture(line, counts[line], params, grads, lrs))
        else:
            c = captures[-1]
            c.after_params, c.after_grads, c.after_lrs = params, grads, lrs

    g["__cap__"] = cap
    exec(compile("\n".join(src) + "\n", "<plain>", "exec"), g)
    return captures


def traced(code: str) -> dict:
    trace = narrate(record(code))
    Trace.model_validate(pack(trace))  # the contract holds
    assert trace["status"] == "ok", trace["error"]
    return trace


def updates(trace: dict) -> list[dict]:
    return [s for s in trace["steps"] if s["kind"] == "update"]


def grads_of(step: dict) -> dict[str, dict | None]:
    return {t["name"]: t.get("grad") for t in step["tensors"]}


def close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def loop(optimizer: str, body: str, iterations: int = 3, extra: str = "") -> tuple[str, list[int]]:
    """A training loop; ``body`` lines marked with ``#U`` are the update calls. Returns the code and
    their line numbers."""
    code = textwrap.dedent(
        f"""\
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = {optimizer}
        {extra}
        x = torch.randn(5, 3)
        y = torch.randn(5, 2) * 4
        for epoch in range({iterations}):
        """
    ) + textwrap.indent(textwrap.dedent(body), "    ")
    lines = [i + 1 for i, text in enumerate(code.splitlines()) if text.rstrip().endswith("#U")]
    return code, lines


TRAIN = """\
opt.zero_grad()  #U
loss = ((model(x) - y) ** 2).mean()
loss.backward()
opt.step()  #U
"""


def check_against_plain(code: str, lines: list[int]) -> tuple[dict, list[Capture]]:
    """The update steps are the plain run's calls, in order, at their lines and iterations, and each
    did to .grad and to the parameters what the plain call did."""
    trace = traced(code)
    caps = plain(code, lines)
    steps = updates(trace)
    assert [(s["line"], s.get("iteration")) for s in steps] == [(c.line, c.iteration) for c in caps]
    for step, c in zip(steps, caps, strict=True):
        upd = step["update"]
        by_name = {p["name"]: p for p in upd["params"]}
        recorded = grads_of(step)
        for name in c.params:
            # the .grad the step shows is the .grad after the plain call
            after = c.after_grads[name]
            if after is None:
                assert recorded[name] is None, (step["index"], name)
            else:
                assert recorded[name] is not None and close(recorded[name]["norm"], after.norm().item()), (
                    step["index"],
                    name,
                )
            if upd["op"] == "step":
                delta = (c.after_params[name] - c.params[name]).norm().item()
                assert close(by_name[name]["delta_norm"], delta), (step["index"], name)
                assert by_name[name].get("updated", False) == (delta != 0)
            if upd["op"] == "zero_grad":
                had, now = c.grads[name], c.after_grads[name]
                expected = None if had is None else ("set_to_none" if now is None else "zeroed")
                assert by_name[name].get("grad") == expected
                if expected == "zeroed":
                    assert not now.any()
            if upd["op"] in ("clip_grad_norm", "clip_grad_value"):
                before, now = c.grads[name], c.after_grads[name]
                assert close(by_name[name]["grad_norm_before"], before.norm().item())
                assert close(by_name[name]["grad_norm_after"], now.norm().item())
                assert (by_name[name].get("grad") == "clipped") == (not torch.equal(before, now))
        if upd["op"] in ("step", "lr_step"):
            assert upd["lr_after"] == pytest.approx(c.after_lrs)
        if upd["op"] == "lr_step":
            assert upd["lr_before"] == pytest.approx(c.lrs)
        if upd["op"] == "clip_grad_norm":
            total = torch.linalg.vector_norm(torch.stack([g.norm() for g in c.grads.values()])).item()
            total_after = torch.linalg.vector_norm(
                torch.stack([g.norm() for g in c.after_grads.values()])
            ).item()
            assert close(upd["total_norm_before"], total)
            assert close(upd["total_norm_after"], total_after)
    return trace, caps


def test_sgd_loop_zero_grad_and_step_are_steps_as_plain_torch_runs_them():
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", TRAIN)
    trace, caps = check_against_plain(code, lines)
    assert len(caps) == 6
    # the .grad that zero_grad set to None (iteration 2 on) is what plain torch shows: None
    zero = [s for s in updates(trace) if s["update"]["op"] == "zero_grad"]
    assert [all(g is None for g in grads_of(s).values()) for s in zero] == [True, True, True]


@pytest.mark.parametrize("foreach", [True, False])
def test_adam_step_updates_by_what_plain_adam_moves(foreach: bool):
    code, lines = loop(f"torch.optim.Adam(model.parameters(), lr=0.01, foreach={foreach})", TRAIN)
    check_against_plain(code, lines)


def test_zero_grad_set_to_none_false_zeroes_the_grads():
    body = TRAIN.replace("opt.zero_grad()", "opt.zero_grad(set_to_none=False)")
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", body)
    trace, _ = check_against_plain(code, lines)
    kinds = [
        p.get("grad")
        for s in updates(trace)
        if s["update"]["op"] == "zero_grad"
        for p in s["update"]["params"]
    ]
    assert "zeroed" in kinds


def test_model_zero_grad_is_a_step():
    body = TRAIN.replace("opt.zero_grad()", "model.zero_grad()")
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", body)
    trace, _ = check_against_plain(code, lines)
    assert {s["update"]["of_class"] for s in updates(trace) if s["update"]["op"] == "zero_grad"} == {"Linear"}


def test_clip_grad_norm_clips_as_plain_torch():
    body = TRAIN.replace(
        "opt.step()", "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)  #U\nopt.step()"
    )
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", body)
    trace, _ = check_against_plain(code, lines)
    clips = [s for s in updates(trace) if s["update"]["op"] == "clip_grad_norm"]
    assert clips and all(p.get("grad") == "clipped" for s in clips for p in s["update"]["params"])
    assert clips[0]["update"]["max_norm"] == 0.5


def test_clip_grad_value_clamps_as_plain_torch():
    body = TRAIN.replace(
        "opt.step()", "torch.nn.utils.clip_grad_value_(model.parameters(), 0.3)  #U\nopt.step()"
    )
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", body)
    check_against_plain(code, lines)


def test_step_lr_scheduler_changes_the_rate_as_plain_torch():
    body = TRAIN + "sched.step()  #U\n"
    code, lines = loop(
        "torch.optim.SGD(model.parameters(), lr=0.1)",
        body,
        extra="sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)",
    )
    trace, caps = check_against_plain(code, lines)
    # the constructor's own first step() is no step of the trace
    lr_steps = [s for s in updates(trace) if s["update"]["op"] == "lr_step"]
    assert len(lr_steps) == len([c for c in caps if c.line == lines[-1]]) == 3


def test_update_steps_come_in_order_with_their_lines_and_iterations():
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", TRAIN)
    trace = traced(code)
    seen = [(s["kind"], s["line"], s.get("iteration")) for s in trace["steps"]]
    zero, step = lines
    assert seen[:4] == [
        ("update", zero, 1),
        ("forward", zero + 1, 1),
        ("backward", zero + 2, 1),
        ("update", step, 1),
    ]
    assert [it for _, _, it in seen] == sorted(it for _, _, it in seen)


def test_steps_outside_the_loop_have_no_iteration():
    code = "import torch\nw = torch.ones(2, requires_grad=True)\nfor i in range(2):\n    y = (w * 2).sum()\nz = (w * 3).sum()\n"
    trace = traced(code)
    assert [(s["line"], s.get("iteration")) for s in trace["steps"]] == [(4, 1), (4, 2), (5, None)]


def test_a_long_loop_shows_its_optimizer_in_every_iteration_as_plain_torch_runs_it():
    # past its first iterations a loop's forward lines fold, but its zero_grad and step keep a step
    # each per backward: the .grad never changes unseen between two backward steps
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", TRAIN, iterations=100)
    trace, caps = check_against_plain(code, lines)  # each of the 200 calls, as plain torch made it
    assert not trace["truncated"] and len(caps) == 200
    later = [s for s in trace["steps"] if s["kind"] == "forward" and s["iteration"] > 3]
    assert later and all("repeat" in s for s in later)  # the forward lines still fold
    kinds = [s["kind"] for s in trace["steps"] if (s.get("iteration") or 0) == 50]
    assert kinds == ["update", "forward", "backward", "update"]


def test_optimizer_calls_with_no_backward_between_them_fold_as_lines_do():
    code = textwrap.dedent(
        """\
        import torch
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        for i in range(10):
            sched.step()
        print(opt.param_groups[0]["lr"])
        """
    )
    trace = traced(code)
    assert [s["update"]["op"] for s in updates(trace)] == ["lr_step"] * Limits().line_repeats
    # the folded calls ran untouched: the rate printed is plain torch's
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that no optimizer step came first, as the trace's
        exec(compile(code, "<plain>", "exec"), {"__name__": "__main__"})
    assert trace["stdout"] == out.getvalue()


def test_calls_inside_a_step_make_no_steps_of_their_own():
    code = textwrap.dedent(
        """\
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.LBFGS(model.parameters(), max_iter=2)
        x = torch.randn(4, 3)
        def closure():
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            return loss
        opt.step(closure)
        """
    )
    trace = traced(code)
    assert [s["update"]["op"] for s in updates(trace)] == ["step"]


def test_narration_says_what_zero_grad_and_step_did():
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", TRAIN)
    trace = traced(code)
    caps = plain(code, lines)
    steps = updates(trace)
    assert steps[2]["explanation"].startswith(
        f"`opt.zero_grad()` (line {lines[0]}, iteration 2) set the .grad of 2 parameters to None: "
        "model.weight and model.bias."
    )
    from gradstep.printing import fmt_number

    c = caps[1]  # the first opt.step()
    delta = (c.after_params["model.weight"] - c.params["model.weight"]).norm().item()
    assert f"model.weight by ‖{fmt_number(delta)}‖" in steps[1]["explanation"]
    assert steps[1]["explanation"].startswith(
        f"`opt.step()` (line {lines[1]}, iteration 1) updated 2 parameters"
    )


def test_a_step_after_zero_grad_changes_nothing_and_says_why():
    body = "loss = ((model(x) - y) ** 2).mean()\nloss.backward()\nopt.zero_grad()  #U\nopt.step()  #U\n"
    code, lines = loop("torch.optim.SGD(model.parameters(), lr=0.1)", body)
    trace, caps = check_against_plain(code, lines)
    assert all(
        torch.equal(c.params[n], c.after_params[n]) for c in caps for n in c.params
    )  # plain: nothing moved
    step = next(s for s in updates(trace) if s["update"]["op"] == "step")
    assert "changed no parameter" in step["explanation"]
    assert "model.weight and model.bias have no .grad" in step["explanation"]


def test_clipping_within_max_norm_is_narrated_without_a_doubled_full_stop():
    # torch prints a whole max_norm as "1.": the sentence must not end on it ("1..")
    code = (
        "import torch\nm = torch.nn.Linear(3, 1)\nm(torch.ones(2, 3)).sum().backward()\n"
        "torch.nn.utils.clip_grad_norm_(m.parameters(), 1000.0)\n"
    )
    (step,) = [s for s in narrate(record(code))["steps"] if s["kind"] == "update"]
    assert "is within max_norm 1000." in step["explanation"] and ".." not in step["explanation"]
