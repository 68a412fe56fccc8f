"""The optimal per-key release probabilities at any (ε₀, δ₀), bracketed exactly.

Desfontaines, Voss, Gipson, Mandayam, "Differentially private partition selection"
(PoPETs 2022): among all mechanisms that release a key with a probability π(n) of its
count n of distinct units only, with π(0) = 0 and (ε₀, δ₀)-DP in n, the one releasing
every key with the largest probability is

    π(0) = 0,  π(n) = min(e^{ε₀}·π(n-1) + δ₀,  1 - e^{-ε₀}·(1 - π(n-1) - δ₀),  1).

(ε₀, δ₀)-DP in the count, directly from the recursion: π grows with n, so
π(n-1) <= e^{ε₀}π(n) + δ₀ and 1 - π(n) <= e^{ε₀}(1 - π(n-1)) + δ₀ hold; the first
branch gives π(n) <= e^{ε₀}π(n-1) + δ₀ and the second 1 - π(n-1) <= e^{ε₀}(1 - π(n)) + δ₀.
The key's binary output is therefore (ε₀, δ₀)-DP between counts n-1 and n for every n.

Unlike the truncated geometric (`dp_pipeline.keyselect.tails`), whose δ₀ is the mass
P(K) of an integer truncation and so lands up to e^{-ε₀} below the target, this takes
δ₀ exactly: PipelineDP's per-key strategy at (ε/m, δ/m).

Brackets: the recursion is increasing in π(n-1), in δ₀ and in e^{ε₀} (the second branch
only while 1 - π(n-1) - δ₀ > 0; otherwise it is >= 1 and the min is the first branch
or 1), so running it on the lower ends with e^{ε₀} and e^{-ε₀} rounded to the side that
makes each branch smaller, every product floored, gives a lower bound of every π(n),
and the mirror run an upper bound. Fixed point at ``bits`` plus guard bits (the lower
branch amplifies errors by e^{ε₀} a step, at most about 1/δ₀ before the branch changes).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect.exact_exp import exp_neg_bounds
from dp_pipeline.keyselect.rules import any_release_upper

__all__ = ["MAX_TABLE", "OptimalTable", "optimal_fields", "optimal_table"]

# The most counts a table holds before π(n) = 1 is certified: past it the policy is not
# offered (its counts would cost more than the keys' own hashes).
MAX_TABLE = 200_000


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class OptimalTable:
    """Integer brackets lo[n] <= 2^bits·π(n) <= hi[n] for n = 0..len-1; π(n) = 1 from
    ``ones`` on (certified: lo[ones] = 2^bits)."""

    def __init__(self, lows: list[int], highs: list[int], bits: int) -> None:
        self.lows, self.highs, self.bits = lows, highs, bits
        self.ones = len(lows) - 1

    def bracket(self, count: int) -> tuple[Fraction, Fraction]:
        """Bracket of π(count) (count >= 0) as Fractions."""
        unit = 1 << self.bits
        index = min(max(count, 0), self.ones)
        return Fraction(self.lows[index], unit), Fraction(self.highs[index], unit)

    def least_at_least_half(self) -> int:
        """The least n whose π(n) is certified >= 1/2 (the policy's threshold)."""
        half = 1 << (self.bits - 1)
        return next(n for n, low in enumerate(self.lows) if low >= half)


# few plans at a time; a table at 2048 bits of 10^5 counts weighs tens of MB
@lru_cache(maxsize=8)
def optimal_table(epsilon_key: Fraction, delta_key: Fraction, bits: int) -> OptimalTable:
    """The brackets of π(n) at (``epsilon_key``, ``delta_key``), ``bits`` bits wide.

    Raises `DPValueError` if π(n) = 1 is not certified within `MAX_TABLE` counts."""
    guard = int(1 / delta_key).bit_length() + 64
    work = bits + guard
    one = 1 << work
    a_lo, a_hi = exp_neg_bounds(Fraction(epsilon_key), work)  # e^{-ε₀}
    e_lo, e_hi = (
        (one * a_hi.denominator) // a_hi.numerator,
        _ceil_div(one * a_lo.denominator, a_lo.numerator),
    )  # 2^work · e^{ε₀}, outward
    inv_lo, inv_hi = (a_lo * one).__floor__(), (a_hi * one).__ceil__()
    d_lo, d_hi = (delta_key * one).__floor__(), (delta_key * one).__ceil__()
    low, high = 0, 0
    lows, highs = [0], [0]
    while low < one:
        if len(lows) > MAX_TABLE:
            raise DPValueError(
                f"the optimal per-key policy needs more than {MAX_TABLE} counts at "
                f"epsilon {float(epsilon_key):.3g} per key"
            )
        rest = one - low - d_lo
        second = one - _ceil_div(inv_hi * rest, one) if rest > 0 else one
        new_low = min((e_lo * low >> work) + d_lo, second, one)
        rest = one - high - d_hi
        second = one - (inv_lo * rest >> work) if rest > 0 else one
        new_high = min(_ceil_div(e_hi * high, one) + d_hi, second, one)
        low, high = new_low, new_high
        lows.append(low >> guard)
        highs.append(_ceil_div(high, 1 << guard))
    return OptimalTable(lows, highs, bits)


def optimal_fields(epsilon: Fraction, delta: Fraction, sensitivity: int) -> dict | None:
    """A `SelectionPlan`'s figures for the optimal per-key policy at (ε/s, δ/s), s the
    keys one unit moves: scale s/ε (the event's randomized responses, ε/s each),
    threshold the least count released with probability >= 1/2, p = δ/s·(1 - 2^-32)
    and q = 1 - (1 - p)^s < δ (Bernoulli's inequality) rounded up. None when the table
    would exceed `MAX_TABLE`."""
    # a hair (2^-32 relative) below δ/s: the accountant's float δ, rounded outward, then
    # stays at most δ at the plan's ε even for s = 1, where q would be δ exactly
    per_key = delta / sensitivity * (1 - Fraction(1, 2**32))
    # π climbs from δ₀ to 1/2 by e^{ε₀} a step, then falls toward 1 as fast: about
    # 2·ln(1/δ₀)/ε₀ counts. A float gate on speed only (the table itself is exact).
    if 2 * (math.log(1 / float(per_key)) + 2) * float(sensitivity / epsilon) > MAX_TABLE:
        return None
    try:
        table = optimal_table(epsilon / sensitivity, per_key, 64)
    except DPValueError:
        return None
    q = any_release_upper(per_key, sensitivity)
    return dict(
        policy="optimal_per_key",
        scale=Fraction(sensitivity) / epsilon,
        sigma2=None,
        truncation=None,
        threshold=table.least_at_least_half(),
        single_unit_release=per_key,
        new_keys_delta=q,
        noise_delta=Fraction(0),
        delta_upper=q,
    )
