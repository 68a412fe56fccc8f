"""Floats rounded outward: an upper end never below, a lower end never above, the exact value.

`math.exp` is within one unit in the last place of e^x, normal or subnormal result; a
relative factor such as (1 + 4u) covers that for a normal result, but below the smallest
normal float 2^-1022 the spacing of floats is the absolute 2^-1074 and a relative factor
rounds back to the same float. So each conversion here also steps outward by whole units
in the last place (`math.nextafter`), which is exact at every magnitude: an upper end of a
positive quantity is never 0 and never a subnormal rounded down, a lower end never a
subnormal rounded up.
"""

from __future__ import annotations

import math

from dp_pipeline.accounting._checks import round_up

__all__ = ["exp_down", "exp_up", "round_down", "round_up"]

_U = 2.0**-53


def round_down(value: float, ulps: int = 4) -> float:
    """``value`` moved down by ``ulps`` units in the last place, not below 0 (a lower end)."""
    for _ in range(ulps):
        value = math.nextafter(value, -math.inf)
    return max(value, 0.0)


def exp_up(x: float) -> float:
    """A float >= e^x (x <= 709): exp's one ulp, then two ulps up (at least 2^-1074 > 0)."""
    return round_up(math.exp(x) * (1 + 4 * _U), 2)


def exp_down(x: float) -> float:
    """A float <= e^x, >= 0: exp's one ulp, then two ulps down (0 where e^x underflows)."""
    return round_down(math.exp(x) * (1 - 4 * _U), 2)
