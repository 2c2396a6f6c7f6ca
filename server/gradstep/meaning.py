"""Facts that could not have come from the tracer are refused: a check of a trace's meaning, not its shape.

The contract (gradstep.trace_dicts) says a child's trace has the right keys and types; a snippet
that writes its own result can still fill them with anything the types allow: a sentence with a
URL as a node's op, a tensor "named" like a notice, an edge to a node that does not exist. What the
server writes from the facts (gradstep.voice) names them, so each fact is held to what the tracer
could have written:

* op names are torch's node-name form (``PowBackward0``, ``torch::autograd::CopySlices``);
* tensor, module, saved and variable names are what the tracer's names are made of
  (tracer/names.py, leaves.py): an identifier, then ``.attr``, ``[3]`` or ``['key']`` parts, and
  for a leaf no name reaches a label such as ``w (line 2)``, ``leaf (line 8) #2``, ``w (earlier)``;
* type names (an error's, a warning's category, an optimizer's class) are class names; dtypes
  are torch's;
* ids and references agree: an edge, a node state, a tensor's node, an order point into the
  node table; a step's index is its place;
* sizes are sane: shapes and byte counts are non-negative and below what a machine holds.

A refused fact costs that fact, not the trace: a name or op becomes ``?`` (``REFUSED``), a
reference that points nowhere is dropped, and the trace says in the server's words how many
facts it refused (``refused_note``). Linear in the trace's size; a value seen once is not
matched again.
"""

from __future__ import annotations

import re

from gradstep.printing import NON_FINITE

# NOTE [names the tracer writes]
# A name in a trace is an identifier, then ``.attr``, ``[3]`` or ``['key']`` parts (a key of word
# characters, dots and dashes, at most 64), and for a leaf no name reaches a label (leaves.py):
# ``w (line 2)``, ``w (line 2, iteration 3)``, ``w (earlier)``, each perhaps with `` #2``. The tracer
# makes no other (tracer/names.py gives a dict's item a name only where ``named_key`` says so), and
# the server refuses any other (``NAME``): one grammar, read by both.
KEY_TEXT = re.compile(r"[\w.\-]{0,64}")
REFUSED = "?"  # what a refused name shows as: the tracer's own word for a name it does not know
CAPS = frozenset({"nodes", "steps", "stdout"})  # Trace.truncated: the caps a run can hit
REASON_MAX = 300  # characters of an `unreadable` reason
MAX_NAME = 200
MAX_SIZE = 1 << 50  # elements in a dimension, bytes in a count: beyond any machine
_KEY = r"(?:-?\d+|'[\w.\-]{0,64}')"  # what repr() of a named_key gives
_IDENT = r"[^\W\d]\w*"  # a Python identifier: its first character a letter (any script's) or _
_PATH = rf"{_IDENT}(?:\.\w+|\[{_KEY}\])*"
_LABEL = rf"{_PATH}(?: \((?:earlier|line \d+(?:, iteration \d+)?)\))?(?: #\d+)?"
NAME = re.compile(rf"{_LABEL}|\?")
OP = re.compile(rf"{_IDENT}(?:::{_IDENT})*")
CLASS = re.compile(rf"{_IDENT}(?:\.{_IDENT})*")
DTYPE = re.compile(r"[a-z]+\d*(?:_[a-z0-9]+)*")
SAVED_NAME = re.compile(_IDENT)
PACKED = re.compile(rf"(?:tuple holding a )?tensor on [a-z]+(?::\d+)?|{_IDENT}")


def named_key(key: object) -> bool:
    """Whether a dict's item under ``key`` gets a name of its own (NOTE [names the tracer writes])."""
    if isinstance(key, bool):
        return False
    return isinstance(key, int) or (isinstance(key, str) and KEY_TEXT.fullmatch(key) is not None)


class _Checker:
    """One trace's check: the values it kept, and how many facts it refused."""

    def __init__(self) -> None:
        self.refused = 0
        self._good: set[str] = set()

    def text(self, value: object, pattern: re.Pattern, refused: str | None = REFUSED) -> str | None:
        if value is None:
            return None
        if isinstance(value, str) and value in self._good:
            return value
        if isinstance(value, str) and len(value) <= MAX_NAME and pattern.fullmatch(value):
            self._good.add(value)
            return value
        self.refused += 1
        return refused

    def column(self, table: dict, key: str, pattern: re.Pattern, refused: str | None = REFUSED) -> None:
        values, good = table.get(key), self._good
        for i, value in enumerate(values or ()):
            if value is not None and value not in good:  # hashable: the contract says str or None
                values[i] = self.text(value, pattern, refused)

    def lists(self, table: dict, key: str, pattern: re.Pattern) -> None:
        """A column of lists of names: a refused one is left out."""
        values, good = table.get(key), self._good
        for i, names in enumerate(values or ()):
            if names and not all(n in good for n in names):
                values[i] = [n for n in names if self.text(n, pattern, None) is not None]

    def reason(self, text: str) -> str:
        """Why the tracer could not read something: its words and an exception's (a quote the page
        shows as such), capped; with an address in it, not shown at all."""
        if "://" in text or "www." in text:
            self.refused += 1
            return "(a reason gradstep refused to show)"
        return text if len(text) <= REASON_MAX else text[:REASON_MAX] + "…"

    def size(self, value: object) -> bool:
        ok = isinstance(value, int) and 0 <= value < MAX_SIZE
        if not ok:
            self.refused += 1
        return ok

    def shape(self, shape: object) -> list[int]:
        # the contract made it a list of ints: only their range is left to see (min/max run in C)
        if isinstance(shape, list) and (not shape or (min(shape) >= 0 and max(shape) < MAX_SIZE)):
            return shape
        self.refused += 1
        return []

    def ref(self, value: object, count: int) -> bool:
        ok = isinstance(value, int) and 0 <= value < count
        if not ok:
            self.refused += 1
        return ok

    def refs(self, values: list[int], count: int) -> list[int]:
        """``values`` (ints, by the contract), without those that point at no node."""
        if not values or (min(values) >= 0 and max(values) < count):
            return values
        return [v for v in values if self.ref(v, count)]


def check_meaning(trace: dict) -> int:
    """Refuse, in place, every fact of ``trace`` (checked against the contract: version 4, columns)
    the tracer could not have written; returns how many it refused (``refused_note`` says so)."""
    c = _Checker()
    nodes = trace.get("nodes") or {}
    count = len(nodes.get("op") or ())
    c.column(nodes, "op", OP)
    c.column(nodes, "module", NAME, None)
    c.column(nodes, "tensor", NAME, None)
    if nodes.get("next") is not None:
        nodes["next"] = [c.refs(nxt, count) for nxt in nodes["next"]]
    if nodes.get("saved") is not None:
        for saved in nodes["saved"]:
            for value in saved:
                _saved(c, value)
    if nodes.get("saved_bytes") is not None:
        nodes["saved_bytes"] = [v if v is None or c.size(v) else None for v in nodes["saved_bytes"]]
    steps = trace.get("steps") or []
    for position, step in enumerate(steps):
        if step.get("index") != position:
            c.refused += 1
            step["index"] = position
        _step(c, step, count)
    if trace.get("error"):
        _error(c, trace["error"])
    if trace.get("truncated"):  # a cap's name, which a viewer writes into its own sentence
        kept = [cap for cap in trace["truncated"] if cap in CAPS]
        c.refused += len(trace["truncated"]) - len(kept)
        trace["truncated"] = kept
    if nodes.get("unreadable") is not None:
        nodes["unreadable"] = [v if v is None else c.reason(v) for v in nodes["unreadable"]]
    for use in trace.get("uses") or ():
        _use(c, use)
    return c.refused


def refused_note(count: int) -> str:
    """The server's words for a trace some of whose facts it refused."""
    facts = "fact" if count == 1 else "facts"
    return (
        f"gradstep refused {count:,} {facts} of this run that its tracer could not have written (a name, "
        "an op or a reference of a form torch and the tracer never give): each shows as ? or is left out. "
        "The code may have written its own result."
    )


def _saved(c: _Checker, value: dict) -> None:
    value["name"] = c.text(value.get("name"), SAVED_NAME)
    if value.get("of") is not None:
        value["of"] = c.text(value["of"], NAME, None)
    if value.get("dtype") is not None:
        value["dtype"] = c.text(value["dtype"], DTYPE)
    if value.get("unreadable") is not None:
        value["unreadable"] = c.reason(value["unreadable"])
    if value.get("packed") is not None:
        value["packed"] = c.text(value["packed"], PACKED, None)
    if value.get("shape") is not None:
        value["shape"] = c.shape(value["shape"])
    if value.get("bytes") is not None and not c.size(value["bytes"]):
        value["bytes"] = None


def _step(c: _Checker, step: dict, count: int) -> None:
    states = step.get("nodes") or {}
    ids = states.get("id")
    if ids and c.refs(ids, count) is not ids:  # a state of no node: the whole row goes
        keep = [isinstance(i, int) and 0 <= i < count for i in ids]
        for key, column in list(states.items()):
            states[key] = [v for v, k in zip(column, keep, strict=False) if k]
    c.lists(states, "vars", NAME)
    c.lists(states, "stale_saved", SAVED_NAME)
    tensors = step.get("tensors")
    if tensors:
        c.column(tensors, "name", NAME)
        c.column(tensors, "dtype", DTYPE)
        c.column(tensors, "was", NAME, None)
        if tensors.get("shape") is not None:
            tensors["shape"] = [c.shape(s) for s in tensors["shape"]]
        if tensors.get("node") is not None:
            tensors["node"] = [n if n is None or c.ref(n, count) else None for n in tensors["node"]]
        for grad in tensors.get("grad") or ():
            if grad is not None:
                _grad(c, grad)
    if step.get("inputs") is not None:
        step["inputs"] = [c.text(n, NAME) for n in step["inputs"]]
    for grad in step.get("returned") or ():
        if grad is not None:
            _grad(c, grad)
    if step.get("error"):
        _error(c, step["error"])
    for warning in step.get("warnings") or ():
        warning["category"] = c.text(warning.get("category"), CLASS, "Warning")
    update = step.get("update")
    if update:
        if update.get("of_class") is not None:
            update["of_class"] = c.text(update["of_class"], CLASS, None)
        for param in update.get("params") or ():
            param["name"] = c.text(param.get("name"), NAME)
    if not c.size(step.get("saved_bytes", 0)):
        step["saved_bytes"] = 0


# What a note's fact may name, by kind (gradstep.note_text writes it into the note's sentence)
FILE = re.compile(r"[\w.\-/ ]{1,200}")  # a path as code names it: no scheme, no markup
_USE_NAMES = {"missing_file": FILE, "tracer_failed": SAVED_NAME}
DETAIL_MAX = 300  # characters of a tracer failure's exception, quoted in its note


def _use(c: _Checker, use: dict) -> None:
    if use.get("name") is not None:
        use["name"] = c.text(use["name"], _USE_NAMES.get(use.get("kind"), CLASS), None)
    if use.get("detail") is not None:
        use["detail"] = " ".join(use["detail"].split())[:DETAIL_MAX]
    use["lines"] = [n for n in use.get("lines") or () if n >= 0]


def _grad(c: _Checker, grad: dict) -> None:
    grad["shape"] = c.shape(grad.get("shape"))
    grad["dtype"] = c.text(grad.get("dtype"), DTYPE)
    if grad.get("values") is not None and not _numbers(grad["values"]):
        c.refused += 1
        grad["values"] = None


_SCALARS = frozenset({int, float, bool})


def _numbers(values: object, depth: int = 0) -> bool:
    """Whether ``values`` is what the tracer writes for a tensor's values: numbers (bools, the
    non-finite words, [re, im] pairs) in nested lists no deeper than a tensor can be."""
    kind = type(values)
    if kind in _SCALARS:
        return True
    if kind is str:
        return values in NON_FINITE  # how the tracer writes them
    if kind is not list or depth >= 64:
        return False
    kinds = set(map(type, values))
    if kinds <= _SCALARS:  # a row of numbers: the common case, at C speed
        return True
    return all(_numbers(v, depth + 1) for v in values)


def _error(c: _Checker, error: dict) -> None:
    # the type is a class name, or the status the server wrote (never one the child chooses: voice)
    error["type"] = c.text(error.get("type"), CLASS, "Error")
