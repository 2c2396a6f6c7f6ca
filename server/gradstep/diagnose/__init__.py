"""Diagnoses: known autograd mistakes found in a trace, each with fixes verified by running them.

``find(trace)`` applies the rules (``registry.RULES``) to the trace and the snippet's syntax
tree (cheap, no run): each returns a ``Candidate`` with proposed fixes. ``verify`` runs every
proposed fix (all at once, through the given ``run``) and keeps a fix only as
``NOTE [fix kept only if]`` below says. Where fixes compute different things, each one's
``outcome`` says what its run computed, beside its siblings' runs (``Fix.outcome``). Running
fixes in this process is gradstep.pipeline's (``pipeline.add_in_process``); this package never
runs a snippet itself.

No rule guesses: a rule fires only on what the run showed (an error torch
raised, a warning it gave, a ``.grad`` that grew), so a snippet that is fine
gets no diagnosis.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gradstep.diagnose import facts
from gradstep.diagnose.candidate import Candidate, CandidateFix
from gradstep.diagnose.registry import KINDS, RULES
from gradstep.diagnose.source import Source, line_sources, moved_line
from gradstep.trace_dicts import TraceDict

Run = Callable[[list[str]], list[dict | None]]  # codes -> their traces (plain dicts; None: not run), in order

MAX_FIX_RUNS = 8
MAX_CANDIDATES = 16  # diagnoses one trace can get (each rule caps its own; this caps them together)

# True in tests (tests/diagnose/conftest.py): a rule that raises fails with its traceback. Otherwise a
# rule that trips on an unusual snippet must not cost the user the trace: it is skipped, and logged once.
STRICT = False
_logged: set[str] = set()
_log = logging.getLogger(__name__)

__all__ = [
    "KINDS",
    "RULES",
    "STRICT",
    "Candidate",
    "CandidateFix",
    "Run",
    "check",
    "diagnose",
    "find",
    "propose",
    "proposed_codes",
    "verify",
]


def find(trace: TraceDict) -> list[Candidate]:
    src = Source.parse(trace.get("code") or "")
    if src is None or trace["status"] not in ("ok", "error"):
        return []
    found: list[Candidate] = []
    for rule in RULES:
        try:
            found.extend(rule.find(trace, src))
        except Exception:
            if STRICT:
                raise
            if rule.__name__ not in _logged:
                _logged.add(rule.__name__)
                _log.exception("diagnosis rule %s failed (skipped; logged once)", rule.__name__)
    return found[:MAX_CANDIDATES]


def propose(trace: TraceDict) -> list[dict]:
    """The candidates as ``Trace.diagnoses`` entries whose fixes are only proposals, not yet run.

    The sandboxed run sends these to the server in its trace's ``diagnoses``: the server takes
    nothing from them but the codes of the fixes to run (``proposed_codes``), runs those itself,
    and lets ``check`` (in a sandbox of its own) decide what to show.
    """
    return [
        {
            "kind": c.kind,
            "severity": c.severity,
            "line": c.line,
            "message": c.message,
            "fixes": [
                {
                    "title": f.title,
                    "explanation": f.explanation if isinstance(f.explanation, str) else "",
                    "code": f.code,
                }
                for f in c.fixes
            ],
        }
        for c in find(trace)
    ]


def proposed_codes(diagnoses: list[dict], max_chars: int) -> list[str]:
    """The distinct fix codes in proposed diagnoses, at most ``MAX_FIX_RUNS``, none over ``max_chars``."""
    codes = (f["code"] for d in diagnoses for f in d.get("fixes") or ())
    fitting = (c for c in codes if isinstance(c, str) and 0 < len(c) <= max_chars)
    return list(dict.fromkeys(fitting))[:MAX_FIX_RUNS]


def check(trace: TraceDict, fixed: dict[str, dict]) -> list[dict]:
    """``diagnose`` with fix runs that were already made: ``fixed`` maps a fix's code to its run's trace
    (a fix whose code is not there is not offered)."""
    return diagnose(trace, lambda codes: [fixed.get(code) for code in codes])


def verify(candidates: list[Candidate], trace: dict, run: Run) -> list[dict]:
    """The candidates as ``Trace.diagnoses`` entries, with only the fixes whose runs passed their
    checks (NOTE [fix kept only if])."""
    # a bound on the runs one trace can cause (a snippet reading .grad of 100 non-leaves): fixes past it
    # are not run, so not offered
    codes = list(dict.fromkeys(fix.code for c in candidates for fix in c.fixes))[:MAX_FIX_RUNS]
    runs: dict[str, dict | None] = dict(zip(codes, run(codes), strict=True)) if codes else {}
    out = []
    for candidate in candidates:
        passed: dict[str, dict] = {}
        fixes, kept = [], []
        for fix in candidate.fixes:
            fixed = runs.get(fix.code)
            if fixed is None or not _passes(candidate, fix, fixed, trace, passed):
                continue
            passed[fix.key] = fixed
            kept.append((fix, fixed))
            explanation = fix.explanation(fixed) if callable(fix.explanation) else fix.explanation
            fixes.append(
                {
                    "title": fix.title,
                    "explanation": explanation,
                    "code": fix.code,
                    "source_lines": line_sources(trace.get("code") or "", fix.code),
                }
            )
        # what each fixed run computes, once every sibling's run is known (one quotes the other)
        for (fix, fixed), entry in zip(kept, fixes, strict=True):
            if fix.outcome is not None:
                siblings = {k: t for k, t in passed.items() if k != fix.key}
                entry["outcome"] = _outcome_of(fix, fixed, trace, siblings)
        out.append(
            {
                "kind": candidate.kind,
                "severity": candidate.severity,
                "line": candidate.line,
                "message": candidate.message,
                "fixes": fixes,
            }
        )
    return out


def _outcome_of(fix: CandidateFix, fixed: dict, trace: dict, siblings: dict[str, dict]) -> str | None:
    try:
        return fix.outcome(fixed, trace, siblings) or None
    except Exception:  # a fix is worth offering without its measured outcome
        return None


# NOTE [fix kept only if]
# A proposed fix is offered only when all of these hold:
# 1. its code was run (at most ``MAX_FIX_RUNS`` distinct codes per trace; in the server, within
#    the request's budget) and that run ended cleanly (``facts.runs_cleanly``: no error, no failed
#    call). The server enforces this part itself too, since the check job sees only the runs it is
#    given (gradstep.runs, ``TraceRunner._diagnose``);
# 2. the fixes it ``needs`` passed first (their runs feed its intent);
# 3. the same diagnosis does not fire on the fixed run at the line the fix moved it to, unless the
#    fix says it ``refires`` (it runs but changes what is computed, and its title says so);
# 4. its ``intent`` check, when it has one, holds on the fixed run (the gradients the original meant).
# Anything else a fix's run says (its own warnings, an outcome that could not be measured) does not
# decide whether it is offered.


def _passes(candidate: Candidate, fix: CandidateFix, fixed: dict, trace: dict, passed: dict) -> bool:
    # NOTE [fix kept only if]: its run ended cleanly, the fixes it needs passed, it does not fire
    # again (unless it refires), its intent holds
    if not facts.runs_cleanly(fixed) or any(k not in passed for k in fix.needs):
        return False
    line = moved_line(trace.get("code") or "", fix.code, candidate.line)
    same = [c for c in find(fixed) if c.kind == candidate.kind and (line is None or c.line == line)]
    if same and not fix.refires:
        return False  # the fix did not fix it (the same mistake, where it moved to in the fixed code)
    try:
        return fix.intent is None or bool(fix.intent(fixed, trace, passed))
    except Exception:
        return False


def diagnose(trace: TraceDict, run: Run) -> list[dict]:
    """Find and verify: what ``Trace.diagnoses`` holds. Costs nothing more when no rule fires."""
    candidates = find(trace)
    return verify(candidates, trace, run) if candidates else []
