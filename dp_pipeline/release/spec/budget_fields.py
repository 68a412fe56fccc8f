"""A budget or a cap as a spec writes it: rho, or epsilon with an optional delta, each
checked against the range a release is planned in (``[budget]``, ``population.cap``,
and a `dp_pipeline.Session`'s budget)."""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.release.spec.fields import (
    BUDGET_FIELDS,
    large_delta_refused,
    read_allow_large_delta,
    read_positive,
    read_rational,
    show_value,
)
from dp_pipeline.release.spec.limits import DELTA_MIN, EPSILON_RANGE, RHO_RANGE, check_range
from dp_pipeline.release.spec.model import Budget

__all__ = ["check_gaussian_delta", "read_budget"]


def read_budget(
    section: dict,
    path: str,
    problems: list[str],
    *,
    check_fields: bool = True,
    opt_in: str | None = None,
) -> Budget | None:
    """``[budget]`` or ``population.cap``: ρ, or ε with an optional δ, each in its range.

    ``check_fields``: report unknown fields here (``[budget]``'s are reported with the
    other sections' by `parse_spec`, once). A δ above the large-δ limit is a problem
    unless ``allow_large_delta = true``; ``opt_in`` says how the caller writes that.
    """
    if check_fields:
        for key in section:
            if key not in BUDGET_FIELDS:
                problems.append(
                    f"{path}.{key}: unknown field; allowed fields are {', '.join(BUDGET_FIELDS)}"
                )
    allow = read_allow_large_delta(section, path, problems)
    has_rho = "rho" in section
    has_eps = "epsilon" in section
    if has_rho and (has_eps or "delta" in section):
        problems.append(f"{path}: give rho, or epsilon with delta, not both")
        return None
    if has_rho:
        rho = _in_range(section["rho"], f"{path}.rho", RHO_RANGE, "zCDP rho", problems)
        return None if rho is None else Budget(rho=rho)
    if not has_eps:
        problems.append(f"{path}: needs rho, or epsilon with delta")
        return None
    epsilon = _in_range(section["epsilon"], f"{path}.epsilon", EPSILON_RANGE, "epsilon", problems)
    delta = Fraction(0)
    if "delta" in section:
        delta = read_rational(section["delta"], f"{path}.delta", problems)
        if delta is not None and not (delta == 0 or DELTA_MIN <= delta < 1):
            problems.append(
                f"{path}.delta = {show_value(section['delta'])}: must be 0 or lie in [1e-100, 1)"
            )
            return None
        if delta is not None and not allow and large_delta_refused(delta, path, opt_in, problems):
            return None
    if epsilon is None or delta is None:
        return None
    return Budget(epsilon=epsilon, delta=delta, allow_large_delta=allow)


def _in_range(value, path, bounds, what, problems) -> Fraction | None:
    exact = read_positive(value, path, problems)
    if exact is None:
        return None
    problem = check_range(
        exact, show_value(value), path, bounds, f"the range of {what} a release is planned in"
    )
    if problem:
        problems.append(problem)
        return None
    return exact


def check_gaussian_delta(
    budget: Budget | None, section: dict, path: str, problems: list[str]
) -> None:
    """A discrete Gaussian release is never pure ε-DP: an ε budget or cap needs δ > 0."""
    if budget is None or budget.epsilon is None or budget.delta:
        return
    written = f" = {show_value(section['delta'])}" if "delta" in section else ""
    problems.append(
        f"{path}.delta{written}: discrete_gaussian noise (release.noise, the default) is "
        f"never pure epsilon-DP, so an epsilon {'cap' if 'cap' in path else 'budget'} needs "
        f"a delta > 0; add {path}.delta (e.g. 1e-9), give rho instead, or set "
        'release.noise = "discrete_laplace"'
    )
