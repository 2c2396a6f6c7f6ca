"""Diagnoses: known autograd mistakes found in a trace, each with fixes verified by running them.

``find(trace)`` applies rules to the trace and the snippet's syntax tree (cheap,
no run): each returns a ``Candidate`` with proposed fixes. ``verify`` runs every
proposed fix (all at once, through the given ``run``) and keeps a fix only when
its run has no error, the same diagnosis does not fire on it again, and, where
the intent is clear, its gradients are the ones the original meant. A fix that
only makes the code run without keeping what it means (``refires``) comes after
the one that keeps it, says so, and may fire the diagnosis again. Where fixes
compute different things, each one's ``outcome`` says what its run computed,
beside its siblings' runs (``Fix.outcome``).

No rule guesses: a rule fires only on what the run showed (an error torch
raised, a warning it gave, a ``.grad`` that grew), so a snippet that is fine
gets no diagnosis.
"""

from __future__ import annotations

from collections.abc import Callable

from gradstep.diagnose import (
    facts,
    freed_graph,
    graph_cut,
    hidden_state,
    inplace,
    integer_grad,
    leaf_inplace,
    needless_retain,
    no_graph,
    non_leaf_grad,
    non_scalar,
    nonfinite_grad,
    running_total,
    stale_graph,
    step_order,
    zero_grad,
)
from gradstep.diagnose.candidate import Candidate, CandidateFix
from gradstep.diagnose.old_idioms import RULES as OLD_IDIOMS
from gradstep.diagnose.source import Source, line_sources, moved_line
from gradstep.trace_dicts import TraceDict

Run = Callable[[list[str]], list[dict | None]]  # codes -> their traces (plain dicts; None: not run), in order

MAX_FIX_RUNS = 8
MAX_CANDIDATES = 16  # diagnoses one trace can get (each rule caps its own; this caps them together)

RULES = (
    hidden_state,
    stale_graph,
    freed_graph,
    non_scalar,
    inplace,
    zero_grad,
    non_leaf_grad,
    integer_grad,
    leaf_inplace,
    no_graph,
    graph_cut,
    running_total,
    nonfinite_grad,
    step_order,
    needless_retain,
)

RULES += OLD_IDIOMS  # code written for PyTorch before 0.4 (old_idioms.py)

__all__ = [
    "Candidate",
    "CandidateFix",
    "Run",
    "add_in_process",
    "check",
    "diagnose",
    "find",
    "propose",
    "proposed_codes",
    "run_locally",
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
        except Exception:  # a rule that trips on an unusual snippet must not cost the user the trace
            continue
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
    """The candidates as ``Trace.diagnoses`` entries, with only the fixes whose runs passed their checks."""
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


def _passes(candidate: Candidate, fix: CandidateFix, fixed: dict, trace: dict, passed: dict) -> bool:
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


def add_in_process(trace: TraceDict, fix_runs: dict[str, TraceDict] | None = None) -> TraceDict:
    """Fill ``trace["diagnoses"]``, verifying fixes with the tracer in this process; returns the trace.

    ``fix_runs``, when given, receives the run of each fix offered (its code -> its trace): what a
    page without a server shows when Apply fix is pressed."""

    def run(codes: list[str]) -> list[dict]:
        ran = run_locally(codes)
        if fix_runs is not None:
            fix_runs.update(zip(codes, ran, strict=True))
        return ran

    try:
        trace["diagnoses"] = diagnose(trace, run)
    except Exception as e:  # the trace matters more than its diagnoses
        trace.setdefault("notes", []).append(f"No diagnoses for this trace: {type(e).__name__}: {e}")
    if fix_runs is not None:
        offered = {f["code"] for d in trace.get("diagnoses") or () for f in d.get("fixes") or ()}
        for code in [c for c in fix_runs if c not in offered]:
            del fix_runs[code]
    return trace


def run_locally(codes: list[str]) -> list[dict]:
    """Run fixes in this process with the tracer (the notebook path: the user's own code, unconfined)."""
    from gradstep.pipeline import explained

    return [explained(code) for code in codes]
