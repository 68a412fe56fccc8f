"""Exact privacy of one discrete Gaussian N_Z(0, σ²) (Canonne, Kamath & Steinke 2020, Thm. 7).

For shift Δ and Y ~ N_Z(0, σ²), the smallest δ at ε is

    δ(ε) = P[Y > εσ²/Δ - Δ/2] - e^ε · P[Y > εσ²/Δ + Δ/2],

evaluated as the sum of non-negative terms Σ_{y >= y0} P[Y=y]·(1 - e^{ε - L(y)}) with the
privacy loss L(y) = (2yΔ + Δ²)/(2σ²), so that tiny δ keeps its relative accuracy. The first
index y0 and the gap L(y0) - ε are computed in exact rationals. For a sensitivity bound Δ the
result is the maximum over the integer shifts 1..Δ.
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
    "discrete_gaussian_delta",
    "discrete_gaussian_epsilon",
    "discrete_gaussian_log_normalizer",
    "discrete_gaussian_rho",
]

# exp(-46) ~ 1e-20: terms this far below the first one cannot move δ at 1e-10 relative.
_TAIL_LOG_RATIO = 46.0
_CHUNK = 1 << 20


def discrete_gaussian_log_normalizer(sigma2: float) -> float:
    """log Σ_y exp(-y²/(2σ²)); by Poisson summation for σ² >= 1, directly otherwise."""
    if sigma2 >= 1:
        # Σ_y e^{-y²/(2σ²)} = sqrt(2πσ²) · Σ_k e^{-2π²σ²k²}
        correction = sum(math.exp(-2 * math.pi**2 * sigma2 * k * k) for k in range(1, 4))
        return 0.5 * math.log(2 * math.pi * sigma2) + math.log1p(2 * correction)
    limit = math.ceil(math.sqrt(2 * sigma2 * 760)) + 1
    ys = np.arange(-limit, limit + 1, dtype=np.float64)
    exponents = -(ys * ys) / (2 * sigma2)
    top = exponents.max()
    return float(top + math.log(np.exp(exponents - top).sum()))


def discrete_gaussian_rho(sigma2: object, sensitivity: object = 1) -> Fraction:
    """Exact zCDP ρ = Δ²/(2σ²) of N_Z(0, σ²) with sensitivity Δ (CKS Theorem 4)."""
    sigma2 = positive_rational(sigma2, "sigma2")
    shift = check_integer_sensitivity(sensitivity)
    return Fraction(shift * shift) / (2 * sigma2)


def _delta_one_shift(sigma2: Fraction, shift: int, epsilon: float, log_normalizer: float) -> float:
    epsilon_exact = Fraction(epsilon)
    threshold = epsilon_exact * sigma2 / shift - Fraction(shift, 2)
    first = math.floor(threshold) + 1  # smallest y with L(y) > ε (strict)
    gap0 = Fraction(2 * first * shift + shift * shift) / (2 * sigma2) - epsilon_exact
    sigma2_float = float(sigma2)
    step = shift / sigma2_float
    start = max(first, 0)
    last = math.ceil(math.sqrt(start * start + 2 * sigma2_float * _TAIL_LOG_RATIO)) + 1
    terms = []
    for chunk_start in range(first, last + 1, _CHUNK):
        ys = np.arange(chunk_start, min(chunk_start + _CHUNK, last + 1), dtype=np.float64)
        gaps = float(gap0) + (ys - first) * step
        log_pmf = -(ys * ys) / (2 * sigma2_float) - log_normalizer
        terms.append(np.exp(log_pmf) * -np.expm1(-gaps))
    # Pairwise summation (numpy) of non-negative terms: relative error ~1e-16·log2(n).
    return float(np.concatenate(terms).sum())


def discrete_gaussian_delta(sigma2: object, epsilon: object, sensitivity: object = 1) -> float:
    """Exact δ(ε) of N_Z(0, σ²) for sensitivity Δ (CKS Thm. 7, max over shifts 1..Δ).

    Accurate to about 1e-12 relative (float64 log-space terms, all non-negative); the
    returned float is rounded up by a few ulps.
    """
    sigma2 = positive_rational(sigma2, "sigma2")
    epsilon = check_epsilon(epsilon)
    shift_bound = check_integer_sensitivity(sensitivity)
    log_normalizer = discrete_gaussian_log_normalizer(float(sigma2))
    delta = max(
        _delta_one_shift(sigma2, shift, epsilon, log_normalizer)
        for shift in range(1, shift_bound + 1)
    )
    return min(1.0, round_up(delta))


def discrete_gaussian_epsilon(
    sigma2: object, delta: object, sensitivity: object = 1, rtol: float = 1e-9
) -> float:
    """Smallest ε (within ``rtol``, rounded up) with δ(ε) <= δ by CKS Theorem 7."""
    from dp_pipeline.accounting.zcdp import zcdp_to_epsilon

    sigma2 = positive_rational(sigma2, "sigma2")
    delta = check_delta(delta)
    shift = check_integer_sensitivity(sensitivity)
    if discrete_gaussian_delta(sigma2, 0.0, shift) <= delta:
        return 0.0
    # The exact δ is at most the zCDP conversion's, so this ε is feasible.
    high = zcdp_to_epsilon(float(Fraction(shift * shift) / (2 * sigma2)), delta)
    while discrete_gaussian_delta(sigma2, high, shift) > delta:
        high *= 2
    return bisect_epsilon(
        lambda eps: discrete_gaussian_delta(sigma2, eps, shift), delta, high, rtol
    )


def bisect_epsilon(delta_of, delta: float, high: float, rtol: float = 1e-9) -> float:
    """Smallest ε in [0, high] with delta_of(ε) <= δ, for a non-increasing delta_of; rounded up.

    Requires delta_of(high) <= δ. Returns the feasible end of the final bracket.
    """
    low = 0.0
    if delta_of(low) <= delta:
        return 0.0
    while high - low > rtol * high + 1e-15:
        middle = 0.5 * (low + high)
        if delta_of(middle) <= delta:
            high = middle
        else:
            low = middle
    return round_up(high)
