"""What a rule proposes: a diagnosis with candidate fixes, each with the check it must pass.

A candidate fix is only a proposal: ``verify`` runs its code and keeps it when
the run has no error, the same diagnosis does not fire on it again, and its
``intent`` check (when the intent is clear) holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gradstep.diagnose.source import Edit, Source

# intent(fixed trace, original trace, traces of the sibling fixes by key) -> whether it does what was meant
Intent = Callable[[dict, dict, dict[str, dict]], bool]
# outcome(fixed trace, original trace, traces of the sibling fixes that verified, by key) -> what the fixed
# run computes, measured on the runs (Fix.outcome)
Outcome = Callable[[dict, dict, dict[str, dict]], str]


@dataclass
class CandidateFix:
    key: str  # names the fix among its siblings, so one fix's intent can refer to another's run
    title: str
    explanation: (
        str | Callable[[dict], str]
    )  # or built from the fixed run's trace (to quote what it measured)
    code: str
    intent: Intent | None = None
    needs: tuple[str, ...] = ()  # sibling fixes that must verify first (their runs feed this intent)
    outcome: Outcome | None = None
    # the fix keeps what the diagnosis is about, and its title and explanation say so (a fix that runs but
    # changes what the program computes, offered after the one that keeps it): the same diagnosis firing
    # on it again does not reject it
    refires: bool = False


@dataclass
class Candidate:
    kind: str
    severity: str  # "error" | "warning"
    line: int | None
    message: str
    fixes: list[CandidateFix] = field(default_factory=list)


def fix_of(
    src: Source,
    edits: list[Edit | None],
    key: str,
    title: str,
    explanation: str | Callable[[dict], str],
    intent: Intent | None = None,
    needs: tuple[str, ...] = (),
) -> CandidateFix | None:
    """The fix that ``edits`` make to ``src``; None when one of them cannot be made (then there is no fix to offer)."""
    code = src.apply(edits)
    return CandidateFix(key, title, explanation, code, intent, needs) if code else None


def present(*fixes: CandidateFix | None) -> list[CandidateFix]:
    """The fixes that could be made, in the order given."""
    return [f for f in fixes if f is not None]
