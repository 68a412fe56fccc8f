"""Zero-concentrated DP (zCDP) and its conversion to (ε, δ)-DP.

Canonne, Kamath & Steinke (2020), Proposition 12 / Corollary 13: (α, αρ)-Rényi DP for
every α > 1 implies (ε, δ)-DP with

    δ = exp((α-1)(αρ-ε)) / (α-1) · (1 - 1/α)^α        for every α > 1.

Every α gives a valid bound, so the numerical minimisation only affects tightness, never
validity; the returned value is the formula evaluated at the α found, rounded up.
"""

from __future__ import annotations

import math

from dp_pipeline.accounting._checks import check_delta, check_epsilon, check_rho, round_up

__all__ = ["standard_zcdp_epsilon", "zcdp_to_delta", "zcdp_to_epsilon"]


def _minimize_convex(function, low: float, high: float, iterations: int = 200) -> float:
    """Argmin of a convex function on [low, high] by golden-section search."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = function(c), function(d)
    for _ in range(iterations):
        if b - a <= 1e-13 * b:
            break
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = function(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = function(d)
    return 0.5 * (a + b)


def _log_delta(alpha: float, rho: float, epsilon: float) -> float:
    return (
        (alpha - 1) * (alpha * rho - epsilon) - math.log(alpha - 1) + alpha * math.log1p(-1 / alpha)
    )


def _epsilon_at(alpha: float, rho: float, log_inverse_delta: float) -> float:
    return alpha * rho + (
        log_inverse_delta + (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha)
    ) / (alpha - 1)


def zcdp_to_delta(rho: float, epsilon: float) -> float:
    """Smallest δ such that ρ-zCDP implies (ε, δ)-DP by CKS Corollary 13 (rounded up).

    Minimises over α on the interval that contains the minimiser,
    ((ε+ρ)/(2ρ), max{(ε+ρ+1)/(2ρ), 2}) (CKS Section 2.3), capped at 1.
    """
    rho = check_rho(rho)
    epsilon = check_epsilon(epsilon)
    if rho == 0:
        return 0.0
    low = max(1 + 1e-12, (epsilon + rho) / (2 * rho))
    high = max((epsilon + rho + 1) / (2 * rho), 2.0)
    if high <= low:
        high = low + 1.0
    best = _minimize_convex(lambda alpha: _log_delta(alpha, rho, epsilon), low, high)
    candidates = [best, low, high]
    log_delta = min(_log_delta(alpha, rho, epsilon) for alpha in candidates)
    return min(1.0, round_up(math.exp(log_delta)))


def zcdp_to_epsilon(rho: float, delta: float) -> float:
    """Smallest ε such that ρ-zCDP implies (ε, δ)-DP by CKS Corollary 13 (rounded up).

    ε = min over α > 1 of αρ + (log(1/δ) + (α-1)·log(1-1/α) - log α)/(α-1); always at
    most the standard ρ + 2·sqrt(ρ·log(1/δ)).
    """
    rho = check_rho(rho)
    delta = check_delta(delta)
    if rho == 0:
        return 0.0
    log_inverse_delta = -math.log(delta)
    standard_alpha = 1 + math.sqrt(log_inverse_delta / rho)
    best = _minimize_convex(
        lambda alpha: _epsilon_at(alpha, rho, log_inverse_delta), 1 + 1e-12, 4 * standard_alpha + 4
    )
    epsilon = min(
        _epsilon_at(best, rho, log_inverse_delta),
        _epsilon_at(standard_alpha, rho, log_inverse_delta),
    )
    return round_up(epsilon) if epsilon > 0 else 0.0


def standard_zcdp_epsilon(rho: float, delta: float) -> float:
    """The classic conversion ε = ρ + 2·sqrt(ρ·log(1/δ)) (Bun & Steinke 2016, Prop. 1.3)."""
    rho = check_rho(rho)
    delta = check_delta(delta)
    return round_up(rho + 2 * math.sqrt(rho * math.log(1 / delta)))
