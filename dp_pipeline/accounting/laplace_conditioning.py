"""δ(ε) bracketed around one discrete Laplace coordinate, without evaluating the rest.

A discrete Laplace Lap_Z(b) with shift Δ has the privacy loss ℓ_K = (2K - Δ)/b, K = 0..Δ
(`discrete_laplace_loss_pmf`). With R the loss of everything else (independent of it),

    δ(ε) = Σ_K P[K]·g(ε - ℓ_K),    g(t) = E_P[(1 - e^{t-R})_+],

g non-increasing, 0 <= g <= 1, g(t) = δ_R(t) for t >= 0 and g(t) = 1 - e^t + e^t·δ_R'(-t)
for t < 0 (δ_R' the reverse direction; E_P[e^{-R}] = 1 as the rest has a finite ρ). With
t_hi the point from which the rest's closed-form cap (its zCDP conversion, and basic
composition of its pure-DP part with the zCDP of the others; both hold in either
direction, `conditioning.RestSummary`) is below c = cap(t_hi) ~ e^{-740}:

- lower: δ(ε) >= δ_Lap(ε), the Laplace coordinate alone (post-processing; its loss
  distribution is the same in both directions);
- upper: the atoms with t_K >= t_hi add at most P[K]·c, those with t_K <= -t_hi at most
  P[K]·(1 - e^{t_K}) + P[K]·c (their first parts sum to at most δ_Lap(ε)), the others
  ("middle", ℓ_K within t_hi of ε) at most P[K]: δ(ε) <= δ_Lap(ε) + P[middle] + c.

The bracket is tight where the middle atoms carry little mass next to δ_Lap(ε), or where
δ_Lap(ε) is within 1e-4 of 1: for ε well below the coordinate's pure ε = Δ/b, where δ is
close to P[ℓ > ε] and the MGF inversion (whose integrand then sits near its pole) gives
nothing. It is used between the inversion and the FFT paths, only where it closes the
inversion's bracket or decides a search trial (`brackets.intersect_brackets`); where it
is at least 2e-4 wide for either reason it is not computed (the trivial bracket (0, 1) is
returned: that decision needs no rigour).

Rounding: the middle's end points are found in exact rationals (t_hi as the float it is,
both ends included); its mass is a difference of two float prefix sums of the float
masses (each mass within (Δ + 4)·4u of itself, as in `discrete_laplace`; a prefix sum of k
positive terms within 1.01·k·u of its exact value), charged with both sums' errors;
δ_Lap(ε) is the rigorous bracket of `discrete_laplace_shift_delta_bounds`; the two float
additions of the upper bound are rounded up.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from dp_pipeline.accounting._checks import round_up
from dp_pipeline.accounting.bounds import DeltaBound, Method
from dp_pipeline.accounting.brackets import TIGHT
from dp_pipeline.accounting.conditioning import RestSummary
from dp_pipeline.accounting.discrete_laplace import (
    discrete_laplace_loss_pmf,
    discrete_laplace_shift_delta_bounds,
)
from dp_pipeline.accounting.events import PrivacyEvent
from dp_pipeline.mechanisms import DiscreteLaplace

__all__ = ["METHOD", "LaplaceConditioning", "laplace_bracket", "laplace_conditionings"]

METHOD = Method.LAPLACE_CONDITIONING.value
_U = 2.0**-53
_MAX_SHIFT = 1 << 20  # the masses of larger shifts are not summed at every evaluation
_MAX_COORDINATES = 4  # the coordinates with the largest pure ε are tried


@dataclass(frozen=True)
class LaplaceConditioning:
    """The bracket of the module docstring for Lap_Z(``scale``) with ``shift`` and a rest."""

    scale: Fraction
    shift: int
    rest: RestSummary

    @cached_property
    def _reach(self) -> tuple[Fraction, float]:
        """t_hi (exact, the float it is) and the rest's cap there: the same at every ε."""
        far = self.rest.far_above()
        return Fraction(far), self.rest.cap(far)

    @cached_property
    def _prefix(self) -> np.ndarray:
        """Σ_{K < k} P[K] for k = 0..Δ+1 (float recursive sums): a middle's mass in O(1)."""
        _, masses = discrete_laplace_loss_pmf(self.scale, self.shift)
        return np.concatenate([[0.0], np.cumsum(masses)])

    def delta_bound(self, epsilon: float) -> DeltaBound:
        """Rigorous (lower, upper) on δ(ε) of the whole composition, ε >= 0."""
        scale, shift = self.scale, self.shift
        reach, cap = self._reach
        eps = Fraction(epsilon)
        # ℓ_K >= ε - t_hi  <=>  K >= ((ε - t_hi)·b + Δ)/2, and ℓ_K <= ε + t_hi likewise
        # (exact rationals: the end points are decided exactly, both included)
        first = max(0, math.ceil(((eps - reach) * scale + shift) / 2))
        last = min(shift, math.floor(((eps + reach) * scale + shift) / 2))
        middle = 0.0
        if first <= last:
            prefix = self._prefix
            above = float(prefix[last + 1])
            below = float(prefix[first])
            # each prefix sum within 1.01·k·u of its exact value (k terms, positive)
            summed = above - below + 1.01 * _U * ((last + 1) * above + first * below)
            relative = 4 * _U * (shift + 4) + 8 * _U  # the masses' own error
            middle = summed * (1 + relative + 2 * _U) + 5e-324
        # the bracket is at least min(middle, 1 - δ_Lap(ε)) wide (δ <= 1), and δ_Lap(ε) <=
        # P[ℓ > ε]: where that is wide, it cannot close another bracket, and the trivial
        # one (always valid; the decision needs no rigour) saves the O(Δ) sum of δ_Lap(ε)
        beyond = min(shift + 1, max(0, math.floor((eps * scale + shift) / 2) + 1))
        if min(middle, float(self._prefix[beyond])) > 2 * TIGHT:
            return DeltaBound(0.0, 1.0, METHOD)
        lower, upper = discrete_laplace_shift_delta_bounds(scale, shift, epsilon)
        upper = min(1.0, round_up(upper + middle + cap, 2))  # two float additions
        return DeltaBound(min(lower, upper), upper, METHOD)


def laplace_conditionings(
    events, summarize: Callable[[list], RestSummary | None]
) -> list[LaplaceConditioning]:
    """One `LaplaceConditioning` per discrete Laplace coordinate held once (Δ <= 2^20),
    those of largest pure ε first (at most `_MAX_COORDINATES`); empty where none applies
    or the rest has no finite ρ. ``summarize``: as for `conditioning.conditioning_coordinate`.
    """
    candidates = []
    for index, event in enumerate(events):
        mechanism = event.mechanism
        if not isinstance(mechanism, DiscreteLaplace):
            continue
        held = Counter(s for s in event.sensitivity if s)
        for shift, multiplicity in held.items():
            if multiplicity * event.count == 1 and shift <= _MAX_SHIFT:
                candidates.append((Fraction(shift) / mechanism.scale, index, shift))
    candidates.sort(key=lambda candidate: candidate[0], reverse=True)
    result = []
    for _, index, shift in candidates[:_MAX_COORDINATES]:
        event = events[index]
        remaining = list(event.sensitivity)
        remaining.remove(shift)
        rest = [e for i, e in enumerate(events) if i != index]
        if any(remaining):
            rest.insert(index, PrivacyEvent(event.mechanism, tuple(remaining), event.count))
        summary = summarize(rest) if rest else None
        if summary is not None:
            result.append(LaplaceConditioning(event.mechanism.scale, shift, summary))
    return result


def laplace_bracket(conditionings: list[LaplaceConditioning]):
    """δ bound function intersecting the brackets of ``conditionings`` (each rigorous)."""

    def delta_of(epsilon: float) -> DeltaBound:
        lower, upper = 0.0, 1.0
        for conditioning in conditionings:
            bound = conditioning.delta_bound(epsilon)
            lower, upper = max(lower, bound.lower), min(upper, bound.upper)
        return DeltaBound(min(lower, upper), upper, METHOD)

    return delta_of
