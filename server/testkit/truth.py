"""Ground truth for the tracer tests: the same snippet run under plain PyTorch.

Nothing here imports gradstep. ``run_plain(code)`` executes a snippet the way
the tracer does (``compile(code, "<snippet>", "exec")``, fresh globals with
``__name__ == "__main__"``) with ``torch.autograd.backward`` and
``torch.autograd.grad`` wrapped. ``Tensor.backward`` looks
``torch.autograd.backward`` up at call time, so the wrapper sees it too.

After every call (also one that raises; it is recorded, then re-raised) the
wrapper records:

* which api was called and from which snippet line, and the error if any;
* the ``.grad`` of every named tensor (leaves that require grad, non-leaves
  that retain grad), cloned; names follow the trace's rules: a variable, a
  module's parameters as ``<var>.<qualified name>``, list/tuple elements as
  ``var[i]`` and dict values as ``var['key']`` (containers nested up to three
  deep), found in the snippet globals and in the locals of every active
  ``<snippet>`` frame;
* what ``autograd.grad`` returned (the values, in order, when it returned a dict);
* for every node reachable from the named tensors' ``grad_fn`` and from the
  call's root tensors: whether reading its ``_saved_*`` attributes (a custom
  Function's ``saved_tensors``) raises the "backward through the graph a
  second time" error (freed) or the "modified by an inplace operation" error
  (stale). A saved tensor that went through a ``saved_tensors_hooks`` pack
  hook is never unpacked here (that would run the snippet's unpack hook, or a
  checkpoint's recomputation): it is freed when its handle holds nothing, and
  its staleness is not observed;
* the order the engine ran nodes in: a prehook on every reachable node,
  registered just before the call and removed after it, appends
  ``torch._C._current_autograd_node()``; a post hook does the same, so the
  node a failing call stopped in is the one that started and never finished
  (or, in anomaly mode, the one whose NaN output the error names: that check
  comes after its post hooks).

A call made while another one runs (a reentrant checkpoint's backward, a hook
that calls ``autograd.grad``) is part of that outer call, as the snippet sees
it: only the outermost calls are recorded.

Nodes are keyed by their sequence number relative to
``torch._C._autograd._get_sequence_nr()`` read just before the snippet starts,
or ``("acc", names)`` for an AccumulateGrad node, ``names`` being the frozenset
of names of its leaf (``node.variable``), or ``NO_SEQ`` for a node torch gave no
sequence number.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import sys
import traceback
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from gradstep.columns import rows_of

from testkit.torch_print import printed

SNIPPET = "<snippet>"
FREED_MARK = "Trying to backward through the graph a second time"
STALE_MARK = "modified by an inplace operation"
NAN_ERROR = re.compile(r"Function '(\w+)' returned nan values")
UNSEQUENCED = 2**64 - 1  # the sequence number of a node torch numbered none (once_differentiable's Error)
NO_SEQ = "no seq"  # the key of such a node

NodeKey = int | tuple[str, frozenset]


@dataclass
class NodeObs:
    op: str
    freed: bool
    stale: bool


@dataclass
class Call:
    api: str  # "Tensor.backward" | "torch.autograd.backward" | "torch.autograd.grad"
    line: int | None  # innermost <snippet> frame at the call
    error: dict | None = None  # {type, message, line}
    grads: dict[frozenset, torch.Tensor | None] = field(default_factory=dict)  # names -> .grad (detached)
    grad_has_fn: dict[frozenset, bool] = field(default_factory=dict)  # names -> .grad.grad_fn is not None
    returned: list[torch.Tensor | None] | None = None  # autograd.grad only
    nodes: dict[Any, NodeObs] = field(default_factory=dict)  # NodeKey -> obs
    order: list[Any] = field(default_factory=list)  # NodeKeys in execution order
    failed: Any = None  # NodeKey of the node that started (prehook) but never finished (post hook)

    @property
    def kind(self) -> str:
        return "grad" if self.api == "torch.autograd.grad" else "backward"


@dataclass
class PlainRun:
    calls: list[Call]
    error: dict | None  # the snippet's uncaught exception: {type, message, line}
    stdout: str
    seq_used: int = 0  # autograd sequence numbers consumed while the snippet ran
    warnings: list[str] = field(default_factory=list)  # the messages of the warnings it gave


# ---------------------------------------------------------------- naming


def _snippet_frames() -> list:
    """Active <snippet> frames, outermost first."""
    frames = []
    f = sys._getframe()
    while f is not None:
        if f.f_code.co_filename == SNIPPET:
            frames.append(f)
        f = f.f_back
    return frames[::-1]


_MAX_DEPTH = 3  # containers nested this deep name their tensors, as in the tracer's names.py
_MAX_ITEMS = 256  # items named per container, likewise


def _names_in(scope: dict, out: dict[int, tuple[torch.Tensor, set]]) -> None:
    def add(name: str, value: Any, depth: int) -> None:
        if isinstance(value, torch.Tensor):
            out.setdefault(id(value), (value, set()))[1].add(name)
        elif isinstance(value, torch.nn.Module):
            for qual, p in value.named_parameters():
                add(f"{name}.{qual}", p, depth)
        elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
            for i, item in enumerate(value[:_MAX_ITEMS]):
                add(f"{name}[{i}]", item, depth + 1)
        elif depth < _MAX_DEPTH and isinstance(value, dict):
            for k, item in list(value.items())[:_MAX_ITEMS]:
                if isinstance(k, str | int):
                    add(f"{name}[{k!r}]", item, depth + 1)

    for var, value in list(scope.items()):
        if not var.startswith("__"):
            add(var, value, 0)


def named_tensors(globs: dict) -> dict[int, tuple[torch.Tensor, frozenset]]:
    """id -> (tensor, its names) over the snippet globals and active snippet frames."""
    out: dict[int, tuple[torch.Tensor, set]] = {}
    _names_in(globs, out)
    for f in _snippet_frames():
        if f.f_locals is not globs:
            _names_in(dict(f.f_locals), out)
    return {k: (t, frozenset(n)) for k, (t, n) in out.items()}


def _listed(t: torch.Tensor) -> bool:
    """The trace lists leaves that require grad and non-leaves that retain grad."""
    if t.is_leaf:
        return t.requires_grad
    return t.retains_grad


# ---------------------------------------------------------------- graph


def _reachable(roots: list) -> list:
    seen: dict[int, Any] = {}
    stack = [r for r in roots if r is not None]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        for nxt, _ in n.next_functions:
            if nxt is not None:
                stack.append(nxt)
    return list(seen.values())


def _handles(raw: Any) -> list:
    """A ``_raw_saved_*`` attribute as a list of SavedTensor handles."""
    handles = raw if isinstance(raw, (list, tuple)) else [raw]
    return [h for h in handles if isinstance(h, torch._C._autograd.SavedTensor)]


def _is_custom(node) -> bool:
    return isinstance(node, torch.autograd.function.BackwardCFunction)


def _saved_state(node, saves: bool = True) -> tuple[bool, bool]:
    """(freed, stale). ``saves``: a custom Function's node saved tensors (its ``saved_tensors``
    raises once released even when it saved none, and that one can run again)."""
    freed = stale = False
    custom = _is_custom(node)
    attrs = [a for a in dir(node) if a.startswith("_saved_")] + (
        ["saved_tensors"] if custom and saves else []
    )
    for attr in attrs:
        try:
            handles = _handles(getattr(node, "_raw_saved_tensors" if custom else "_raw" + attr, []))
            if any(h.unpack_hook is not None for h in handles):
                # packed by a hook: unpacking would run the snippet's unpack hook
                freed |= any(h.data is None for h in handles)
                continue
            getattr(node, attr)
        except RuntimeError as e:
            msg = str(e)
            freed |= FREED_MARK in msg
            stale |= STALE_MARK in msg
    return freed, stale


def _tensors_in(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for t in obj if isinstance(t, torch.Tensor)]
    return []


# ---------------------------------------------------------------- recorder


class _Recorder:
    def __init__(self, globs: dict, names=None, line_of=None):
        self.globs = globs
        # a plain run of a Python function (run_plain_function): its names and lines, given
        self.named = names or (lambda: named_tensors(self.globs))
        self.line_of = line_of or _snippet_line
        self.calls: list[Call] = []
        self.base = 0
        self.running = False  # a recorded call is running
        # custom Function nodes -> whether they saved tensors, seen before they could be freed
        self.custom_saves: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def note_saves(self, node) -> None:
        if _is_custom(node) and node not in self.custom_saves:
            with contextlib.suppress(RuntimeError):  # freed already: not known
                self.custom_saves[node] = len(node._raw_saved_tensors) > 0

    def key(self, node, names: dict[int, tuple[torch.Tensor, frozenset]]) -> Any:
        if type(node).__name__ == "AccumulateGrad":
            leaf = node.variable
            return ("acc", names.get(id(leaf), (None, frozenset()))[1])
        seq = node._sequence_nr()
        return NO_SEQ if seq == UNSEQUENCED else seq - self.base

    def graph_roots(self, named, extra: list[torch.Tensor]) -> list:
        return [t.grad_fn for t, _ in named.values()] + [t.grad_fn for t in extra]

    def wrap(self, api_name: str, real):
        tensor_backward_code = torch.Tensor.backward.__code__

        def wrapper(*args, **kwargs):
            if torch._C._functorch.maybe_current_level() is not None:
                return real(*args, **kwargs)  # torch.func's own use of autograd, on wrapped tensors
            if torch.compiler.is_compiling():
                return real(*args, **kwargs)  # torch.compile tracing its joint graph, on fake tensors
            if self.running:  # called while another call runs: part of that one
                return real(*args, **kwargs)
            caller = sys._getframe(1).f_code
            api = api_name
            if api_name == "torch.autograd.backward" and caller is tensor_backward_code:
                api = "Tensor.backward"
            call = Call(api=api, line=self.line_of())
            roots = _tensors_in(args[0] if args else kwargs.get("tensors", kwargs.get("outputs")))

            named = self.named()
            executed: list = []
            finished: list = []
            handles = []
            for n in _reachable(self.graph_roots(named, roots)):
                self.note_saves(n)
                handles.append(
                    n.register_prehook(lambda go: executed.append(torch._C._current_autograd_node()))
                )
                handles.append(
                    n.register_hook(lambda gi, go: finished.append(torch._C._current_autograd_node()))
                )
            self.running = True
            try:
                result = real(*args, **kwargs)
            except BaseException as e:
                call.error = {"type": type(e).__name__, "message": str(e), "line": call.line}
                raise
            else:
                if api == "torch.autograd.grad":
                    values = result.values() if isinstance(result, dict) else result
                    call.returned = [None if g is None else g.detach().clone() for g in values]
                return result
            finally:
                self.running = False
                for h in handles:
                    h.remove()
                self.snapshot(call, roots, executed, finished)
                self.calls.append(call)

        wrapper.__wrapped__ = real
        return wrapper

    def snapshot(self, call: Call, roots: list[torch.Tensor], executed: list, finished: list) -> None:
        named = self.named()
        for t, names in named.values():
            if _listed(t):
                call.grads[names] = None if t.grad is None else t.grad.detach().clone()
                call.grad_has_fn[names] = t.grad is not None and t.grad.grad_fn is not None
        for node in _reachable(self.graph_roots(named, roots)):
            self.note_saves(node)
            freed, stale = _saved_state(node, not _is_custom(node) or self.custom_saves.get(node, True))
            call.nodes[self.key(node, named)] = NodeObs(type(node).__name__, freed, stale)
        call.order = [self.key(n, named) for n in executed]
        unfinished = [n for n in executed if not any(n is f for f in finished)]
        assert len(unfinished) <= 1, "the CPU engine runs one node at a time"
        if unfinished:
            call.failed = self.key(unfinished[0], named)
        elif call.error and (nan := NAN_ERROR.match(call.error["message"])) and executed:
            # anomaly mode checks a node's outputs after it finished (post hooks ran), and raises
            assert executed[-1].name() == nan[1], (executed[-1].name(), nan[1])
            call.failed = self.key(executed[-1], named)


def _snippet_line() -> int | None:
    frames = _snippet_frames()
    return frames[-1].f_lineno if frames else None


def _error_line(exc: BaseException) -> int | None:
    if isinstance(exc, SyntaxError) and exc.filename == SNIPPET:
        return exc.lineno
    line = None
    for fs in traceback.extract_tb(exc.__traceback__):
        if fs.filename == SNIPPET:
            line = fs.lineno
    return line


def _error(exc: BaseException) -> dict:
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return {"type": type(exc).__name__, "message": message, "line": _error_line(exc)}


# ---------------------------------------------------------------- GPU code, set to the CPU

_CUDA_STRING = re.compile(r"""(["'])cuda(?::\d+)?\1""")
_CUDA_TYPE = re.compile(r"\btorch\.cuda\.(\w+Tensor)\b")
_DEVICE_INDEX = re.compile(r"\.to\(\s*\d+\s*([,)])")  # .to(0) / .to(0, ...): the first GPU


def names_cuda(code: str) -> bool:
    return "cuda" in code


def devices_on_cpu(code: str) -> str:
    """GPU code as a person would edit it to run on a CPU: ``.cuda()`` becomes ``.cpu()``, the
    strings ``"cuda"`` / ``"cuda:0"`` become ``"cpu"``, ``torch.cuda.FloatTensor`` ``torch.FloatTensor``,
    ``.to(0)`` ``.to("cpu")``, and ``.pin_memory()`` goes.
    A text edit, independent of the tracer: the plain run the sandbox's CPU run is compared with."""
    code = code.replace(".cuda()", ".cpu()").replace(".pin_memory()", "")
    code = _DEVICE_INDEX.sub(lambda m: f'.to("cpu"{m[1]}', code)
    code = _CUDA_STRING.sub(lambda m: f"{m[1]}cpu{m[1]}", code)
    return _CUDA_TYPE.sub(r"torch.\1", code)


def run_plain(code: str, seed: int | None = 0) -> PlainRun:
    """Run ``code`` under plain torch and record every backward/grad call."""
    if seed is not None:
        torch.manual_seed(seed)
    globs: dict[str, Any] = {"__name__": "__main__"}
    rec = _Recorder(globs)
    real_backward, real_grad = torch.autograd.backward, torch.autograd.grad
    stdout = io.StringIO()
    error = None
    torch.autograd.backward = rec.wrap("torch.autograd.backward", real_backward)
    torch.autograd.grad = rec.wrap("torch.autograd.grad", real_grad)
    try:
        # the process's filters, each location's "already shown" forgotten: as a fresh script
        with contextlib.redirect_stdout(stdout), warnings.catch_warnings(record=True) as given:
            try:
                compiled = compile(code, SNIPPET, "exec")
                rec.base = torch._C._autograd._get_sequence_nr()
                exec(compiled, globs)
            except Exception as e:
                error = _error(e)
    finally:
        torch.autograd.backward, torch.autograd.grad = real_backward, real_grad
    seq_used = torch._C._autograd._get_sequence_nr() - rec.base
    shown = [str(w.message) for w in given]
    return PlainRun(calls=rec.calls, error=error, stdout=stdout.getvalue(), seq_used=seq_used, warnings=shown)


def run_plain_function(fn, scope, filename: str, seed: int | None = 0) -> PlainRun:
    """Call ``fn()`` under plain torch and record every backward/grad call, for a recording of a
    Python function (``gradstep.record()``) rather than a snippet. ``scope()``: the namespace whose
    tensors are named (what the recording watches); ``filename``: the file whose innermost line a
    call is attributed to. The function's exception is recorded as the run's error and not raised."""
    if seed is not None:
        torch.manual_seed(seed)

    def line_of() -> int | None:
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename != filename:
            f = f.f_back
        return f.f_lineno if f is not None else None

    rec = _Recorder({}, names=lambda: named_tensors_in(scope()), line_of=line_of)
    real_backward, real_grad = torch.autograd.backward, torch.autograd.grad
    error = None
    torch.autograd.backward = rec.wrap("torch.autograd.backward", real_backward)
    torch.autograd.grad = rec.wrap("torch.autograd.grad", real_grad)
    rec.base = torch._C._autograd._get_sequence_nr()
    try:
        fn()
    except Exception as e:
        error = {"type": type(e).__name__, "message": str(e), "line": None}
    finally:
        torch.autograd.backward, torch.autograd.grad = real_backward, real_grad
    seq_used = torch._C._autograd._get_sequence_nr() - rec.base
    return PlainRun(calls=rec.calls, error=error, stdout="", seq_used=seq_used)


def named_tensors_in(scope: dict) -> dict[int, tuple[torch.Tensor, frozenset]]:
    """id -> (tensor, its names) over one namespace."""
    out: dict[int, tuple[torch.Tensor, set]] = {}
    _names_in(scope, out)
    return {k: (t, frozenset(n)) for k, (t, n) in out.items()}


def seq_used_bare(code: str, seed: int | None = 0) -> int:
    """Sequence numbers the snippet consumes with no instrumentation at all.

    Node seqs are only comparable between two runs if neither instrumented run
    creates autograd nodes of its own; this is the reference count.
    """
    if seed is not None:
        torch.manual_seed(seed)
    compiled = compile(code, SNIPPET, "exec")
    base = torch._C._autograd._get_sequence_nr()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
        exec(compiled, {"__name__": "__main__"})
    return torch._C._autograd._get_sequence_nr() - base


# ---------------------------------------------------------------- comparing with a trace
#
# The trace is the plain dict ``gradstep.tracer.record`` returns (fields at their
# default values may be missing). Each ``compare_*`` returns a list of mismatches,
# empty when the trace agrees with the truth.

CALL_KINDS = ("backward", "grad")
RTOL, ATOL = 1e-5, 1e-6
NON_FINITE = ("nan", "inf", "-inf")  # how a trace writes them


def call_steps(trace: dict) -> list[dict]:
    return [s for s in trace["steps"] if s["kind"] in CALL_KINDS]


def _label(info: dict) -> Any:
    """A trace node as a truth key: its seq, or ("acc", leaf name)."""
    if info["op"] == "AccumulateGrad":
        return ("acc", info.get("tensor"))
    return info.get("seq")


def _key_matches(key: Any, label: Any) -> bool:
    if isinstance(key, tuple):  # AccumulateGrad: its leaf's names; a leaf no name reaches matches any
        return isinstance(label, tuple) and (label[1] in key[1] or not key[1])
    if key == NO_SEQ:  # a node torch gave no sequence number: the trace gives it none either
        return label is None
    return not isinstance(label, tuple) and key == label


def _show(key: Any) -> str:
    if isinstance(key, tuple):
        return f"AccumulateGrad({'/'.join(sorted(key[1])) or '?'})"
    return "a node with no seq" if key == NO_SEQ else f"seq {key}"


def _states(trace: dict, step: dict) -> list[tuple[Any, dict, dict]]:
    """(label, info, state) for every node the step lists."""
    infos = {n["id"]: n for n in trace["nodes"]}
    return [(_label(infos[st["id"]]), infos[st["id"]], st) for st in step.get("nodes", [])]


def _find_state(key: Any, states: list) -> tuple[dict, dict] | None:
    found = [(info, st) for label, info, st in states if _key_matches(key, label)]
    return found[0] if found else None


def _count_mismatch(trace: dict, run: PlainRun) -> list[str]:
    n = len(call_steps(trace))
    if n != len(run.calls):
        return [f"{n} backward/grad steps in the trace, {len(run.calls)} calls in plain torch"]
    return []


def _pairs(trace: dict, run: PlainRun) -> list[tuple[dict, Call]]:
    return list(zip(call_steps(trace), run.calls, strict=True))


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)


def _flat(values: Any) -> list:
    return [x for v in values for x in _flat(v)] if isinstance(values, list) else [values]


def _last_digit(text: str) -> float:
    """Place value of the last digit of a number as torch prints it: 1e-06 for 1.6021e-02."""
    mantissa, _, exponent = text.partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _printed_mismatch(got: list, exact: torch.Tensor) -> str | None:
    """Each recorded value is the expected one as torch prints it (to half a unit of its last printed
    digit, plus float noise: the traced run need not be bit for bit the plain one)."""
    for g, e, text in zip(got, exact.reshape(-1).tolist(), printed(exact), strict=True):
        if text in NON_FINITE:
            if g != text:
                return f"{g!r} where torch prints {text}"
        elif not isinstance(g, int | float) or isinstance(g, bool):
            return f"{g!r} where torch prints {text}"
        elif abs(g - e) > _last_digit(text) / 2 * (1 + 1e-6) + RTOL * abs(e):
            return f"{g!r} where torch prints {text}"
    return None


def grad_mismatch(expected: torch.Tensor | None, got: dict | None, has_fn: bool | None = None) -> str | None:
    """Compare one gradient with a trace ``Grad`` dict; None when they agree."""
    if expected is None or got is None:
        return None if expected is None and got is None else f"expected {expected}, trace has {got}"
    if list(got["shape"]) != list(expected.shape):
        return f"shape {got['shape']} != {list(expected.shape)}"
    if has_fn is not None and bool(got.get("has_grad_fn")) != has_fn:
        return f"has_grad_fn {got.get('has_grad_fn')} != {has_fn}"
    values = got.get("values")
    if expected.layout != torch.strided:  # sparse: its numbers are the dense tensor's
        expected = expected.to_dense()
    exp = expected.detach().resolve_conj()
    if values is not None:
        flat = _flat(values)
        if exp.is_complex():  # [re, im] pairs: each part as torch prints it
            bad = _printed_mismatch(flat[0::2], exp.real) or _printed_mismatch(flat[1::2], exp.imag)
        else:
            bad = _printed_mismatch(flat, exp)
        return f"values {values} != {expected.tolist()}: {bad}" if bad else None
    norm = float(exp.norm())
    if got["norm"] is None and not math.isfinite(norm) and not exp.is_complex():
        return None  # the trace format's null for a norm that is not finite
    if got["norm"] is None or not _close(float(got["norm"]), norm):
        return f"norm {got['norm']} != {norm}"
    return None


def compare_calls(trace: dict, run: PlainRun) -> list[str]:
    """Same sequence of backward/grad calls: kind and api."""
    if bad := _count_mismatch(trace, run):
        return bad
    pairs = _pairs(trace, run)
    out = []
    for i, (step, call) in enumerate(pairs):
        if (step["kind"], step.get("api")) != (call.kind, call.api):
            out.append(f"call {i}: trace {step['kind']}/{step.get('api')}, torch {call.kind}/{call.api}")
    return out


def compare_lines(trace: dict, run: PlainRun) -> list[str]:
    if bad := _count_mismatch(trace, run):
        return bad
    pairs = _pairs(trace, run)
    return [
        f"call {i}: trace line {step.get('line')}, torch line {call.line}"
        for i, (step, call) in enumerate(pairs)
        if step.get("line") != call.line
    ]


def _error_mismatch(got: dict | None, expected: dict | None) -> str | None:
    if expected is None:
        return None if got is None else f"unexpected error {got}"
    if got is None:
        return f"missing error {expected}"
    for k in ("type", "message", "line"):
        if got.get(k) != expected[k]:
            return f"error {k}: trace {got.get(k)!r}, torch {expected[k]!r}"
    return None


def compare_errors(trace: dict, run: PlainRun) -> list[str]:
    """Each call's error (type, message, line) or its absence."""
    if bad := _count_mismatch(trace, run):
        return bad
    pairs = _pairs(trace, run)
    out = []
    for i, (step, call) in enumerate(pairs):
        m = _error_mismatch(step.get("error"), call.error)
        if m:
            out.append(f"call {i} (line {call.line}): {m}")
    return out


def compare_grads(trace: dict, run: PlainRun) -> list[str]:
    """After each call, every named tensor's .grad."""
    if bad := _count_mismatch(trace, run):
        return bad
    pairs = _pairs(trace, run)
    out = []
    for i, (step, call) in enumerate(pairs):
        tensors = step.get("tensors", [])
        for names, expected in call.grads.items():
            listed = [t for t in tensors if t["name"] in names]
            label = "/".join(sorted(names))
            if len(listed) != 1:
                out.append(f"call {i}: tensor {label} listed {len(listed)} times in the trace")
                continue
            m = grad_mismatch(expected, listed[0].get("grad"), call.grad_has_fn[names])
            if m:
                out.append(f"call {i}: {label}.grad: {m}")
    return out


def compare_returned(trace: dict, run: PlainRun) -> list[str]:
    """What torch.autograd.grad returned."""
    if bad := _count_mismatch(trace, run):
        return bad
    pairs = _pairs(trace, run)
    out = []
    for i, (step, call) in enumerate(pairs):
        got = step.get("returned")
        if call.returned is None:
            continue  # a backward call, or a grad call that raised
        if got is None or len(got) != len(call.returned):
            out.append(f"call {i}: returned {got}, torch returned {len(call.returned)} values")
            continue
        for j, (g, e) in enumerate(zip(got, call.returned, strict=True)):
            m = grad_mismatch(e, g)
            if m:
                out.append(f"call {i}: returned[{j}]: {m}")
    return out


def _compare_flag(trace: dict, run: PlainRun, flag: str) -> list[str]:
    if bad := _count_mismatch(trace, run):
        return bad
    pairs = _pairs(trace, run)
    out = []
    for i, (step, call) in enumerate(pairs):
        states = _states(trace, step)
        for key, obs in call.nodes.items():
            if isinstance(key, tuple) and not key[1]:
                continue  # AccumulateGrad of a leaf no snippet name reaches
            found = _find_state(key, states)
            if found is None:
                out.append(f"call {i}: {obs.op} {_show(key)} missing from the step")
                continue
            info, st = found
            if info["op"] != obs.op:
                out.append(f"call {i}: {_show(key)} is {info['op']} in the trace, {obs.op} in torch")
            if bool(st.get(flag, False)) != getattr(obs, flag):
                out.append(
                    f"call {i}: {obs.op} {_show(key)} {flag}={st.get(flag, False)}, torch says {getattr(obs, flag)}"
                )
    return out


def compare_freed(trace: dict, run: PlainRun) -> list[str]:
    """A node is freed exactly when reading a saved tensor raises the backward-twice error."""
    return _compare_flag(trace, run, "freed")


def mismatches(trace: dict, run: PlainRun) -> list[str]:
    """Where a served trace disagrees with plain torch on its calls, their errors, the grads after
    each call and which nodes were freed."""
    trace = rows_of(trace)
    return [
        m
        for compare in (compare_calls, compare_errors, compare_grads, compare_freed)
        for m in compare(trace, run)
    ]


def compare_stale(trace: dict, run: PlainRun) -> list[str]:
    """A node is stale exactly when reading a saved tensor raises the in-place version error."""
    return _compare_flag(trace, run, "stale")


def _ran(trace: dict, step: dict) -> list[Any]:
    """Labels of the nodes a step ran (executed or failed), by order; unordered ones last."""
    ran = [
        (st.get("order"), label)
        for label, _, st in _states(trace, step)
        if st.get("executed") or st.get("failed")
    ]
    ran.sort(key=lambda p: (p[0] is None, p[0] if p[0] is not None else 0))
    return [label for _, label in ran]


def compare_order(trace: dict, run: PlainRun) -> list[str]:
    """The nodes a call ran, in the engine's order (prehooks)."""
    if bad := _count_mismatch(trace, run):
        return bad
    pairs = _pairs(trace, run)
    out = []
    for i, (step, call) in enumerate(pairs):
        got = _ran(trace, step)
        ok = len(got) == len(call.order) and all(
            _key_matches(k, lab) for k, lab in zip(call.order, got, strict=True)
        )
        if not ok:
            out.append(
                f"call {i} (line {call.line}): trace ran {got}, torch ran {[_show(k) for k in call.order]}"
            )
    return out


def compare_failed(trace: dict, run: PlainRun) -> list[str]:
    """The node a failing call stopped in (started, never finished) is the one marked failed."""
    if bad := _count_mismatch(trace, run):
        return bad
    pairs = _pairs(trace, run)
    out = []
    for i, (step, call) in enumerate(pairs):
        got = [label for label, _, st in _states(trace, step) if st.get("failed")]
        expected = [] if call.failed is None else [call.failed]
        ok = len(got) == len(expected) and all(
            _key_matches(k, lab) for k, lab in zip(expected, got, strict=True)
        )
        if not ok:
            out.append(
                f"call {i} (line {call.line}): trace failed {got}, torch {[_show(k) for k in expected]}"
            )
    return out


def compare_status(trace: dict, run: PlainRun) -> list[str]:
    """trace status/error is the snippet's uncaught exception."""
    expected_status = "ok" if run.error is None else "error"
    if trace["status"] != expected_status:
        return [f"status {trace['status']!r}, expected {expected_status!r} (torch error {run.error})"]
    m = _error_mismatch(trace.get("error"), run.error)
    return [m] if m else []
