"""Exact privacy of one discrete Laplace Lap_Z(b) (P[X=x] ∝ exp(-|x|/b)).

Sensitivity Δ gives pure ε = Δ/b (CKS Section 5.2) and ρ = ε²/2 (pure ε-DP implies
ε²/2-zCDP, Bun & Steinke 2016, Prop. 1.4). The tight δ(ε) comes from the privacy loss
L(y) = (|y-Δ| - |y|)/b for y ~ Lap_Z(b): Δ/b for y <= 0, -Δ/b for y >= Δ, (Δ-2y)/b between;
δ(ε) = Σ_y P[y]·max(0, 1 - e^{ε - L(y)}), maximised over the shifts 1..Δ.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting._checks import (
    check_delta,
    check_epsilon,
    check_integer_sensitivity,
    round_up,
)
from dp_pipeline.rational import positive_rational

__all__ = [
    "discrete_laplace_delta",
    "discrete_laplace_epsilon",
    "discrete_laplace_loss_pmf",
    "discrete_laplace_pure_epsilon",
]


def discrete_laplace_pure_epsilon(scale: object, sensitivity: object = 1) -> Fraction:
    """Exact pure ε = Δ/b."""
    scale = positive_rational(scale, "scale")
    shift = check_integer_sensitivity(sensitivity)
    return Fraction(shift) / scale


def discrete_laplace_loss_pmf(scale: Fraction, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Values K = 0..Δ and P[K] where the privacy loss is -Δ/b + (2/b)·K (y ~ Lap_Z(b)).

    K = Δ - clip(y, 0, Δ): P[K=Δ] = P[y<=0] = 1/(1+q), P[K=0] = P[y>=Δ] = q^Δ/(1+q),
    P[K=Δ-y] = (1-q)/(1+q)·q^y for 0 < y < Δ, with q = e^{-1/b}.
    """
    q = math.exp(-1 / float(scale))
    one_plus_q = 1 + q
    probabilities = np.empty(shift + 1)
    probabilities[shift] = 1 / one_plus_q
    probabilities[0] = q**shift / one_plus_q
    if shift > 1:
        ys = np.arange(1, shift)
        probabilities[shift - ys] = -math.expm1(-1 / float(scale)) / one_plus_q * q**ys
    return np.arange(shift + 1), probabilities


def _delta_one_shift(scale: Fraction, shift: int, epsilon: float) -> float:
    values, probabilities = discrete_laplace_loss_pmf(scale, shift)
    losses = (-shift + 2.0 * values) / float(scale)
    weights = -np.expm1(epsilon - losses)
    return math.fsum(probabilities[losses > epsilon] * weights[losses > epsilon])


def discrete_laplace_delta(scale: object, epsilon: object, sensitivity: object = 1) -> float:
    """Tight δ(ε) of Lap_Z(b) with sensitivity Δ (0 for ε >= Δ/b); rounded up."""
    scale = positive_rational(scale, "scale")
    epsilon = check_epsilon(epsilon)
    shift_bound = check_integer_sensitivity(sensitivity)
    delta = max(_delta_one_shift(scale, shift, epsilon) for shift in range(1, shift_bound + 1))
    return min(1.0, round_up(delta)) if delta > 0 else 0.0


def discrete_laplace_epsilon(scale: object, delta: object, sensitivity: object = 1) -> float:
    """Smallest ε (rounded up, within 1e-9 relative) with δ(ε) <= δ; at most Δ/b."""
    from dp_pipeline.accounting.discrete_gaussian import bisect_epsilon

    scale = positive_rational(scale, "scale")
    delta = check_delta(delta)
    shift = check_integer_sensitivity(sensitivity)
    pure = float(Fraction(shift) / scale)
    return min(
        round_up(pure),
        bisect_epsilon(
            lambda eps: discrete_laplace_delta(scale, eps, shift), delta, round_up(pure)
        ),
    )
