"""Whether a run needs the rules at all: a scan of its trace bytes, in the sandboxed child.

Most runs have nothing to diagnose, and they must not pay for it: a scan of the
bytes for what every rule needs (an error, torch's non-leaf warning, a gradient
that went nan or inf, a call line
that ran twice, a leaf that requires grad still without .grad after a call, a
loop with no call that builds a graph each time) skips the rest. gradstep.jobs runs it, and the rules, in the
child that ran the snippet (under that run's limits), never in the server.
"""

from __future__ import annotations

import re

from gradstep.diagnose import facts

_HINTS = (b'"error":{', facts.NON_LEAF_MARK.encode(), b'"nonfinite":[', b"volatile was removed")
# a write through .data in the trace's code (w.data -= …, w.data = …, w.grad.data.zero_()): the rule has no other sign
_DATA_WRITE = re.compile(rb"\.data\s*(?:[-+*/@]?=(?!=)|\.[a-z]\w*_\()")
# a call step as the tracer writes it (kind, then line): the rules without an error or a warning to go
# on need the same call line twice (a backward in a loop); tests/test_diagnose_service.py pins the shape
_CALL_LINE = re.compile(rb'"kind":"(?:backward|grad)","line":(\d+)')
_FORWARD_LINE = re.compile(rb'"kind":"forward","line":(\d+)')
# a leaf that requires grad with no .grad, as the tracer writes a tensor (searched after the first call)
_UNGRADED_LEAF = re.compile(
    rb'"requires_grad":true,"is_leaf":true,(?:"retains_grad":\w+,)?"node":(?:null|\d+),"grad":null'
)


def may_need_diagnosis(body: bytes) -> bool:
    if any(hint in body for hint in _HINTS) or _DATA_WRITE.search(body):
        return True
    lines = _CALL_LINE.findall(body)
    if len(set(lines)) < len(lines):
        return True
    if not lines:  # a loop that only builds graphs (an evaluation loop keeping them all alive)
        forward = _FORWARD_LINE.findall(body)
        return len(set(forward)) < len(forward)
    first = _CALL_LINE.search(body)
    return first is not None and _UNGRADED_LEAF.search(body, first.end()) is not None
