"""The large-δ rule: a δ above `LARGE_DELTA_LIMIT` is refused unless the caller opts in.

δ is the probability that the ε guarantee fails outright, so it must be far below
1/n for a population of n units (a mechanism that publishes one random unit's
record in the clear is (0, 1/n)-DP). dp_pipeline does not know n before it reads
the data, so the limit is fixed: 1e-4, the 1/n of a population of ten thousand,
far above any δ a real release uses (1e-6 to 1e-12). A larger δ (``delta = 0.5``
calibrates noise with a margin of about ±1: no privacy to speak of) is a mistake
unless the caller says it is not: ``allow_large_delta=True`` in Python,
``allow_large_delta = true`` in a spec's ``[budget]`` or ``population.cap``.

One rule for every surface: ``df.dp.*``, ``dp_pipeline.spark.dp_*`` and a session's
queries (`dp_pipeline.query.budget.QueryBudget`), `dp_pipeline.Budget` (a session's
budget and cap), a release spec's ``[budget]`` and ``population.cap``
(`dp_pipeline.release.spec.load.read_budget`), and a cap the ledger records for a
new population (`dp_pipeline.release.ledger.store.Ledger.reserve`).
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.errors import DPTypeError, DPValueError

__all__ = [
    "LARGE_DELTA_LIMIT",
    "LargeDeltaError",
    "check_allow_flag",
    "check_delta_limit",
    "large_delta_problem",
]

LARGE_DELTA_LIMIT = Fraction(1, 10**4)
_LIMIT_TEXT = "1e-4"


class LargeDeltaError(DPValueError):
    """A δ above `LARGE_DELTA_LIMIT` without the explicit opt-in."""


def check_allow_flag(value: object, name: str) -> bool:
    """``value`` as the opt-in flag ``name``: exactly True or False (a truthy string or
    number is refused, so that a typo never opts in by accident)."""
    if not isinstance(value, bool):
        raise DPTypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def large_delta_problem(delta: Fraction, field: str, opt_in: str) -> str | None:
    """The one-line refusal of ``delta`` (an exact rational) written as ``field``, or None
    when it is at most `LARGE_DELTA_LIMIT`; ``opt_in`` says how to accept it on purpose."""
    if delta <= LARGE_DELTA_LIMIT:
        return None
    return (
        f"{field} = {float(delta):.6g} is above the large-delta limit {_LIMIT_TEXT}: delta is "
        f"the chance that the guarantee fails outright, and noise calibrated to so large a "
        f"delta protects almost nothing; use a delta of at most {_LIMIT_TEXT} (e.g. 1e-9), "
        f"or accept it on purpose with {opt_in}"
    )


def check_delta_limit(delta: Fraction | None, field: str, *, allow: bool, opt_in: str) -> None:
    """Raise `LargeDeltaError` if ``delta`` exceeds `LARGE_DELTA_LIMIT` and ``allow`` is
    False. None (no δ) and δ = 0 (pure ε) always pass."""
    if delta is None or allow:
        return
    problem = large_delta_problem(delta, field, opt_in)
    if problem is not None:
        raise LargeDeltaError(problem)
