"""The notes a trace ends with, written from the facts of what its code used (``Trace.uses``).

A note says what a run did otherwise than the code asked, or could not draw: CUDA code run on the
CPU, IPython's own lines skipped, a ``torch.func`` transform, a library or file a run here lacks, a
failure of the tracer's own. The tracer records each as a fact (a ``Use``: its kind, the lines, a
name); the sentences are written here, from those facts alone, by the server for a sandboxed run
(gradstep.voice: a run's own words are never its notes) and by the tracer for a run in the
caller's process. One function per kind (``WRITERS``), its kind one of ``schema.UseKind``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gradstep.printing import quoted

Listed = Callable[[set[int]], str]

# What a snippet can import here, as the notes say it
AVAILABLE = (
    "torch (torch.nn, torch.optim, torch.func, torch.utils.data, …), numpy and Python's standard library"
)
# Libraries pasted code often imports, and what to write instead (the default: torch and numpy)
INSTEAD = {
    "torchvision": "define the model with torch.nn (a few nn.Conv2d and nn.Linear layers) and use a random "
    "batch of images, torch.randn(8, 3, 32, 32), for the data; transforms are tensor operations",
    "timm": "define the model with torch.nn (a few nn.Conv2d and nn.Linear layers) and use a random batch of "
    "images, torch.randn(8, 3, 32, 32)",
    "torchaudio": "use a random waveform, torch.randn(1, 16000), and build the layers with torch.nn",
    "torchtext": "use random token ids, torch.randint(0, 100, (4, 12)), with an nn.Embedding",
    "transformers": "build a small model with torch.nn (nn.Embedding, nn.TransformerEncoderLayer, nn.Linear) "
    "and feed it random token ids, torch.randint(0, 100, (2, 8))",
    "datasets": "make the data in the snippet: random tensors (torch.randn, torch.randint) or a "
    "torch.utils.data.TensorDataset",
    "lightning": "write the training step as a plain loop: loss = …; optimizer.zero_grad(); loss.backward(); "
    "optimizer.step()",
    "pytorch_lightning": "write the training step as a plain loop: loss = …; optimizer.zero_grad(); "
    "loss.backward(); optimizer.step()",
    "accelerate": "leave it out: it places models and batches on devices, and here everything runs on the CPU",
    "wandb": "leave the logging out and print what you would log (print(loss.item())): the trace shows every "
    "step's values and gradients",
    "tensorboard": "leave the SummaryWriter out and print what you would log (print(loss.item())): the trace "
    "shows every step's values and gradients",
    "sklearn": "make the data with torch (torch.randn, torch.randint) or numpy",
    "pandas": "build the data as tensors (torch.tensor([...])) or numpy arrays",
    "scipy": "use torch or numpy for the computation",
    "PIL": "use a random image tensor, torch.rand(3, 32, 32)",
    "cv2": "use a random image tensor, torch.rand(3, 32, 32)",
}


def use(kind: str, lines: Iterable[int | None] = (), **fields) -> dict:
    """One ``Use`` (a fact a note is written from): its kind, the known lines, sorted, and what
    else it names."""
    return {"kind": kind, "lines": sorted(n for n in lines if n is not None), **fields}


def listed_lines(lines: set[int]) -> str:
    """Snippet lines as a note lists them: "3, 7" ("?" if none is known)."""
    return ", ".join(str(n) for n in sorted(lines)) or "?"


def notes_of(uses: Iterable[dict], listed: Listed = listed_lines) -> list[str]:
    """The notes for ``uses`` (``Use`` dicts), in their order; ``listed`` says lines as the trace
    counts them (a recording of several files: file and line)."""
    return [WRITERS[use["kind"]](use, listed) for use in uses if use.get("kind") in WRITERS]


def _lines(use: dict, listed: Listed) -> str:
    return listed(set(use.get("lines") or ()))


def _no_gpu(use: dict, listed: Listed) -> str:
    return (
        "This machine has no GPU, so CUDA code cannot run here. Run the snippet on the CPU "
        "(drop .cuda() and device='cuda'): autograd behaves the same."
    )


def _ipython(use: dict, listed: Listed) -> str:
    return (
        f"Line(s) {_lines(use, listed)} are IPython's own (a notebook's %magics and !shell commands), which "
        "Python cannot run, so the run skipped them. torch and numpy are installed here already, and plots "
        "show nothing."
    )


def _transformed(use: dict, listed: Listed) -> str:
    return (
        f"Line(s) {_lines(use, listed)} ran inside a torch.func transform (grad, vjp, jacrev, vmap…): "
        "functorch differentiates there with its own wrapped tensors, so those inner steps are not drawn; "
        "what the transform returned is."
    )


def _forward_ad(use: dict, listed: Listed) -> str:
    return (
        f"Line(s) {_lines(use, listed)} use forward-mode AD (torch.autograd.forward_ad): dual tensors carry "
        "their tangents forward with the values and build no backward graph. gradstep draws reverse mode, so "
        "the dual computation is not drawn; its prints are in the output."
    )


def _compiled(use: dict, listed: Listed) -> str:
    return (
        f"torch.compile at line(s) {_lines(use, listed)} ran with its aot_eager backend: this sandbox has no "
        "C++ compiler for inductor, the default. Autograd sees the same graph either way (one "
        "CompiledFunctionBackward node for the compiled region); only the generated kernels differ."
    )


def _cuda_on_cpu(use: dict, listed: Listed) -> str:
    return (
        f"Ran on the CPU: this server has no GPU. Line(s) {_lines(use, listed)} asked for CUDA, so the same "
        "code ran with its devices set to the CPU (its tensors are CPU tensors; torch.cuda.is_available() "
        "is False). Autograd builds the same graph and the same gradients on either device."
    )


def _cuda_leaf_copy(use: dict, listed: Listed) -> str:
    return (
        f"Line(s) {_lines(use, listed)} move a tensor that requires grad to the GPU. On a GPU that makes a "
        "copy which is not a leaf: its .grad stays None (the gradient goes to the CPU original). Here the "
        "CPU tensor is already where it was asked to be, so it stays the leaf. Create it on the device "
        "instead: torch.randn(..., device=device, requires_grad=True)."
    )


def _cuda_memory_counter(use: dict, listed: Listed) -> str:
    return (
        f"torch.cuda.{use.get('name') or 'memory_allocated'}() at line(s) {_lines(use, listed)} measures GPU "
        "memory: there is none here, so it says 0. Each step's saved bytes show the memory autograd keeps "
        "for backward."
    )


def _gpu_only(use: dict, listed: Listed) -> str:
    name = use.get("name")
    what = f"{name} needs" if name else "This call needs"
    return (
        f"{what} a GPU, and this server has none. Its other CUDA code runs here on the CPU; remove the "
        "GPU-only call (autograd does not need it)."
    )


def _missing_module(use: dict, listed: Listed) -> str:
    top = (use.get("name") or "").split(".")[0]
    if not top:
        return f"A library the code imports is not installed here: a snippet can import {AVAILABLE}."
    return (
        f"{top} is not installed here: a snippet can import {AVAILABLE}. Instead, "
        f"{INSTEAD.get(top, 'use what torch and numpy offer')}."
    )


def _missing_file(use: dict, listed: Listed) -> str:
    name = use.get("name")
    what = f"{name!r} is" if name else "A file the code reads is"
    return (
        f"{what} not here: each run starts in an empty folder of its own, without the files of your "
        "machine. Make the data in the snippet (torch.randn(…), torch.tensor([…])); a file the snippet "
        "writes first (torch.save, open(…, 'w')) can be read back in the same run."
    )


def _network(use: dict, listed: Listed) -> str:
    return (
        "A run here has no network, so nothing can be downloaded: no pretrained weights (torch.hub, "
        "weights=…), no datasets (download=True). Start from a model's random weights and random data: "
        "gradients flow through them the same way."
    )


def _keyboard(use: dict, listed: Listed) -> str:
    return (
        f"input() at line(s) {_lines(use, listed)} waits for someone to type, and a run here has no keyboard: "
        "it reads an empty input, so Python raises EOFError. Put the value in the code (lr = 0.01)."
    )


def _arguments(use: dict, listed: Listed) -> str:
    return (
        "The script wants command-line arguments (argparse), and a run here is python snippet.py with "
        'none. Give each argument a default (parser.add_argument("--lr", default=0.01)), or pass '
        'them in the code: parser.parse_args(["--lr", "0.01"]).'
    )


def _processes(use: dict, listed: Listed) -> str:
    return (
        "A run here starts no processes (multiprocessing, subprocess, process pools), so the call that "
        "tried failed. Do the work in the snippet's own process: a plain loop instead of Pool.map, the "
        "function called directly instead of a subprocess."
    )


def _workers(use: dict, listed: Listed) -> str:
    return (
        f"The DataLoader at line(s) {_lines(use, listed)} asked for worker processes (num_workers), and a "
        "run here starts no processes: it loaded the batches in the main process (num_workers=0). They are "
        "the same batches in the same order; only random numbers a dataset draws per item differ, as each "
        "worker seeds its own."
    )


def _standin(use: dict, listed: Listed) -> str:
    package = use.get("name") or "A plotting library"
    what = (
        "a progress bar that shows nothing: the loop runs as written"
        if package == "tqdm"
        else "a stand-in that takes the plotting calls and draws nothing (print the numbers to see them)"
    )
    return f"{package} (imported at line {_lines(use, listed)}) is not installed here; the run used {what}."


def _tracer_failed(use: dict, listed: Listed) -> str:
    where = f" ({use['name']})" if use.get("name") else ""
    detail = f": {quoted(use['detail'])}" if use.get("detail") else ""
    return f"gradstep could not record everything at step {use.get('step') or '?'}{where}{detail}"


WRITERS: dict[str, Callable[[dict, Listed], str]] = {
    "no_gpu": _no_gpu,
    "ipython": _ipython,
    "transformed": _transformed,
    "forward_ad": _forward_ad,
    "compiled": _compiled,
    "cuda_on_cpu": _cuda_on_cpu,
    "cuda_leaf_copy": _cuda_leaf_copy,
    "cuda_memory_counter": _cuda_memory_counter,
    "gpu_only": _gpu_only,
    "missing_module": _missing_module,
    "missing_file": _missing_file,
    "network": _network,
    "keyboard": _keyboard,
    "arguments": _arguments,
    "processes": _processes,
    "workers": _workers,
    "standin": _standin,
    "tracer_failed": _tracer_failed,
}
