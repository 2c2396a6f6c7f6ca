"""GPU code pasted into the sandbox runs on the CPU: compared with the same code with its devices
set to the CPU by hand (truth.devices_on_cpu), run by plain torch.

The sandbox's switch (``Limits.cuda_on_cpu``) is on in every sandboxed run (jobs.py, the sandbox's
default target) and off in a notebook user's own process."""

from __future__ import annotations

import textwrap

import torch
from gradstep.tracer import Limits, record
from testkit import truth
from testkit.served import served_job

ON_CPU = Limits(cuda_on_cpu=True)


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def _compare_with_plain(code: str) -> dict:
    """Trace ``code`` as the sandbox does; assert it agrees with the plain CPU edit of it."""
    torch.manual_seed(0)
    trace = record(code, ON_CPU)
    plain = truth.run_plain(truth.devices_on_cpu(code), seed=0)
    mismatches = [
        *truth.compare_status(trace, plain),
        *truth.compare_calls(trace, plain),
        *truth.compare_errors(trace, plain),
        *truth.compare_grads(trace, plain),
        *truth.compare_freed(trace, plain),
        *truth.compare_order(trace, plain),
    ]
    assert not mismatches, "\n".join(mismatches)
    assert trace["stdout"] == plain.stdout
    return trace


def _lines_with(code: str, *marks: str) -> str:
    """The lines (as a note lists them) whose text has any of ``marks``."""
    return ", ".join(str(i) for i, text in enumerate(code.splitlines(), 1) if any(m in text for m in marks))


def _cpu_note(trace: dict) -> str:
    (note,) = [n for n in trace["notes"] if n.startswith("Ran on the CPU")]
    return note


TRAINING = _code(
    """
    import torch
    import torch.nn as nn
    device = "cuda"
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(4, 3).cuda()
        target = torch.randint(0, 2, (4,), device=device)
        loss = nn.functional.cross_entropy(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(step, round(loss.item(), 4))
    print(next(model.parameters()).device)
    """
)


def test_a_training_loop_written_for_a_gpu_runs_as_it_would_on_the_cpu_and_says_so():
    trace = _compare_with_plain(TRAINING)
    assert trace["status"] == "ok", trace["error"]
    note = _cpu_note(trace)
    assert "this server has no GPU" in note
    assert f"Line(s) {_lines_with(TRAINING, '.cuda()', 'device=')} asked for CUDA" in note
    assert trace["stdout"].strip().endswith("cpu")  # the tensors are CPU tensors, and say so


def test_every_way_of_asking_for_cuda_gives_cpu_tensors():
    code = _code(
        """
        import torch
        import torch.nn as nn
        dev = torch.device("cuda:0")
        g = torch.Generator(device="cuda")  # asks
        g.manual_seed(3)
        a = torch.randn(2, 3, generator=g, device="cuda")  # asks
        b = torch.ones(2, 3).to(dev)  # asks
        c = torch.ones(2, 3).to("cuda", torch.float64)  # asks
        d = torch.ones(2, 3).to(device=dev, non_blocking=True)  # asks
        e = torch.zeros_like(a, device="cuda")  # asks
        f = a.new_ones(3, device=dev)  # asks
        h = torch.ones(2).type(torch.cuda.FloatTensor)  # asks
        lin = nn.Linear(3, 2, device="cuda")  # asks
        with torch.device("cuda"):  # asks
            k = torch.ones(2)
        print([t.device.type for t in (a, b, c, d, e, f, h, k, lin.weight)], c.dtype, torch.cuda.is_available())
        """
    )
    trace = _compare_with_plain(code)
    assert trace["status"] == "ok", trace["error"]
    assert f"Line(s) {_lines_with(code, '# asks')} asked for CUDA" in _cpu_note(trace)
    assert trace["stdout"].endswith("False\n")  # is_available() tells the truth about the machine


def test_moving_a_leaf_with_cuda_says_what_a_gpu_would_do_differently():
    code = _code(
        """
        import torch
        w = torch.randn(3, requires_grad=True).cuda()
        (w * w).sum().backward()
        print(w.grad)
        """
    )
    trace = _compare_with_plain(code)
    (note,) = [n for n in trace["notes"] if "not a leaf" in n]
    assert note.startswith("Line(s) 2 move a tensor that requires grad")


def test_a_module_moved_with_cuda_keeps_leaf_parameters_and_gets_no_leaf_note():
    code = "import torch\nm = torch.nn.Linear(2, 1).cuda()\nm(torch.ones(1, 2).cuda()).sum().backward()\n"
    trace = _compare_with_plain(code)
    assert not [n for n in trace["notes"] if "not a leaf" in n]


def test_a_call_that_needs_a_gpu_fails_as_torch_fails_and_the_note_names_it():
    code = _code(
        """
        import torch
        x = torch.ones(2, requires_grad=True, device="cuda")
        (x * 3).sum().backward()
        s = torch.cuda.Stream()
        """
    )
    trace = record(code, ON_CPU)
    plain = truth.run_plain(truth.devices_on_cpu(code))
    assert (
        trace["error"]["type"] == plain.error["type"] and trace["error"]["line"] == 4 == plain.error["line"]
    )
    assert "torch.cuda.Stream needs a GPU, and this server has none." in " ".join(trace["notes"])
    assert not truth.compare_grads(trace, plain)


def test_synchronize_waits_for_nothing_and_memory_counters_say_why_they_are_zero():
    code = _code(
        """
        import torch
        x = torch.randn(3, device="cuda", requires_grad=True)
        torch.cuda.synchronize()
        (x ** 2).sum().backward()
        print(torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated())
        """
    )
    trace = record(code, ON_CPU)
    assert trace["status"] == "ok", trace["error"]
    assert trace["stdout"] == f"{torch.cuda.memory_allocated()} {torch.cuda.max_memory_allocated()}\n"
    notes = " ".join(trace["notes"])
    assert "torch.cuda.memory_allocated() at line(s) 5 measures GPU memory" in notes
    assert "torch.cuda.max_memory_allocated() at line(s) 5" in notes


def test_what_the_run_changed_in_torch_is_restored_after_it():
    code = "import torch\ntorch.set_default_device('cuda')\nx = torch.ones(2, requires_grad=True)\nx.sum().backward()\n"
    generator, synchronize = torch.Generator, torch.cuda.synchronize
    trace = record(code, ON_CPU)
    assert trace["status"] == "ok", trace["error"]
    assert torch.get_default_device() == torch.device("cpu")
    assert torch.Generator is generator and torch.cuda.synchronize is synchronize
    assert not torch.overrides._get_current_function_mode_stack()
    assert all(name not in vars(torch.Tensor) for name in ("to", "cuda", "type", "new_zeros"))
    assert not hasattr(torch.randn, "__wrapped__") and not hasattr(torch.zeros_like, "__wrapped__")
    assert torch.ones(1).device.type == "cpu"


def test_in_a_notebook_users_own_process_cuda_code_is_left_as_it_is():
    code = "import torch\nx = torch.ones(2).cuda()\n"
    trace = record(code)
    plain = truth.run_plain(code)
    assert (
        trace["error"]["type"] == plain.error["type"] and trace["error"]["message"] == plain.error["message"]
    )
    assert not any(n.startswith("Ran on the CPU") for n in trace["notes"])


def test_code_that_never_names_cuda_runs_without_the_device_wrappers(monkeypatch):
    from gradstep.tracer import devices

    entered = []
    monkeypatch.setattr(devices, "on_cpu", lambda *args: entered.append(args))
    trace = record("import torch\nx = torch.ones(2, requires_grad=True)\nx.sum().backward()\n", ON_CPU)
    assert trace["status"] == "ok" and entered == [] and trace["notes"] == []


def test_the_sandboxes_trace_job_runs_gpu_code_on_the_cpu():
    trace = served_job(TRAINING)
    assert trace["status"] == "ok", trace["error"]
    _cpu_note(trace)


def test_a_device_index_pinned_memory_and_legacy_cuda_types_run_on_the_cpu():
    code = _code(
        """
        import torch
        x = torch.randn(4, 3).pin_memory().to(0, non_blocking=True)  # asks
        w = torch.randn(3, 2, requires_grad=True)
        b = torch.cuda.FloatTensor(2).fill_(0.5)  # asks
        loss = (x @ w + b).pow(2).mean()
        loss.backward()
        print(x.device.type, b.dtype, w.grad.shape)
        """
    )
    trace = _compare_with_plain(code)
    assert trace["status"] == "ok", trace["error"]
    assert f"Line(s) {_lines_with(code, '# asks')} asked for CUDA" in _cpu_note(trace)
