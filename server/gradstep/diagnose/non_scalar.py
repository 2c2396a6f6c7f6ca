"""``backward()`` / ``autograd.grad`` on a non-scalar output without ``gradient=``.

Fixes: differentiate ``.sum()`` (each element weighs 1), pass
``gradient=torch.ones_like(y)`` (the same weights, said explicitly: same
gradients, checked), or ``.mean()`` (each element weighs 1/N: the same
gradients divided by N, checked).
"""

from __future__ import annotations

from gradstep.diagnose import facts
from gradstep.diagnose.calls import api_of, output_of, set_keyword, the_call_at, wrap_output
from gradstep.diagnose.candidate import Candidate, CandidateFix, fix_of, present
from gradstep.diagnose.source import Source, is_pure
from gradstep.diagnose.toolkit import calls_failing_with

KIND = "non_scalar_backward"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("non_scalar_backward_fails",)
_GRADIENT_KEYWORD = {
    "Tensor.backward": "gradient",
    "torch.autograd.backward": "grad_tensors",
    "torch.autograd.grad": "grad_outputs",
}


def outcome(trace: dict) -> dict[str, dict]:
    """What a run computed: final .grad of each tensor, and what each autograd.grad call returned."""
    out = dict(facts.final_grads(trace))
    for step in facts.calls(trace):
        for i, grad in enumerate(step.get("returned") or ()):
            if grad is not None:
                out[f"returned {i} at line {step.get('line')}"] = grad
    return out


def find(trace: dict, src: Source) -> list[Candidate]:
    for step in calls_failing_with(trace, facts.NON_SCALAR_MARK):
        line = step.get("line")
        call = the_call_at(src, line)
        out = output_of(call) if call is not None else None
        name = src.text(out) if out is not None else "the output"
        message = (
            f"`{name}` has more than one element, and backward can only start on its own from a single number: "
            "it needs to know how much each element counts (the vector in the vector-Jacobian product). Reduce it to "
            "a scalar, or pass that vector as gradient=."
        )
        fixes: list[CandidateFix] = []
        if call is not None and out is not None:
            fixes = _fixes(src, call, out)
        return [Candidate(KIND, "error", line, message, fixes)]
    return []


def _fixes(src: Source, call, out) -> list[CandidateFix]:
    name = src.text(out)
    ones = None
    if is_pure(out):
        keyword = _GRADIENT_KEYWORD[api_of(call)]
        ones = fix_of(
            src,
            [set_keyword(src, call, keyword, f"torch.ones_like({name})")],
            "ones",
            f"Pass {keyword}=torch.ones_like({name})",
            f"{keyword}= is how much each element of {name} counts; ones make every element count 1, "
            f"which gives the same gradients as {name}.sum() (checked). Other weights give a weighted sum.",
            intent=_same_as_sum,
            needs=("sum",),
        )
    return present(
        fix_of(
            src,
            [wrap_output(src, call, "sum")],
            "sum",
            f"Backpropagate from {name}.sum()",
            f"The sum weighs every element of {name} by 1: the gradient is that of the total, the same as "
            f"gradient=torch.ones_like({name}) (checked).",
        ),
        ones,
        fix_of(
            src,
            [wrap_output(src, call, "mean")],
            "mean",
            f"Backpropagate from {name}.mean()",
            f"The mean weighs every element of {name} by 1/N: the gradients are those of .sum() divided by the "
            "number of elements (checked), what you want when the loss is an average.",
            intent=_scaled_sum,
            needs=("sum",),
        ),
    )


def _same_as_sum(fixed: dict, original: dict, siblings: dict) -> bool:
    return "sum" in siblings and facts.same_grads(outcome(fixed), outcome(siblings["sum"]))


def _scaled_sum(fixed: dict, original: dict, siblings: dict) -> bool:
    return "sum" in siblings and facts.proportional_grads(outcome(fixed), outcome(siblings["sum"]))
