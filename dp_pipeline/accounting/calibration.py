"""Calibration: from a privacy target to the least noise that provably meets it.

`calibrate_discrete_gaussian` returns exact rational σ² per query (rounded UP to a small
denominator) such that the whole composition meets the target as verified by the tight
`PrivacyAccountant` (not merely zCDP); `calibrate_discrete_laplace` returns scales for pure ε.
Targets given as floats are read DOWN (never a larger budget than either reading of the
float), shares are normalised exactly to sum to 1, and σ²/scales are rounded UP.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction

from dp_pipeline.accounting._checks import check_delta, check_epsilon
from dp_pipeline.rational import exact_rational

__all__ = [
    "calibrate_discrete_gaussian",
    "calibrate_discrete_laplace",
    "round_up_to_small_denominator",
]

_RELATIVE_ROUNDING = 10**6  # σ² is rounded up by at most one part in 10^6


def round_up_to_small_denominator(value: Fraction, precision: int = _RELATIVE_ROUNDING) -> Fraction:
    """``value`` itself when its denominator is <= ``precision``; otherwise the smallest
    multiple of 10^-k that is >= ``value`` (> 0), with 10^-k <= value/precision.

    Never below ``value`` (a σ² or scale is never rounded down), and exact whenever the
    exact value is already short (ρ = 1/8 split 3/4 : 1/4 gives σ² = 16/3, kept as is).
    """
    if value <= 0:
        raise ValueError(f"value must be > 0, got {value}")
    if value.denominator <= precision:
        return value
    denominator = 1
    while value * denominator < precision:
        denominator *= 10
    return Fraction(math.ceil(value * denominator), denominator)


def _target_down(value: object, name: str) -> Fraction:
    """A budget as an exact rational, reading floats DOWN (decimal vs binary, the smaller)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return min(Fraction(repr(value)), Fraction(value))
    return exact_rational(value, name)


def _parse_queries(queries, integer_name: str = "sensitivity"):
    """[(share, weights)] with shares normalised to sum exactly 1; weights = the μ vector."""
    if isinstance(queries, (str, bytes)) or not isinstance(queries, Sequence):
        raise TypeError("queries must be a list of (share, sensitivity_vector) pairs")
    if len(queries) == 0:
        raise ValueError("queries must not be empty: there is nothing to calibrate")
    parsed = []
    for index, query in enumerate(queries):
        if not isinstance(query, Sequence) or len(query) != 2:
            raise TypeError(
                f"queries[{index}] must be a (share, sensitivity_vector) pair, got {query!r}"
            )
        share_raw, sensitivity = query
        share = exact_rational(share_raw, f"queries[{index}] share")
        if share <= 0:
            raise ValueError(f"queries[{index}]: share must be > 0, got {share_raw!r}")
        if isinstance(sensitivity, numbers.Integral) and not isinstance(sensitivity, bool):
            shifts = [sensitivity]
        elif isinstance(sensitivity, Sequence) and not isinstance(sensitivity, (str, bytes)):
            shifts = list(sensitivity)
        else:
            raise TypeError(
                f"queries[{index}] {integer_name} must be an integer or a sequence of integers, "
                f"got {sensitivity!r}"
            )
        clean = []
        for position, shift in enumerate(shifts):
            if isinstance(shift, bool) or not isinstance(shift, numbers.Integral):
                raise TypeError(
                    f"queries[{index}] {integer_name}[{position}] must be an integer (discrete "
                    f"noise: queries move by whole units), got {shift!r}"
                )
            if shift < 0:
                raise ValueError(
                    f"queries[{index}] {integer_name}[{position}] must be >= 0, got {shift}"
                )
            clean.append(int(shift))
        if not any(clean):
            raise ValueError(
                f"queries[{index}] {integer_name} must have a non-zero shift, got {clean}"
            )
        parsed.append((share, clean))
    total = sum(share for share, _ in parsed)
    if abs(total - 1) > Fraction(1, 10**9):
        raise ValueError(
            f"query shares must sum to 1, got {float(total)!r} "
            f"(shares {[float(s) for s, _ in parsed]})"
        )
    return [(share / total, shifts) for share, shifts in parsed]


def _sigma2_for(rho: Fraction, parsed) -> list[Fraction]:
    return [
        round_up_to_small_denominator(Fraction(sum(m * m for m in shifts)) / (2 * share * rho))
        for share, shifts in parsed
    ]


def _accountant(sigma2s, parsed):
    from dp_pipeline.accounting.accountant import PrivacyAccountant
    from dp_pipeline.mechanisms import DiscreteGaussian

    accountant = PrivacyAccountant()
    for sigma2, (_, shifts) in zip(sigma2s, parsed, strict=True):
        accountant.add(DiscreteGaussian(sigma2), shifts if len(shifts) > 1 else shifts[0])
    return accountant


def calibrate_discrete_gaussian(
    epsilon: object = None,
    delta: object = None,
    rho: object = None,
    queries: Sequence = (),
    rtol: float = 1e-4,
) -> list[Fraction]:
    """Exact σ² per query so that the composition is (ε, δ)-DP, or ρ-zCDP, with least noise.

    ``queries``: ``[(share, sensitivity_vector), ...]`` (shares > 0 summing to 1; a vector
    is the per-coordinate integer shifts of the worst neighbour). Query j gets the fraction
    share_j of the zCDP budget, σ_j² = ||μ_j||²/(2·share_j·ρ̂), and the largest ρ̂ whose
    rounded-up σ² still meet (ε, δ) under the tight `PrivacyAccountant` is found by
    bisection (to ``rtol`` relative in ρ̂). σ² are rounded UP to a small denominator.
    """
    parsed = _parse_queries(queries)
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise ValueError("give either rho alone or epsilon and delta together, not both")
        target = _target_down(rho, "rho")
        if target <= 0:
            raise ValueError(f"rho must be > 0, got {rho!r}")
        return _sigma2_for(target, parsed)
    if epsilon is None or delta is None:
        raise ValueError("give either rho alone or epsilon and delta together")
    epsilon_value = check_epsilon(epsilon)
    delta_value = check_delta(delta)
    if epsilon_value == 0:
        raise ValueError("epsilon must be > 0 for discrete Gaussian noise, got 0")

    def feasible(rho_hat: float) -> tuple[bool, list[Fraction]]:
        sigma2s = _sigma2_for(Fraction(rho_hat), parsed)
        return _accountant(sigma2s, parsed).delta(epsilon_value).upper <= delta_value, sigma2s

    from dp_pipeline.accounting.zcdp import zcdp_to_delta

    # ρ that zCDP alone certifies: a feasible start (the tight accountant is never worse).
    low, high = 0.0, max(1.0, epsilon_value)
    while zcdp_to_delta(high, epsilon_value) <= delta_value:
        high *= 2
    for _ in range(200):
        middle = 0.5 * (low + high)
        if zcdp_to_delta(middle, epsilon_value) <= delta_value:
            low = middle
        else:
            high = middle
        if high - low <= 1e-9 * high:
            break
    ok, best = feasible(low)
    while not ok:  # guards float edge cases of the zCDP search
        low *= 1 - 1e-6
        ok, best = feasible(low)
    high = 2 * low
    for _ in range(60):
        ok_high, sigma2s = feasible(high)
        if not ok_high:
            break
        low, best, high = high, sigma2s, 2 * high
    while high - low > rtol * low:
        middle = 0.5 * (low + high)
        ok, sigma2s = feasible(middle)
        if ok:
            low, best = middle, sigma2s
        else:
            high = middle
    return best


def calibrate_discrete_laplace(epsilon: object, queries: Sequence = ((1, 1),)) -> list[Fraction]:
    """Exact scales b_j so that the composition is pure ε-DP: b_j = ||μ_j||₁/(share_j·ε).

    Pure ε-DP composes additively (Δ/b per query); ε is read down and b rounded UP.
    """
    target = _target_down(epsilon, "epsilon")
    if target <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    parsed = _parse_queries(queries)
    return [
        round_up_to_small_denominator(Fraction(sum(shifts)) / (share * target))
        for share, shifts in parsed
    ]
