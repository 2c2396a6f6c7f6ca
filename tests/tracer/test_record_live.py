"""``gradstep.record()`` around the caller's own code agrees with the same code run plainly.

The code recorded is a real training step in another module (``record_live_code``): an
nn.Module, an optimizer, a loss, two iterations, then a second backward through a freed graph.
The plain run (``truth.run_plain_function``) wraps torch's backward/grad and asks torch itself
after every call, as the snippet tracer's truth tests do.
"""

from __future__ import annotations

import pytest
import record_live_code as user
import torch
from gradstep import record
from gradstep.trace_dicts import typed
from gradstep.tracer import Limits
from testkit import truth

FREED = "Trying to backward through the graph a second time"
USER_FILE = user.__file__


def _recorded(**options) -> dict:
    model, opt, x, y = user.make()
    rec = record(watch={"model": model, "x": x, "y": y}, **options)
    with pytest.raises(RuntimeError, match=FREED), rec:
        user.training(model, opt, x, y)
    return rec.data


def _plain() -> truth.PlainRun:
    model, opt, x, y = user.make()
    scope = {"model": model, "x": x, "y": y}
    return truth.run_plain_function(
        lambda: user.training(model, opt, x, y), lambda: scope, USER_FILE, seed=None
    )


@pytest.fixture(scope="module", params=[False, True], ids=["watched", "watched+locals"])
def runs(request) -> tuple[dict, truth.PlainRun]:
    """Named by what is watched only, and also by the recorded frames' locals (more tensors, more
    nodes alive: the ones plain torch is asked about must agree either way)."""
    return _recorded(locals=request.param), _plain()


# ---------------------------------------------------------------- against plain torch


def test_the_calls_agree_with_plain_torch(runs):
    trace, plain = runs
    assert len(plain.calls) == 3
    assert truth.compare_calls(trace, plain) == []


def test_the_grads_after_each_call_agree_with_plain_torch(runs):
    trace, plain = runs
    assert truth.compare_grads(trace, plain) == []


def test_the_failing_second_backward_agrees_with_plain_torch(runs):
    trace, plain = runs
    errors = [s.get("error") for s in truth.call_steps(trace)]
    assert errors[:2] == [None, None]
    assert errors[2]["message"] == plain.calls[2].error["message"]
    assert truth.compare_errors(trace, plain) == []


def test_freed_flags_agree_with_plain_torch(runs):
    trace, plain = runs
    assert truth.compare_freed(trace, plain) == []


def test_the_error_that_left_the_recording_is_the_trace_error(runs):
    trace, plain = runs
    assert trace["status"] == "error"
    assert (trace["error"]["type"], trace["error"]["message"]) == (
        plain.error["type"],
        plain.error["message"],
    )
    assert trace["error"]["line"] == user.LINES["second backward"]
    assert trace["files"][trace["error"]["file"]]["path"].endswith("record_live_code.py")


def test_the_recording_is_a_valid_trace(runs):
    trace, _ = runs
    typed(trace)


# ---------------------------------------------------------------- lines across files


def test_steps_are_attributed_to_the_users_file_and_line(runs):
    trace, _ = runs
    files = [f["path"] for f in trace["files"]]
    where = {
        (files[s["file"]].rsplit("/", 1)[-1], s["line"], s["kind"]) for s in trace["steps"] if "file" in s
    }
    for kind, label in (("forward", "forward"), ("forward", "loss"), ("backward", "backward")):
        assert ("record_live_code.py", user.LINES[label], kind) in where


def test_nodes_carry_the_line_and_file_that_built_them(runs):
    trace, _ = runs
    mse = [n for n in trace["nodes"] if n["op"] == "MseLossBackward0"]
    assert mse
    assert {(n["line"], trace["files"][n["file"]]["path"]) for n in mse} == {
        (user.LINES["loss"], trace["files"][mse[0]["file"]]["path"])
    }
    assert trace["files"][mse[0]["file"]]["path"].endswith("record_live_code.py")


def test_the_files_carry_their_source(runs):
    trace, _ = runs
    sources = {f["path"].rsplit("/", 1)[-1]: f["code"] for f in trace["files"]}
    with open(USER_FILE) as f:
        assert sources["record_live_code.py"] == f.read()
    assert trace["code"] == trace["files"][0]["code"]  # the file the recording was entered from


def test_the_module_path_of_nodes_is_the_watched_name(runs):
    trace, _ = runs
    modules = {n.get("module") for n in trace["nodes"]}
    assert {"model.0", "model.2"} <= modules


# ---------------------------------------------------------------- naming by locals


def test_locals_name_the_tensors_of_the_recorded_frames():
    model, opt, x, y = user.make()
    with record() as rec:
        user.Trainer(model, opt).step(x, y)
    step = next(s for s in rec.data["steps"] if s["kind"] == "backward")
    # the outermost frame's name wins: the test's `model`, not step()'s `self.model`
    grads = {t["name"] for t in step["tensors"] if t.get("grad")}
    assert {"model.0.weight", "model.2.bias"} <= grads
    assert ["loss"] in [n.get("vars") for n in step["nodes"]]  # step()'s local, on its grad_fn


def test_watch_names_positional_objects_by_the_callers_names():
    model, opt, x, y = user.make()
    rec = record(locals=False).watch(model, x)
    assert set(rec._watched) == {"model", "x"}


# ---------------------------------------------------------------- forms


def test_only_the_selected_iteration_is_recorded():
    model, opt, x, y = user.make()
    trainer = user.Trainer(model, opt)
    rec = record(locals=False).watch(model=model)
    grads = []
    for i in range(4):
        with rec.iteration(i == 2):
            trainer.step(x, y)
        grads.append(model[0].weight.grad.clone())
    calls = truth.call_steps(rec.data)
    assert len(calls) == 1
    got = next(t for t in calls[0]["tensors"] if t["name"] == "model.0.weight")
    assert truth.grad_mismatch(grads[2], got["grad"]) is None


def test_two_recorded_iterations_add_to_one_trace_and_say_so():
    model, opt, x, y = user.make()
    trainer = user.Trainer(model, opt)
    rec = record(locals=False).watch(model=model)
    for i in range(3):
        with rec.iteration(i != 1):
            trainer.step(x, y)
    assert len(truth.call_steps(rec.data)) == 2
    assert any("2 separate blocks" in n for n in rec.data["notes"])
    typed(rec.data)


def test_the_decorator_records_the_first_call():
    model, opt, x, y = user.make()

    @record
    def step():
        return user.Trainer(model, opt).step(x, y)

    step()
    step()
    calls = truth.call_steps(step.recording.data)
    assert len(calls) == 1
    assert calls[0]["line"] == user.LINES["backward"]


def test_the_decorator_records_the_calls_when_selects():
    model, opt, x, y = user.make()
    seen = []

    @record(when=lambda n: n == 1)
    def step():
        loss = user.Trainer(model, opt).step(x, y)
        seen.append(model[2].bias.grad.clone())
        return loss

    for _ in range(3):
        step()
    calls = truth.call_steps(step.recording.data)
    assert len(calls) == 1
    got = next(t for t in calls[0]["tensors"] if t["name"].endswith("model.2.bias"))
    assert truth.grad_mismatch(seen[1], got["grad"]) is None


def test_the_users_exception_is_raised_on_and_recorded():
    with pytest.raises(ZeroDivisionError), record() as rec:
        1 / 0  # noqa: B018
    assert rec.data["status"] == "error"
    assert rec.data["error"]["type"] == "ZeroDivisionError"
    assert rec.data["files"][rec.data["error"]["file"]]["path"].endswith("test_record_live.py")


def test_the_recording_cannot_be_read_while_it_runs():
    with record() as rec, pytest.raises(RuntimeError, match="still running"):
        _ = rec.data


def test_torch_is_restored_after_the_recording():
    import sys

    backward, grad, trace_fn = torch.autograd.backward, torch.autograd.grad, sys.gettrace()
    with record():
        pass
    assert (torch.autograd.backward, torch.autograd.grad, sys.gettrace()) == (backward, grad, trace_fn)


def test_output_is_recorded_and_still_printed(capsys):
    with record() as rec:
        print("hello from the user")
    assert "hello from the user" in capsys.readouterr().out
    assert rec.data["stdout"] == "hello from the user\n"


def _what_the_program_sees() -> dict:
    import sys

    return {
        "stdout fileno": sys.stdout.fileno(),
        "stderr fileno": sys.stderr.fileno(),
        "encoding": sys.stdout.encoding,
        "errors": sys.stdout.errors,
        "binary buffer": sys.stdout.buffer.fileno(),
        "a tty": sys.stdout.isatty(),
        "stderr is stdout": sys.stderr is sys.stdout,
    }


def test_the_program_sees_its_own_streams_inside_a_recording():
    plain = _what_the_program_sees()
    with record():
        recorded = _what_the_program_sees()
    assert recorded == plain


def test_stderr_still_goes_to_stderr_and_into_the_trace(capsys):
    import sys

    with record() as rec:
        print("to stderr", file=sys.stderr)
        print("to stdout")
    shown = capsys.readouterr()
    assert (shown.out, shown.err) == ("to stdout\n", "to stderr\n")
    assert rec.data["stdout"] == "to stderr\nto stdout\n"


def test_a_warning_filter_set_inside_a_recording_stays_set():
    import warnings

    with warnings.catch_warnings():  # the test's own process is left as it was
        with record():
            warnings.filterwarnings("ignore", message="set inside the block")
        assert any(f[1] is not None and f[1].pattern == "set inside the block" for f in warnings.filters)


def test_the_streams_and_warning_display_are_restored_after_an_exception():
    import sys
    import warnings

    before = (sys.stdout, sys.stderr, warnings.showwarning)
    with pytest.raises(ZeroDivisionError), record():
        1 / 0  # noqa: B018
    assert (sys.stdout, sys.stderr, warnings.showwarning) == before


# ---------------------------------------------------------------- caps and outputs


def test_the_snippet_tracers_caps_apply():
    model, opt, x, y = user.make()
    rec = record(limits=Limits(max_steps=3), locals=False).watch(model=model)
    with rec:
        for _ in range(3):
            user.Trainer(model, opt).step(x, y)
    assert len(rec.data["steps"]) == 3
    assert "steps" in rec.data["truncated"]


def test_export_writes_a_page(tmp_path):
    model, opt, x, y = user.make()
    with record() as rec:
        user.Trainer(model, opt).step(x, y)
    page = rec.export(tmp_path / "page.html")
    assert "<html" in page.read_text().lower()
    assert rec.show().data is rec.data


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (this machine has none)")
def test_cuda_tensors_in_the_users_process_agree_with_plain_torch():
    model, opt, x, y = user.make()
    model, x, y = model.cuda(), x.cuda(), y.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = record(watch={"model": model, "x": x, "y": y}, locals=False)
    with pytest.raises(RuntimeError, match=FREED), rec:
        user.training(model, opt, x, y)
    model2, _, x2, y2 = user.make()
    model2, x2, y2 = model2.cuda(), x2.cuda(), y2.cuda()
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.1)
    scope = {"model": model2, "x": x2, "y": y2}
    plain = truth.run_plain_function(
        lambda: user.training(model2, opt2, x2, y2), lambda: scope, USER_FILE, None
    )
    trace = rec.data
    assert truth.compare_calls(trace, plain) == []
    assert truth.compare_grads(trace, plain) == []
    assert truth.compare_freed(trace, plain) == []


def test_a_compiled_function_records_the_graph_plain_torch_builds():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    f = torch.compile(lambda x: lin(x).relu().sum(), backend="aot_eager")
    x = torch.randn(4, 3)
    f(x)  # compiled before the recording, as in a notebook
    lin.zero_grad()
    rec = record(watch={"lin": lin}, locals=False)
    with rec:
        f(x).backward()
    trace = rec.data
    assert [n["op"] for n in trace["nodes"]].count("CompiledFunctionBackward") == 1  # no graph break
    lin.zero_grad()
    plain = truth.run_plain_function(lambda: f(x).backward(), lambda: {"lin": lin}, __file__, seed=None)
    assert truth.compare_calls(trace, plain) == []
    assert truth.compare_grads(trace, plain) == []


def test_a_paused_line_tracer_is_said_and_restored():
    import sys

    def tracer(frame, event, arg):
        return None

    sys.settrace(tracer)
    try:
        with record() as rec:
            pass
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(None)
    assert any("debugger or coverage" in n for n in rec.data["notes"])


def test_warnings_are_recorded_and_still_shown():
    import warnings

    with pytest.warns(UserWarning, match="from the user"), record() as rec:
        warnings.warn("from the user", stacklevel=1)
    (w,) = rec.data["warnings"]
    assert (w["category"], w["message"]) == ("UserWarning", "from the user")
    assert rec.data["files"][w["file"]]["path"].endswith("test_record_live.py")


def test_anomaly_modes_forward_call_keeps_the_users_frames_in_the_trace_and_all_where_shown():
    forward = "Traceback of forward call that caused the error:"
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    with pytest.warns(UserWarning) as shown, record() as rec, pytest.raises(RuntimeError, match="nan"):
        with torch.autograd.detect_anomaly():
            (x.sqrt() * 0).sum().backward()
    (seen,) = [str(w.message) for w in shown if forward in str(w.message)]
    (kept,) = [w["message"] for w in rec.data["warnings"] if forward in w["message"]]
    assert "pluggy" in seen, "the user's console gets the whole stack, as Python gives it"
    (frame,) = [line for line in kept.splitlines() if line.startswith('  File "')]
    assert frame.endswith(
        ", in test_anomaly_modes_forward_call_keeps_the_users_frames_in_the_trace_and_all_where_shown"
    )
    line = frame.split(", line ")[1].split(",")[0]
    assert f'test_record_live.py", line {line}, in test_anomaly' in seen and "test_record_live.py" in frame
    assert "(x.sqrt() * 0).sum().backward()" in kept


def test_nodes_built_before_the_recording_have_no_line_and_a_note_says_so():
    w = torch.ones(3, requires_grad=True)
    h = (w * 2).tanh()  # built before the recording: two nodes
    with record() as rec:
        loss = (h * 3).sum()  # built here
        loss.backward()
    built = sorted((n for n in rec.data["nodes"] if n["seq"] is not None), key=lambda n: n["seq"])
    assert [(n["op"], n["line"] is None) for n in built] == [
        ("MulBackward0", True),  # w * 2
        ("TanhBackward0", True),
        ("MulBackward0", False),  # h * 3
        ("SumBackward0", False),
    ]
    assert any("2 node(s) were built outside the recorded code" in n for n in rec.data["notes"])


def test_a_recording_that_never_ran_says_so():
    rec = record()
    for i in range(2):
        with rec.iteration(i == 5):
            pass
    assert rec.data["steps"] == []
    assert any("Nothing was recorded" in n for n in rec.data["notes"])


def test_autograd_grad_with_create_graph_in_a_users_function_agrees_with_plain_torch():
    model, _, x, y = user.make()
    rec = record(watch={"model": model}, locals=False)
    with rec:
        user.gradient_penalty(model, x, y)
    model2, _, x2, y2 = user.make()
    plain = truth.run_plain_function(
        lambda: user.gradient_penalty(model2, x2, y2), lambda: {"model": model2}, USER_FILE, seed=None
    )
    trace = rec.data
    assert [s["kind"] for s in truth.call_steps(trace)] == ["grad", "backward"]
    assert truth.call_steps(trace)[0]["line"] == user.LINES["penalty grad"]
    for compare in (truth.compare_calls, truth.compare_grads, truth.compare_returned, truth.compare_freed):
        assert compare(trace, plain) == [], compare.__name__


def test_a_hook_in_the_users_file_is_a_line_the_call_ran():
    w = torch.ones(3, requires_grad=True)
    with record() as rec:
        h = w * 3
        h.register_hook(user.halved)
        h.sum().backward()
    (call,) = truth.call_steps(rec.data)
    files = [f["path"] for f in rec.data["files"]]
    ran = [(files[f], line) for f, line in zip(call["ran_files"], call["ran_lines"], strict=True)]
    assert (files[call["ran_files"][0]], user.LINES["hook"]) in ran
    assert files[call["ran_files"][0]].endswith("record_live_code.py")
    assert w.grad.tolist() == [1.5, 1.5, 1.5]
