"""Whether a run needs the rules at all: a scan of its trace bytes, in the sandboxed child.

Most runs have nothing to diagnose, and they must not pay for it: a scan of the
bytes for what every rule needs (an error, torch's non-leaf warning, a call line
that ran twice) skips the rest. gradstep.jobs runs it, and the rules, in the
child that ran the snippet (under that run's limits), never in the server.
"""

from __future__ import annotations

import re

from gradstep.diagnose import facts

_HINTS = (b'"error":{', facts.NON_LEAF_MARK.encode(), b"volatile was removed")
# a write through .data in the trace's code (w.data -= …, w.data = …, w.grad.data.zero_()): the rule has no other sign
_DATA_WRITE = re.compile(rb"\.data\s*(?:[-+*/@]?=(?!=)|\.[a-z]\w*_\()")
# a call step as the tracer writes it (kind, then line): the rules without an error or a warning to go
# on need the same call line twice (a backward in a loop); tests/test_diagnose_service.py pins the shape
_CALL_LINE = re.compile(rb'"kind":"(?:backward|grad)","line":(\d+)')


def may_need_diagnosis(body: bytes) -> bool:
    if any(hint in body for hint in _HINTS) or _DATA_WRITE.search(body):
        return True
    lines = _CALL_LINE.findall(body)
    return len(set(lines)) < len(lines)
