"""Exact privacy of one discrete Laplace Lap_Z(b) (P[X=x] ∝ exp(-|x|/b)).

Sensitivity Δ gives pure ε = Δ/b (CKS Section 5.2) and ρ = ε²/2 (pure ε-DP implies
ε²/2-zCDP, Bun & Steinke 2016, Prop. 1.4). The tight δ(ε) comes from the privacy loss
L(y) = (|y-Δ| - |y|)/b for y ~ Lap_Z(b): Δ/b for y <= 0, -Δ/b for y >= Δ, (Δ-2y)/b between;
δ(ε) = Σ_y P[y]·max(0, 1 - e^{ε - L(y)}), maximised over the shifts 1..Δ.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dp_pipeline.accounting._checks import (
    Real,
    check_delta,
    check_epsilon,
    check_integer_sensitivity,
    round_up,
)
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound
from dp_pipeline.accounting.discrete_gaussian import bracket_epsilon
from dp_pipeline.accounting.outward import round_down
from dp_pipeline.mechanisms.additive import DiscreteLaplace
from dp_pipeline.rational import RationalLike, positive_rational

_UNIT = 2.0**-53

__all__ = [
    "discrete_laplace_delta",
    "discrete_laplace_delta_bounds",
    "discrete_laplace_epsilon",
    "discrete_laplace_loss_pmf",
    "discrete_laplace_pure_epsilon",
    "discrete_laplace_rho",
    "discrete_laplace_shift_delta_bounds",
    "exact_scale",
]


def exact_scale(mechanism_or_scale: DiscreteLaplace | RationalLike) -> Fraction:
    """The exact rational scale b of a `DiscreteLaplace`, or of a b given directly (int,
    Fraction or "p/q"; floats by the conservative rule of `dp_pipeline.rational`)."""
    if isinstance(mechanism_or_scale, DiscreteLaplace):
        return mechanism_or_scale.scale
    return positive_rational(mechanism_or_scale, "scale")


def discrete_laplace_pure_epsilon(
    scale: DiscreteLaplace | RationalLike, sensitivity: int = 1
) -> Fraction:
    """Exact pure ε = Δ/b of Lap_Z(b) with sensitivity Δ (CKS Section 5.2).

    ``scale``: a `DiscreteLaplace` or its b (see `exact_scale`).
    """
    scale = exact_scale(scale)
    shift = check_integer_sensitivity(sensitivity)
    return Fraction(shift) / scale


def discrete_laplace_rho(scale: DiscreteLaplace | RationalLike, sensitivity: int = 1) -> Fraction:
    """Exact zCDP ρ = ε²/2 with ε = Δ/b: pure ε-DP implies ε²/2-zCDP (Bun & Steinke 2016,
    Prop. 1.4). ``scale``: a `DiscreteLaplace` or its b (see `exact_scale`)."""
    return discrete_laplace_pure_epsilon(scale, sensitivity) ** 2 / 2


def discrete_laplace_loss_pmf(scale: Fraction, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Values K = 0..Δ and P[K] where the privacy loss is -Δ/b + (2/b)·K (y ~ Lap_Z(b)).

    K = Δ - clip(y, 0, Δ): P[K=Δ] = P[y<=0] = 1/(1+q), P[K=0] = P[y>=Δ] = q^Δ/(1+q),
    P[K=Δ-y] = (1-q)/(1+q)·q^y for 0 < y < Δ, with q = e^{-1/b}. Cached (read-only arrays):
    one release's paths and δ evaluations ask for the same (b, Δ) many times, and a large
    Δ costs Δ powers; only the last few large supports are kept (16 MB each at Δ = 10^6).
    """
    if shift <= _SMALL_SHIFT:
        return _small_loss_pmf(scale, shift)
    return _large_loss_pmf(scale, shift)


_SMALL_SHIFT = 4096


@lru_cache(maxsize=256)
def _small_loss_pmf(scale: Fraction, shift: int) -> tuple[np.ndarray, np.ndarray]:
    return _loss_pmf(scale, shift)


@lru_cache(maxsize=4)
def _large_loss_pmf(scale: Fraction, shift: int) -> tuple[np.ndarray, np.ndarray]:
    return _loss_pmf(scale, shift)


def _loss_pmf(scale: Fraction, shift: int) -> tuple[np.ndarray, np.ndarray]:
    q = math.exp(-1 / float(scale))
    one_plus_q = 1 + q
    probabilities = np.empty(shift + 1)
    probabilities[shift] = 1 / one_plus_q
    probabilities[0] = q**shift / one_plus_q
    if shift > 1:
        ys = np.arange(1, shift)
        probabilities[shift - ys] = -math.expm1(-1 / float(scale)) / one_plus_q * q**ys
    values = np.arange(shift + 1)
    values.flags.writeable = False
    probabilities.flags.writeable = False
    return values, probabilities


def _bounds_one_shift(scale: Fraction, shift: int, epsilon: float) -> tuple[float, float]:
    """Rigorous (lower, upper) on δ(ε) for one shift.

    The losses (2K - Δ)/b are compared with ε exactly: L > ε iff K > (εb + Δ)/2, so a loss
    just above ε is never dropped by float rounding; the first gap L(K0) - ε is exact, later
    gaps add 2/b per step. Error budget: each mass q^y/(1+q) etc. is good to (Δ + 4)·4u
    relative (q = e^{-1/b} and its powers), 1 - e^{-gap} to 6u, fsum adds u.
    """
    epsilon_exact = Fraction(epsilon)
    first = math.floor((epsilon_exact * scale + shift) / 2) + 1  # smallest K with L > ε
    if first > shift:
        return 0.0, 0.0  # ε >= Δ/b: pure ε-DP, δ = 0 exactly
    first = max(first, 0)
    _, probabilities = discrete_laplace_loss_pmf(scale, shift)
    gap0 = Fraction(2 * first - shift) / scale - epsilon_exact
    gaps = float(gap0) + (np.arange(first, shift + 1) - first) * (2 / float(scale))
    total = math.fsum(probabilities[first:] * -np.expm1(-gaps))
    relative = 4 * _UNIT * (shift + 4) + 8 * _UNIT
    # a mass or term among the subnormal floats errs by whole units 2^-1074, which the
    # relative budget does not cover: four per term, on both ends
    absolute = 4 * 2.0**-1074 * (shift + 1 - first)
    lower = round_down(total * (1 - relative) - absolute, 1)
    return lower, min(1.0, round_up(total * (1 + relative) + absolute, 1))


def discrete_laplace_shift_delta_bounds(
    scale: Fraction, shift: int, epsilon: float
) -> tuple[float, float]:
    """Rigorous (lower, upper) on δ(ε) of Lap_Z(b) for the one shift Δ (not maximised over
    1..Δ: one coordinate of a composition), exactly (0, 0) for ε >= Δ/b. ``scale``: the
    exact b; ``shift``: an integer >= 1; ``epsilon`` >= 0."""
    return _bounds_one_shift(scale, shift, epsilon)


def discrete_laplace_delta_bounds(
    scale: DiscreteLaplace | RationalLike, epsilon: Real, sensitivity: int = 1
) -> tuple[float, float]:
    """Rigorous (lower, upper) on the tight δ(ε) of Lap_Z(b), max over the shifts 1..Δ;
    exactly (0, 0) for ε >= Δ/b (decided in exact rationals). ``scale``: a `DiscreteLaplace`
    or its b (see `exact_scale`)."""
    scale = exact_scale(scale)
    epsilon = check_epsilon(epsilon)
    shift_bound = check_integer_sensitivity(sensitivity)
    bounds = [_bounds_one_shift(scale, shift, epsilon) for shift in range(1, shift_bound + 1)]
    return max(b[0] for b in bounds), max(b[1] for b in bounds)


def discrete_laplace_delta(
    scale: DiscreteLaplace | RationalLike, epsilon: Real, sensitivity: int = 1
) -> DeltaBound:
    """Tight δ(ε) of Lap_Z(b) with sensitivity Δ, a `DeltaBound` from
    `discrete_laplace_delta_bounds` (upper: the guarantee; exactly 0 for ε >= Δ/b), method
    ``"discrete_laplace"``. ``scale``: a `DiscreteLaplace` or its b (see `exact_scale`)."""
    lower, upper = discrete_laplace_delta_bounds(scale, epsilon, sensitivity)
    return DeltaBound(lower, upper, "discrete_laplace")


def discrete_laplace_epsilon(
    scale: DiscreteLaplace | RationalLike, delta: Real, sensitivity: int = 1
) -> EpsilonBound:
    """Smallest ε with δ(ε) <= δ, an `EpsilonBound`: ``upper`` rounded up (within 1e-9
    relative) and at most Δ/b, ``lower`` below the true ε.

    ``scale``: a `DiscreteLaplace` or its b (see `exact_scale`).
    """
    scale = exact_scale(scale)
    delta = check_delta(delta)
    shift = check_integer_sensitivity(sensitivity)
    pure = round_up(float(Fraction(shift) / scale))
    bound = bracket_epsilon(
        lambda eps: discrete_laplace_delta_bounds(scale, eps, shift), delta, pure
    )
    upper = min(pure, bound.upper)
    return EpsilonBound(min(bound.lower, upper), upper, "discrete_laplace")
