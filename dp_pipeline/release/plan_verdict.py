"""``dp-release plan``'s exit status: whether ``run`` would refuse the release over the cap.

A scheduler that plans before it runs acts on the status alone: 0 when the
release fits what is left of its population's cap, 4 (``refused_budget``, as
``run`` would exit) when it does not. With a ledger the verdict is the
ledger check's (`dp_pipeline.release.plan.against_ledger`, computed as
`Ledger.reserve` computes it); without one (no release recorded yet) the
release alone is measured against its cap, with the same composition and the
same upper-bound test. Both are public: the plan and the ledger's records,
never the data.
"""

from __future__ import annotations

from dp_pipeline.release.ledger.budget import (
    cap_dict,
    compose_accountants,
    measure_spend,
    within_cap,
)
from dp_pipeline.release.outcome import ExitCode
from dp_pipeline.release.plan.against_ledger import LedgerCheck
from dp_pipeline.release.plan.release_plan import ReleasePlan, fitting_budget_text

__all__ = ["plan_verdict"]


def plan_verdict(plan: ReleasePlan, check: LedgerCheck | None) -> tuple[ExitCode, str | None]:
    """(exit code, the refusal's one line or None) of ``dp-release plan`` for ``plan``.

    ``check`` is the ledger check the command printed (None: no ledger was checked).
    """
    spec = plan.spec
    if check is not None:
        if check.outcome == "new" and not check.fits:
            return ExitCode.REFUSED_BUDGET, _refusal(spec, check.largest)
        return ExitCode.PUBLISHED, None
    if spec.cap is None:
        return ExitCode.PUBLISHED, None
    cap = cap_dict(spec.cap)
    alone = measure_spend(compose_accountants([plan.accountant.to_dict()]), cap)
    if within_cap(alone, cap):
        return ExitCode.PUBLISHED, None
    return ExitCode.REFUSED_BUDGET, _refusal(spec, fitting_budget_text(spec, [], cap))


def _refusal(spec, largest: str | None) -> str:
    return (
        f"release {spec.release_id!r} does not fit what is left of population "
        f"{spec.population!r}'s cap: dp-release run would refuse it (exit 4) and spend "
        f"nothing; lower [budget] or plan it for another population. {largest or ''}"
    ).strip()
