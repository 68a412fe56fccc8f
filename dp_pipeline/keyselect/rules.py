"""The rules every key selection plan shares: its parameters, its limits and the exact
arithmetic of its δ (upper bounds), apart from any one policy.

Each limit is where a figure stops being certified: ``max_cells`` past `MAX_CELLS_LIMIT`,
ε past `MAX_EPSILON`, δ below `MIN_DELTA`, a threshold past `MAX_THRESHOLD` (no key can
have that many units). A plan outside them is refused before anything is read, in one
line naming the field and the limit.
"""

from __future__ import annotations

import numbers
from fractions import Fraction

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = [
    "MAX_CELLS_LIMIT",
    "MAX_EPSILON",
    "MAX_SIGMA2",
    "MAX_THRESHOLD",
    "MIN_DELTA",
    "NEIGHBOURINGS",
    "NOISES",
    "POLICIES",
    "any_release_upper",
    "budget_too_small",
    "check_selection_inputs",
    "combined_delta",
    "least_passing",
]

NOISES = ("laplace", "gaussian")
NEIGHBOURINGS = ("add_remove", "replace")
# The largest max_cells whose δ is certified, and whose event the accountant composes
# (2·max_cells coordinates under replace): the Gaussian's weight table grows with
# σ ~ sqrt(max_cells)/ε, the profile's exact powers with max_cells.
MAX_CELLS_LIMIT = 1000
MIN_DELTA = Fraction(1, 2**100)
# exp(2·ε) must stay certifiable at 256 bits (replace doubles the counts' ε).
MAX_EPSILON = 50
# A key needs more distinct units than this to pass: "no key can pass" in practice
# (counts are int32 on Spark's side too).
MAX_THRESHOLD = 2**31 - 1
MAX_SIGMA2 = Fraction(2**20)
POLICIES = ("threshold", "truncated_geometric")
_POWER_BITS = 320


def combined_delta(noise_delta: Fraction, new_keys: Fraction) -> Fraction:
    """1 - (1 - δ_c)(1 - q), capped at 1: the selection's δ from its two parts."""
    return min(Fraction(1), 1 - (1 - noise_delta) * (1 - new_keys))


def any_release_upper(p: Fraction, m: int) -> Fraction:
    """Upper bound of 1 - (1-p)^m: a lower bound of (1-p)^m by binary powering, every
    product rounded down at 320 bits."""
    if m == 1:
        return p
    scale = 1 << _POWER_BITS
    base = ((1 - p) * scale).__floor__()
    result = scale
    while m:
        if m & 1:
            result = (result * base) >> _POWER_BITS
        m >>= 1
        if m:
            base = (base * base) >> _POWER_BITS
    return 1 - Fraction(result, scale)


def check_selection_inputs(
    noise: str, epsilon: object, delta: object, max_cells: int, neighbouring: str
) -> tuple[Fraction, Fraction]:
    """(ε, δ) as exact rationals, after every parameter rule (one-line `DPError`s)."""
    if noise not in NOISES:
        raise DPValueError(f"noise={noise!r}: must be one of {', '.join(map(repr, NOISES))}")
    if neighbouring not in NEIGHBOURINGS:
        raise DPValueError(
            f"neighbouring={neighbouring!r}: must be one of {', '.join(map(repr, NEIGHBOURINGS))}"
        )
    if isinstance(max_cells, bool) or not isinstance(max_cells, numbers.Integral):
        raise DPTypeError(f"max_cells must be an int, got {type(max_cells).__name__}")
    if not 1 <= max_cells <= MAX_CELLS_LIMIT:
        raise DPValueError(
            f"max_cells={max_cells}: must be between 1 and {MAX_CELLS_LIMIT}, the largest "
            f"for which the selection's delta is certified; lower max_cells (the keyed "
            f"bounding keeps each unit's first max_cells keys)"
        )
    eps = positive_rational(epsilon, "epsilon")
    if eps > MAX_EPSILON:
        raise DPValueError(
            f"epsilon={epsilon!r}: must be at most {MAX_EPSILON} for key selection (its "
            f"certified exponentials stop there, and larger budgets protect nothing)"
        )
    dlt = exact_rational(delta, "delta")
    if not MIN_DELTA <= dlt < 1:
        raise DPValueError(
            f"delta={delta!r}: must be at least 2**-100 (the smallest the selection "
            f"certifies) and below 1"
        )
    return eps, dlt


def budget_too_small(epsilon: Fraction, delta: Fraction, max_cells: int, what: str) -> DPValueError:
    """The one-line refusal of a budget that could release no key (``what``: why)."""
    return DPValueError(
        f"epsilon={epsilon}, delta={float(delta):.3g}, max_cells={max_cells}: budget too "
        f"small for key selection ({what}), so no key could be released; raise epsilon or "
        f"delta, or lower max_cells"
    )


def least_passing(passes, low: int, high: int) -> int | None:
    """The least integer t in [low, high] with passes(t), for a monotone ``passes``."""
    if not passes(high):
        return None
    step = 1
    while low + step < high and not passes(low + step):
        low, step = low + step, step * 2
    high = min(high, low + step)
    while low < high:
        middle = (low + high) // 2
        if passes(middle):
            high = middle
        else:
            low = middle + 1
    return low
