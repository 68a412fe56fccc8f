"""The key selections of a plan as ``dp-release plan`` prints them: threshold and noise."""

from __future__ import annotations

from dp_pipeline.release.plan.key_selections import selection_plans
from dp_pipeline.release.plan.release_plan import ReleasePlan

__all__ = ["selection_lines"]


def selection_lines(plan: ReleasePlan) -> list[str]:
    """One line per selected key column of ``plan``: its threshold, noise and budget,
    and the chance a key held by a single unit is released (an upper bound)."""
    lines = []
    for entry in selection_plans(plan):
        plan = entry.selection
        noise = (
            f"laplace scale {float(plan.scale):.6g}"
            if plan.scale is not None
            else f"gaussian sigma2 {float(plan.sigma2):.6g}"
        )
        kept = "" if entry.kept is None else f"; {entry.kept} key(s) kept"
        lines.append(
            f"key selection of {entry.column!r}: a key is released when its noisy count of "
            f"distinct units reaches {plan.threshold} ({noise}, max_cells {plan.max_cells}, "
            f"epsilon {float(plan.epsilon):.6g}, delta {float(plan.delta):.3g}; a key held by "
            f"one unit is released with probability at most "
            f"{float(plan.single_unit_release):.3g}){kept}"
        )
    return lines
