"""Pasted code in a run with no keyboard, network or files of its own (``Limits.offline``, on in the
sandbox): libraries it lacks, downloads, ``input()``, missing files, ``tqdm`` and ``matplotlib``.

Each run is compared with plain Python on the same code where plain Python can run it here (stdin
at its end, as in the sandbox; the same files missing; the same modules missing), and the stand-ins
with the same code written without them."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from gradstep.tracer import Limits, record
from testkit import truth
from testkit.served import served_job

OFFLINE = Limits(offline=True)
REPO = Path(__file__).resolve().parents[2]


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def _plain(code: str) -> truth.PlainRun:
    """Plain torch on ``code`` with an empty stdin (as a run here has)."""
    stdin = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        return truth.run_plain(code)
    finally:
        sys.stdin = stdin


def _same_end(trace: dict, plain: truth.PlainRun) -> None:
    mismatches = [
        *truth.compare_status(trace, plain),
        *truth.compare_calls(trace, plain),
        *truth.compare_grads(trace, plain),
    ]
    assert not mismatches, "\n".join(mismatches)
    assert trace["stdout"] == plain.stdout


def _note(trace: dict, start: str) -> str:
    (note,) = [n for n in trace["notes"] if n.startswith(start)]
    return note


def _absent(module: str) -> None:
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed in this environment")


@pytest.mark.parametrize(
    ("module", "code"),
    [
        (
            "torchvision",
            "import torch\nfrom torchvision import models\nnet = models.resnet18(weights='IMAGENET1K_V1')\n",
        ),
        (
            "transformers",
            "import torch\nfrom transformers import AutoModel\nm = AutoModel.from_pretrained('bert-base-uncased')\n",
        ),
        ("lightning", "import torch\nimport lightning as L\n"),
        ("wandb", "import torch\nimport wandb\nwandb.init(project='demo')\n"),
        (
            "tensorboard",
            "import torch\nfrom torch.utils.tensorboard import SummaryWriter\nwriter = SummaryWriter()\n",
        ),
    ],
)
def test_a_library_that_is_not_here_fails_as_in_plain_python_and_the_note_says_what_to_use(module, code):
    _absent(module)
    trace = record(code, OFFLINE)
    _same_end(trace, _plain(code))
    note = _note(trace, f"{module} is not installed here")
    assert "numpy" in note and "torch.nn" in note and "Instead," in note
    assert "use what torch and numpy offer" not in note, "what to write instead of this one"


def test_a_library_imported_under_try_gets_no_note():
    code = "import torch\ntry:\n    import torchvision\nexcept ImportError:\n    torchvision = None\nprint(torchvision)\n"
    trace = record(code, OFFLINE)
    _same_end(trace, _plain(code))
    assert trace["notes"] == []


def test_pretrained_weights_from_torch_hub_end_in_one_clear_error_without_touching_the_network(monkeypatch):
    def no_socket(*args, **kwargs):
        raise AssertionError("the run opened a socket")

    monkeypatch.setattr(socket, "socket", no_socket)
    code = _code(
        """
        import torch
        model = torch.hub.load("pytorch/vision", "resnet18", pretrained=True)
        """
    )
    trace = record(code, OFFLINE)
    error = trace["error"]
    assert error["type"] == "NoNetwork" and error["line"] == 2
    assert "torch.hub.load() downloads from the internet" in error["message"]
    assert issubclass(type(_raised(code)), ConnectionError)  # what `except OSError` in pasted code catches
    assert "no pretrained weights" in _note(trace, "A run here has no network")
    assert torch.hub.load.__module__ == "torch.hub"  # restored after the run


def _raised(code: str) -> BaseException:
    from gradstep.tracer.offline import OfflineUse, offline

    with offline(OfflineUse(), lambda: None), pytest.raises(Exception) as info:
        exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})
    return info.value


def test_a_download_that_fails_for_want_of_network_gets_the_network_note(monkeypatch):
    def unreachable(*args, **kwargs):
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", unreachable)  # as in the sandbox: no network at all
    code = "import urllib.request\nurllib.request.urlopen('https://example.com/data.csv')\n"
    trace = record(code, OFFLINE)
    plain = _plain(code)
    assert trace["error"]["type"] == plain.error["type"] == "URLError"
    assert trace["error"]["line"] == plain.error["line"] == 2
    _note(trace, "A run here has no network")


def test_input_shows_its_prompt_and_ends_the_run_as_it_would_with_no_one_typing():
    code = _code(
        """
        import torch
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        lr = float(input("learning rate? "))
        """
    )
    trace = record(code, OFFLINE)
    _same_end(trace, _plain(code))  # EOFError at line 4, after the prompt and the backward
    assert "Put the value in the code" in _note(trace, "input() at line(s) 4 waits for someone to type")
    assert input is __builtins__["input"] if isinstance(__builtins__, dict) else input is __builtins__.input


def test_a_missing_data_file_fails_as_in_plain_python_and_the_note_says_the_folder_is_empty(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code = _code(
        """
        import torch
        data = torch.load("train_data.pt")
        """
    )
    trace = record(code, OFFLINE)
    _same_end(trace, _plain(code))
    assert "empty folder of its own" in _note(trace, "'train_data.pt' is not here")


def test_a_file_the_snippet_writes_reads_back(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = _code(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        torch.save(w.detach(), "w.pt")
        v = torch.load("w.pt").requires_grad_()
        (v * w).sum().backward()
        print(torch.equal(w.grad, v.detach()))
        """
    )
    trace = record(code, OFFLINE)
    _same_end(trace, _plain(code))
    assert trace["notes"] == []


TRAIN_WITH_BAR_AND_PLOT = _code(
    """
    import torch
    from tqdm import tqdm
    import matplotlib.pyplot as plt
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in tqdm(range(4), desc="training"):
        loss = model(torch.randn(8, 3)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3))
    ax1.plot(losses, label="loss")
    ax1.legend()
    plt.tight_layout()
    plt.savefig("losses.png")
    plt.show()
    print(losses)
    """
)


def test_a_progress_bar_and_a_plot_leave_the_training_as_it_is_without_them(tmp_path, monkeypatch):
    _absent("tqdm")
    _absent("matplotlib")
    monkeypatch.chdir(tmp_path)
    trace = record(TRAIN_WITH_BAR_AND_PLOT, OFFLINE)
    assert trace["status"] == "ok", trace["error"]
    # the same training, written without the bar and the plot
    lines = TRAIN_WITH_BAR_AND_PLOT.splitlines()
    plain_code = "\n".join(
        line.replace('tqdm(range(4), desc="training")', "range(4)")
        for line in lines
        if not any(m in line for m in ("tqdm import", "plt", "ax1", "fig"))
    )
    _same_end(trace, _plain(plain_code))
    notes = " ".join(trace["notes"])
    assert "tqdm (imported at line 2) is not installed here" in notes
    assert "matplotlib (imported at line 3) is not installed here" in notes
    assert not list(tmp_path.iterdir())  # nothing was drawn, so nothing saved
    assert "tqdm" not in sys.modules and "matplotlib" not in sys.modules  # the stand-ins left with the run


def test_the_stand_ins_hold_the_names_pasted_code_uses():
    _absent("tqdm")
    _absent("matplotlib")
    code = _code(
        """
        from tqdm.auto import tqdm, trange
        import tqdm as tq
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
        bar = tqdm(total=3)
        for _ in range(3):
            bar.update(1)
            bar.set_postfix(loss=0.5)
        bar.close()
        fig, axes = plt.subplots(2, 2)
        for ax in axes.flat:
            ax.plot([1, 2])
        with tq.tqdm([1, 2]) as pbar:
            total = sum(pbar)
        print(bar.n, len(list(trange(2))), axes.shape, total)
        """
    )
    trace = record(code, OFFLINE)
    assert trace["status"] == "ok", trace["error"]
    assert trace["stdout"] == "3 2 (2, 2) 3\n"


def test_in_a_notebook_users_own_process_nothing_is_stood_in_or_blocked():
    _absent("tqdm")
    code = "from tqdm import tqdm\n"
    trace = record(code)
    assert trace["error"]["type"] == "ModuleNotFoundError" and trace["notes"] == []


def test_the_sandboxes_trace_job_runs_offline():
    _absent("torchvision")
    trace = served_job("import torchvision\n")
    _note(trace, "torchvision is not installed here")


def test_prints_of_the_stand_ins_do_not_leak_into_the_process():
    with contextlib.redirect_stdout(io.StringIO()):
        record("from tqdm import tqdm\nfor _ in tqdm(range(2)):\n    pass\n", OFFLINE)
    assert not [f for f in sys.meta_path if type(f).__name__ == "StandInFinder"]


def test_a_script_with_argparse_takes_its_defaults_as_when_run_with_no_arguments(monkeypatch):
    code = _code(
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.05)
        args = parser.parse_args()
        print(args.lr, parser.prog)
        """
    )
    trace = record(code, OFFLINE)
    monkeypatch.setattr(sys, "argv", ["snippet.py"])  # python snippet.py
    _same_end(trace, _plain(code))


def test_a_library_probing_for_tqdm_during_the_run_finds_none():
    _absent("tqdm")
    code = _code(
        """
        import importlib
        try:
            importlib.import_module("tqdm")
            print("found")
        except ImportError:
            print("absent")
        from tqdm import tqdm
        print(list(tqdm([1, 2])))
        """
    )
    trace = record(code, OFFLINE)
    assert trace["stdout"] == "absent\n[1, 2]\n"


LOADER = _code(
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(12, 3), torch.randn(12, 1))
    class Loader(DataLoader):  # a project's own loader passes its arguments on
        def __init__(self, dataset, **kwargs):
            super().__init__(dataset, **kwargs)
    loaders = [
        DataLoader(data, 4, True, None, None, 2, generator=torch.Generator().manual_seed(1)),
        DataLoader(data, batch_size=4, shuffle=True, num_workers=2, persistent_workers=True, prefetch_factor=4,
                   timeout=30, multiprocessing_context="fork"),
        Loader(data, batch_size=6, num_workers=1),
    ]
    w = torch.zeros(3, 1, requires_grad=True)
    for loader in loaders:
        for x, y in loader:
            ((x @ w - y) ** 2).mean().backward()
        print(loader.num_workers, w.grad.sum().item())
    """
)


def test_a_dataloader_with_worker_processes_loads_the_same_batches_in_the_main_process():
    # A run here starts no processes (the sandbox's seccomp refuses fork): worker processes would
    # end the run with a bare FileNotFoundError from multiprocessing's semaphores. Plain Python
    # (real workers) and the trace see the same batches in the same order, so the same gradients.
    trace = record(LOADER, OFFLINE)
    plain = _plain(LOADER)
    assert [line.split()[1] for line in trace["stdout"].splitlines()] == [
        line.split()[1] for line in plain.stdout.splitlines()
    ]
    assert [line.split()[0] for line in trace["stdout"].splitlines()] == ["0", "0", "0"]  # what it did
    assert not [*truth.compare_status(trace, plain), *truth.compare_grads(trace, plain)]
    assert trace["status"] == "ok"
    assert "line(s) 7, 9, 10 asked" in _note(
        trace, "The DataLoader at line(s)"
    )  # 7: the subclass's super call
    assert torch.utils.data.DataLoader.__init__.__qualname__ == "DataLoader.__init__", "restored"


def test_a_dataloader_in_the_main_process_or_outside_the_sandbox_is_left_as_it_is():
    trace = record(LOADER)  # a notebook's own process: its workers start
    assert [line.split()[0] for line in trace["stdout"].splitlines()] == ["2", "2", "1"]
    assert not [n for n in trace["notes"] if "DataLoader" in n]
    code = "from torch.utils.data import DataLoader\nprint(len(list(DataLoader(range(5), num_workers=0))))\n"
    trace = record(code, OFFLINE)
    assert trace["stdout"] == "5\n" and trace["notes"] == []


def test_a_script_that_finds_its_folder_with_file_runs_as_python_snippet_py_would(tmp_path, monkeypatch):
    # Scripts find their data next to themselves: the run is "python snippet.py" (sys.argv too)
    code = _code(
        """
        import os
        import torch
        here = os.path.dirname(os.path.abspath(__file__))
        print(os.path.basename(__file__), here == os.getcwd())
        x = torch.ones(2, requires_grad=True)
        (x * 3).sum().backward()
        print(x.grad)
        """
    )
    monkeypatch.chdir(tmp_path)
    trace = record(code, OFFLINE)
    (tmp_path / "snippet.py").write_text(code)
    plain = subprocess.run(
        [sys.executable, "snippet.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert plain.returncode == 0, plain.stderr
    assert trace["error"] is None and trace["stdout"] == plain.stdout
    assert record("print(__file__)\n")["error"]["type"] == "NameError"  # as in a notebook's own code


def test_a_notebook_cell_pasted_with_its_magics_and_shell_commands_runs_without_them():
    cell = _code(
        """
        %%time
        %matplotlib inline
        !pip install torch
        import torch
        x = torch.ones(3, requires_grad=True)
        for i in range(2):
            !echo step
            (x * i).sum().backward()
        print(x.grad)
        """
    )
    # the same cell as Python, its line numbers kept: what IPython runs, less the magics' effects
    python = "\n\n\n" + _code(
        """
        import torch
        x = torch.ones(3, requires_grad=True)
        for i in range(2):
            pass
            (x * i).sum().backward()
        print(x.grad)
        """
    )
    trace = record(cell, OFFLINE)
    _same_end(trace, _plain(python))
    assert "Line(s) 1, 2, 3, 7 are IPython's own" in _note(trace, "Line(s)")


def test_a_syntax_error_past_a_magic_is_the_codes_own_and_valid_python_is_never_touched():
    trace = record("%matplotlib inline\nimport torch\nx = torch.ones(2, requires_grad=True\n", OFFLINE)
    assert (trace["error"]["type"], trace["error"]["line"]) == ("SyntaxError", 3)
    assert "was never closed" in trace["error"]["message"]
    assert _note(trace, "Line(s) 1 are IPython's own")
    code = 'text = """\n% not a magic\n!nor a shell command\n"""\nprint(text, 7 % 4)\n'
    trace = record(code, OFFLINE)
    _same_end(trace, _plain(code))
    assert trace["notes"] == []


def test_the_narration_and_the_rules_read_a_pasted_cell_as_the_run_did():
    code = (REPO / "snippets" / "backward_twice_fails.py").read_text()
    cell = "%matplotlib inline\n" + code
    plain_job, cell_job = (served_job(c) for c in (code, cell))
    assert [d["kind"] for d in cell_job["diagnoses"]] == [d["kind"] for d in plain_job["diagnoses"]] != []
    last = cell_job["steps"][-1]["explanation"]
    assert last.startswith("`y.backward()` (line 21"), last  # the call's own text, one line down


def test_a_script_that_requires_arguments_ends_as_python_snippet_py_does_and_the_note_says_how(tmp_path):
    code = _code(
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--data", required=True)
        args = parser.parse_args()
        """
    )
    trace = record(code, OFFLINE)
    (tmp_path / "snippet.py").write_text(code)
    plain = subprocess.run(
        [sys.executable, "snippet.py"], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert (trace["error"]["type"], plain.returncode) == ("SystemExit", 2)
    assert trace["stdout"] == plain.stdout + plain.stderr  # the usage, as the script's own output
    assert "parser.parse_args([" in _note(trace, "The script wants command-line arguments")
    assert record("import sys\nsys.exit(3)\n", OFFLINE)["notes"] == []  # an exit of its own is not argparse's
