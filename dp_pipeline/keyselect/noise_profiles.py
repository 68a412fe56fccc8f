"""Upper bounds of the count noise's privacy profile δ_c(ε), the ordinary part of a selection.

The selection adds independent noise to each key's count of distinct units; one unit
moves at most ``s`` counts by one each (``s = max_cells`` for add/remove neighbours,
``2·max_cells`` for replace). For the keys both neighbours hold, the released set is a
post-processing of these noisy counts, so its profile is at most the counts' profile:

- **discrete Laplace, scale b**: the counts are pure ε_c-DP with ε_c = s/b (L1
  sensitivity s). Every pure ε_c-DP pair is dominated by randomized response with
  ε_c (Kairouz, Oh, Viswanath 2015, "The composition theorem for differential
  privacy"), whose profile is
  δ(ε) = max(0, (e^{ε_c} - e^ε)/(1 + e^{ε_c})); 0 for ε >= ε_c.
- **discrete Gaussian, σ²**: the counts are ρ-zCDP with ρ = s/(2σ²) (L2 sensitivity
  sqrt(s); Canonne, Kamath, Steinke 2020, Section 2: ρ = ||μ||²/(2σ²) for a vector
  of independent coordinates moved by μ), hence for every α > 1 (CKS Corollary 13)
  δ(ε) <= e^{(α-1)(αρ-ε)}/(α-1)·(1-1/α)^α. Any α gives an upper bound; we take the
  best integer α (chosen in floats, then the bound evaluated in exact rationals with
  a certified exponential rounded up).
"""

from __future__ import annotations

import math
from fractions import Fraction

from dp_pipeline.keyselect.exact_exp import exp_bounds

__all__ = [
    "gaussian_count_delta",
    "laplace_count_delta",
    "log_zcdp_delta_estimate",
    "zcdp_delta_at_order",
]


def laplace_count_delta(epsilon_counts: Fraction, epsilon: Fraction) -> Fraction:
    """Upper bound of δ(ε) of a pure ``epsilon_counts``-DP mechanism (randomized response).

    (A - B)/(1 + A) grows with A = e^{ε_c} and falls with B = e^ε, so the upper ends
    of A and the lower end of B bound it from above.
    """
    if epsilon >= epsilon_counts:
        return Fraction(0)
    a_hi = exp_bounds(epsilon_counts)[1]
    b_lo = exp_bounds(epsilon)[0]
    return max(Fraction(0), (a_hi - b_lo) / (1 + a_hi))


def zcdp_delta_at_order(rho: Fraction, epsilon: Fraction, alpha: int) -> Fraction:
    """CKS Corollary 13 at the integer order α >= 2, rounded up (capped at 1)."""
    exponent = (alpha - 1) * (alpha * rho - epsilon)
    if exponent > 0:
        return Fraction(1)  # δ <= 1 always; an order this far from the optimum is never kept
    factor = Fraction(alpha - 1, alpha) ** alpha / (alpha - 1)
    return min(Fraction(1), exp_bounds(exponent)[1] * factor)


def _log_bound(rho: float, epsilon: float, alpha: int) -> float:
    return (
        (alpha - 1) * (alpha * rho - epsilon)
        - math.log(alpha - 1)
        + alpha * math.log1p(-1.0 / alpha)
    )


def _best_order(rho: float, epsilon: float) -> int:
    """The integer α >= 2 that minimises the bound, by ternary search (it is convex in α)."""
    low, high = 2, max(3, int((epsilon + rho + 1) / (2 * rho)) + 3)
    while high - low > 2:
        third = (high - low) // 3
        a, b = low + third, high - third
        if _log_bound(rho, epsilon, a) <= _log_bound(rho, epsilon, b):
            high = b
        else:
            low = a
    return min(range(low, high + 1), key=lambda a: _log_bound(rho, epsilon, a))


def gaussian_count_delta(sigma2: Fraction, sensitivity2: int, epsilon: Fraction) -> Fraction:
    """Upper bound of δ(ε) of independent N_Z(0, σ²) noise on counts moved by L2² <= s.

    ρ = s/(2σ²) exactly; the order α is chosen in floats (any α is valid), the bound
    evaluated exactly at it and its two neighbours, and the least kept.
    """
    rho = Fraction(sensitivity2) / (2 * Fraction(sigma2))
    best = _best_order(float(rho), float(epsilon))
    candidates = {max(2, best - 1), best, best + 1}
    return min(zcdp_delta_at_order(rho, Fraction(epsilon), a) for a in candidates)


def log_zcdp_delta_estimate(rho: float, epsilon: float) -> float:
    """A float estimate of log δ(ε) for ρ-zCDP at the best integer order: for searches
    only (which σ² to certify), never itself a privacy figure."""
    return _log_bound(rho, epsilon, _best_order(rho, epsilon))
