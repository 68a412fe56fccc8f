"""The least budget on a decimal grid that passes a monotone test, and bounds shown as decimals.

Both are plan-time arithmetic only (no data): `least_epsilon` answers "which ε would make
this plan release a key held by N units" for `dp_pipeline.keyselect.plan.minimum_epsilon`;
`decimal_up` prints an upper bound so that the printed figure is still one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

__all__ = ["decimal_up", "least_epsilon", "three_digits_up"]

# Bisection steps on log2 ε over [2^-40, 2^6]: 46/2^22 in log2, far finer than 3 digits.
_STEPS = 22
_LOWEST_LOG2 = -40.0


def three_digits_up(value: Fraction) -> Fraction:
    """The least decimal with three significant digits that is >= ``value`` > 0."""
    step = Fraction(1)
    while value / step >= 1000:
        step *= 10
    while value / step < 100:
        step /= 10
    return math.ceil(value / step) * step


def decimal_up(value: Fraction) -> str:
    """``value`` (>= 0) as a decimal of three significant digits, rounded up (an upper
    bound stays one when shown)."""
    if value <= 0:
        return "0"
    return f"{float(three_digits_up(value)):.3g}"


def least_epsilon(passes: Callable[[Fraction], bool], highest: Fraction) -> Fraction | None:
    """The least ε of three significant digits (up to ``highest``) with ``passes(ε)``, for
    a ``passes`` monotone in ε (False below some ε, True from it on); None if even
    ``highest`` fails. A float bisection on log2 ε finds the place, then every candidate
    is tested exactly: the answer passes, and (monotonicity) the grid point below it
    fails unless the float search stopped a grid step high, which the final walk fixes."""
    if not passes(highest):
        return None
    low, high = _LOWEST_LOG2, math.log2(highest)
    for _ in range(_STEPS):
        middle = (low + high) / 2
        low, high = (low, middle) if passes(Fraction(2**middle)) else (middle, high)
    chosen = min(three_digits_up(Fraction(2**high)), highest)
    while not passes(chosen):
        chosen = min(three_digits_up(chosen * Fraction(1001, 1000)), highest)
    return chosen
