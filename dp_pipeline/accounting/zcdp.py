"""Zero-concentrated DP (zCDP) and its conversion to (ε, δ)-DP.

Canonne, Kamath & Steinke (2020), Proposition 12 / Corollary 13: (α, αρ)-Rényi DP for
every α > 1 implies (ε, δ)-DP with

    δ = exp((α-1)(αρ-ε)) / (α-1) · (1 - 1/α)^α        for every α > 1.

Every α gives a valid bound, so the numerical minimisation only affects tightness, never
validity; the returned value is the formula evaluated at the α found, rounded up.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dp_pipeline.accounting._checks import check_delta, check_epsilon, check_rho, round_up

__all__ = ["standard_zcdp_epsilon", "zcdp_to_delta", "zcdp_to_epsilon"]

_UNIT = 2.0**-53
_TINY = 5e-324
_LOG_TINY = math.log(_TINY)


def _minimize_convex(
    function: Callable[[float], float], low: float, high: float, iterations: int = 200
) -> float:
    """Argmin of a convex function on [low, high] by golden-section search."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = function(c), function(d)
    for _ in range(iterations):
        if b - a <= 1e-13 * max(abs(a), abs(b), 1e-300):
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


def _log_delta(beta: float, rho: float, epsilon: float) -> tuple[float, float]:
    """log δ at α = 1 + β and an absolute error bound on its float evaluation.

    log δ = (α-1)(αρ-ε) - log(α-1) + α·log(1-1/α) = β((1+β)ρ - ε) - β·log1p(1/β) - log1p(β):
    no cancellation of α·log1p(-1/α) near α = 1 nor of β·log β against (1+β)·log1p(β) for
    large β; each term is good to a few ulps of its own magnitude.
    """
    first = beta * ((1 + beta) * rho - epsilon)
    second = beta * math.log1p(1 / beta)
    third = math.log1p(beta)
    value = first - second - third
    error = 8 * _UNIT * (beta * ((1 + beta) * rho + epsilon) + second + third)
    return value, error


def _epsilon_at(beta: float, rho: float, log_inverse_delta: float) -> tuple[float, float]:
    """ε at α = 1 + β and an absolute error bound (CKS Cor. 13, cancellation-free form):
    ε = (1+β)ρ + log(1/δ)/β - log1p(1/β) - log1p(β)/β."""
    terms = (
        (1 + beta) * rho,
        log_inverse_delta / beta,
        -math.log1p(1 / beta),
        -math.log1p(beta) / beta,
    )
    return math.fsum(terms), 8 * _UNIT * sum(abs(t) for t in terms)


def _minimize_log(function: Callable[[float], float], low: float, high: float) -> float:
    """Argmin over β in [low, high] of a unimodal function, by golden section on log β."""
    best = _minimize_convex(lambda t: function(math.exp(t)), math.log(low), math.log(high))
    return math.exp(best)


def zcdp_to_delta(rho: float, epsilon: float) -> float:
    """Smallest δ such that ρ-zCDP implies (ε, δ)-DP by CKS Corollary 13 (rounded up).

    Minimises over α on the interval that contains the minimiser,
    ((ε+ρ)/(2ρ), max{(ε+ρ+1)/(2ρ), 2}) (CKS Section 2.3), capped at 1. The value returned
    is the formula at the α found plus its float error bound, so it is never below the
    infimum over α; a δ below the float range is returned as 5e-324.
    """
    rho = check_rho(rho)
    epsilon = check_epsilon(epsilon)
    if rho == 0:
        return 0.0
    if epsilon > rho:
        # At α = (ε+ρ)/(2ρ): log δ <= -(ε-ρ)²/(4ρ) - log((ε-ρ)/(2ρ)) (the last term of the
        # formula is <= 0); far below the float range, nothing else needs evaluating.
        with np.errstate(over="ignore"):
            chernoff = -float(np.float64(epsilon - rho) ** 2 / (4 * rho)) - math.log(
                (epsilon - rho) / (2 * rho)
            )
        if chernoff < _LOG_TINY - 1:
            return _TINY
    low = max(1e-300, (epsilon - rho) / (2 * rho))
    high = max((epsilon - rho + 1) / (2 * rho), 1.0)
    if high <= low:
        high = low * 2 + 1.0

    def objective(beta: float) -> float:
        return _log_delta(beta, rho, epsilon)[0]

    best = _minimize_log(objective, low, high)
    log_delta, error = min(
        (_log_delta(beta, rho, epsilon) for beta in (best, low, high)), key=lambda v: v[0]
    )
    bound = log_delta + error + 4 * _UNIT
    if bound < _LOG_TINY:
        return _TINY
    if bound >= 0:
        return 1.0
    return min(1.0, round_up(math.exp(bound)))


def zcdp_to_epsilon(rho: float, delta: float) -> float:
    """Smallest ε such that ρ-zCDP implies (ε, δ)-DP by CKS Corollary 13 (rounded up).

    ε = min over α > 1 of αρ + (log(1/δ) + (α-1)·log(1-1/α) - log α)/(α-1); always at
    most the standard ρ + 2·sqrt(ρ·log(1/δ)). The value returned is the formula at the α
    found plus its float error bound.
    """
    rho = check_rho(rho)
    delta = check_delta(delta)
    if rho == 0:
        return 0.0
    log_inverse_delta = -math.log(delta)
    standard_beta = math.sqrt(log_inverse_delta / rho)

    def objective(beta: float) -> float:
        return _epsilon_at(beta, rho, log_inverse_delta)[0]

    best = _minimize_log(objective, 1e-12 * standard_beta + 1e-300, 4 * standard_beta + 4)
    epsilon, error = min(
        (_epsilon_at(beta, rho, log_inverse_delta) for beta in (best, standard_beta)),
        key=lambda v: v[0],
    )
    epsilon += error
    return round_up(epsilon) if epsilon > 0 else 0.0


def standard_zcdp_epsilon(rho: float, delta: float) -> float:
    """The classic conversion ε = ρ + 2·sqrt(ρ·log(1/δ)) (Bun & Steinke 2016, Prop. 1.3)."""
    rho = check_rho(rho)
    delta = check_delta(delta)
    return round_up(rho + 2 * math.sqrt(rho * math.log(1 / delta)))
