"""Calibration: from a privacy target to the least noise that provably meets it.

`calibrate_discrete_gaussian` returns exact rational σ² per query (rounded UP to a small
denominator) such that the whole composition meets the target as verified by the tight
`PrivacyAccountant` (not merely zCDP); `calibrate_discrete_laplace` returns scales for pure ε.
Calibration is lattice-aware: σ_j² = c_j·S with exact short c_j and ONE rounded noise scale S,
so the composed privacy loss lives on a coarse lattice and the accountant's exact multivariate
FFT applies (rounding each σ_j² on its own scatters the lattice and forces the grid PLD).
Targets given as floats are read DOWN (never a larger budget than either reading of the
float), shares are normalised exactly to sum to 1, and σ²/scales are rounded UP.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from fractions import Fraction

from dp_pipeline.accounting._checks import check_delta, check_epsilon
from dp_pipeline.accounting.accountant import PrivacyAccountant
from dp_pipeline.accounting.zcdp import zcdp_to_delta
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.rational import RationalLike, exact_rational

__all__ = [
    "ZcdpShare",
    "calibrate_discrete_gaussian",
    "calibrate_discrete_laplace",
    "calibrate_zcdp_shares",
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
        raise DPValueError(f"value must be > 0, got {value}")
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
            raise DPValueError(f"{name} must be finite, got {value!r}")
        return min(Fraction(repr(value)), Fraction(value))
    return exact_rational(value, name)


def _parse_queries(
    queries: Sequence, integer_name: str = "sensitivity"
) -> list[tuple[Fraction, list[int]]]:
    """[(share, weights)] with shares normalised to sum exactly 1; weights = the μ vector."""
    if isinstance(queries, (str, bytes)) or not isinstance(queries, Sequence):
        raise DPTypeError("queries must be a list of (share, sensitivity_vector) pairs")
    if len(queries) == 0:
        raise DPValueError("queries must not be empty: there is nothing to calibrate")
    parsed: list[tuple[Fraction, list[int]]] = []
    for index, query in enumerate(queries):
        if not isinstance(query, Sequence) or len(query) != 2:
            raise DPTypeError(
                f"queries[{index}] must be a (share, sensitivity_vector) pair, got {query!r}"
            )
        share_raw, sensitivity = query
        share = exact_rational(share_raw, f"queries[{index}] share")
        if share <= 0:
            raise DPValueError(f"queries[{index}]: share must be > 0, got {share_raw!r}")
        if isinstance(sensitivity, numbers.Integral) and not isinstance(sensitivity, bool):
            shifts = [sensitivity]
        elif isinstance(sensitivity, Sequence) and not isinstance(sensitivity, (str, bytes)):
            shifts = list(sensitivity)
        else:
            raise DPTypeError(
                f"queries[{index}] {integer_name} must be an integer or a sequence of integers, "
                f"got {sensitivity!r}"
            )
        clean = []
        for position, shift in enumerate(shifts):
            if isinstance(shift, bool) or not isinstance(shift, numbers.Integral):
                raise DPTypeError(
                    f"queries[{index}] {integer_name}[{position}] must be an integer (discrete "
                    f"noise: queries move by whole units), got {shift!r}"
                )
            if shift < 0:
                raise DPValueError(
                    f"queries[{index}] {integer_name}[{position}] must be >= 0, got {shift}"
                )
            clean.append(int(shift))
        if not any(clean):
            raise DPValueError(
                f"queries[{index}] {integer_name} must have a non-zero shift, got {clean}"
            )
        parsed.append((share, clean))
    total = sum((share for share, _ in parsed), Fraction(0))
    if abs(total - 1) > Fraction(1, 10**9):
        raise DPValueError(
            f"query shares must sum to 1, got {float(total)!r} "
            f"(shares {[float(s) for s, _ in parsed]})"
        )
    return [(share / total, shifts) for share, shifts in parsed]


def _unit_variances(parsed: list[tuple[Fraction, list[int]]]) -> list[Fraction]:
    """c_j = ||μ_j||²/(2·share_j): query j gets σ_j² = c_j·S for one common noise scale S."""
    return [Fraction(sum(m * m for m in shifts)) / (2 * share) for share, shifts in parsed]


def _sigma2_for(scale: Fraction, units: list[Fraction]) -> list[Fraction]:
    """σ_j² = c_j·S with S rounded UP once (not each σ_j² separately).

    Rounding the common scale keeps the ratios σ_j²/σ_k² the exact short rationals set by
    the shares, so the privacy loss stays on a coarse lattice and the accountant can use the
    exact multivariate FFT (CKS §4) instead of the slower, looser grid PLD. Every σ_j² is
    still >= its exact value (S only grows) and its denominator is den(c_j)·den(S).
    """
    rounded = round_up_to_small_denominator(scale)
    return [unit * rounded for unit in units]


def _accountant(sigma2s, parsed, events=()):
    accountant = PrivacyAccountant()
    for sigma2, (_, shifts) in zip(sigma2s, parsed, strict=True):
        accountant.add(DiscreteGaussian(sigma2), shifts if len(shifts) > 1 else shifts[0])
    for mechanism, sensitivity, count in events:
        accountant.add(mechanism, sensitivity, count)
    return accountant


#: A non-Gaussian query of a zCDP-budgeted composition: its share of ρ, and a function
#: from the ρ it may use (exact) to the (mechanism, sensitivity, count) spending at most that.
ZcdpShare = tuple[object, Callable[[Fraction], tuple[object, object, int]]]


def calibrate_discrete_gaussian(
    epsilon: RationalLike | None = None,
    delta: RationalLike | None = None,
    rho: RationalLike | None = None,
    queries: Sequence = (),
    rtol: float = 1e-4,
) -> list[Fraction]:
    """Exact σ² per query so that the composition is (ε, δ)-DP, or ρ-zCDP, with least noise.

    ``queries``: ``[(share, sensitivity_vector), ...]`` (shares > 0 summing to 1; a vector
    is the per-coordinate integer shifts of the worst neighbour). Query j gets the fraction
    share_j of the zCDP budget: σ_j² = c_j·S with c_j = ||μ_j||²/(2·share_j) and one noise
    scale S (= 1/ρ̂). For ρ, S = 1/ρ. For (ε, δ), the smallest S whose σ² meet δ(ε) <= δ
    under the tight `PrivacyAccountant` (upper bound, not merely zCDP) is found to ``rtol``
    relative by a safeguarded secant search on log δ(S) (a handful of accountant calls),
    starting from the S that the zCDP conversion (CKS Cor. 13) certifies. S is rounded UP to
    a small denominator, so every σ² is rounded up and the returned σ² meet the target; σ²
    shrunk by more than ``rtol`` (relative) do not.
    """
    sigma2s, _ = calibrate_zcdp_shares(epsilon, delta, rho, queries, rtol=rtol)
    return sigma2s


def calibrate_zcdp_shares(
    epsilon: RationalLike | None = None,
    delta: RationalLike | None = None,
    rho: RationalLike | None = None,
    queries: Sequence = (),
    others: Sequence[ZcdpShare] = (),
    rtol: float = 1e-4,
) -> tuple[list[Fraction], list[tuple[object, object, int]]]:
    """`calibrate_discrete_gaussian` with non-Gaussian queries sharing the same budget.

    ``others``: ``[(share, build), ...]``; the shares of ``queries`` and ``others``
    together sum to 1. With the common scale S (ρ̂ = 1/S) every discrete Gaussian gets
    ρ_j = share_j/S as in `calibrate_discrete_gaussian`, and each other query gets
    ``build(share_j/S)``: a (mechanism, sensitivity, count) whose zCDP ρ is at most that
    (e.g. an exponential mechanism at ε = sqrt(8ρ), ε-bounded range). For ρ the result
    is ρ-zCDP by additivity; for (ε, δ) the search checks the whole composition, the
    other mechanisms included, with the tight accountant. Returns (σ² of ``queries``, the
    built events of ``others``), both meeting the target.
    """
    others = list(others)
    for index, other in enumerate(others):
        if not (isinstance(other, Sequence) and len(other) == 2 and callable(other[1])):
            raise DPTypeError(f"others[{index}] must be a (share, build) pair, got {other!r}")
    # Shares are validated and normalised together; the others' vectors are placeholders.
    parsed_all = _parse_queries([*queries, *[(share, 1) for share, _ in others]])
    parsed = parsed_all[: len(queries)]
    other_shares = [share for share, _ in parsed_all[len(queries) :]]
    builds = [build for _, build in others]
    units = _unit_variances(parsed)

    def built(scale: Fraction) -> list[tuple[object, object, int]]:
        return [build(share / scale) for share, build in zip(other_shares, builds, strict=True)]

    if rho is not None:
        if epsilon is not None or delta is not None:
            raise DPValueError("give either rho alone or epsilon and delta together, not both")
        target = _target_down(rho, "rho")
        if target <= 0:
            raise DPValueError(f"rho must be > 0, got {rho!r}")
        return _sigma2_for(1 / target, units), built(1 / target)

    if epsilon is None or delta is None:
        raise DPValueError("give either rho alone or epsilon and delta together")
    epsilon_value = check_epsilon(epsilon)
    delta_value = check_delta(delta)
    if epsilon_value == 0:
        raise DPValueError("epsilon must be > 0 for discrete Gaussian noise, got 0")
    if not (isinstance(rtol, float) and 1e-12 <= rtol <= 0.1):
        raise DPValueError(f"rtol must be a float in [1e-12, 0.1], got {rtol!r}")
    log_target = math.log(delta_value)

    def excess(scale: float) -> tuple[float, tuple]:
        """log δ_upper(S) - log δ_target (<= 0: the target is met) and what was tried."""
        rounded = round_up_to_small_denominator(Fraction(scale))
        sigma2s = _sigma2_for(rounded, units)  # rounding again leaves a short S as it is
        events = built(rounded)
        upper = _accountant(sigma2s, parsed, events).delta(epsilon_value).upper
        return math.log(max(upper, 1e-300)) - log_target, (sigma2s, events)

    # The ρ that zCDP alone certifies gives a feasible S (the tight accountant is never worse).
    low_rho, high_rho = 0.0, max(1.0, epsilon_value)
    while zcdp_to_delta(high_rho, epsilon_value) <= delta_value:
        high_rho *= 2
    for _ in range(200):
        middle = 0.5 * (low_rho + high_rho)
        if zcdp_to_delta(middle, epsilon_value) <= delta_value:
            low_rho = middle
        else:
            high_rho = middle
        if high_rho - low_rho <= 1e-9 * high_rho:
            break
    feasible_scale = 1 / low_rho
    feasible_value, best = excess(feasible_scale)
    while feasible_value > 0:  # guards float edge cases of the zCDP search
        feasible_scale *= 1 + 1e-6
        feasible_value, best = excess(feasible_scale)
    # An infeasible S below: the tight bound saves well under half the variance in practice.
    infeasible_scale = feasible_scale / 2
    infeasible_value, _ = excess(infeasible_scale)
    while infeasible_value <= 0:
        feasible_scale, feasible_value = infeasible_scale, infeasible_value
        infeasible_scale /= 2
        infeasible_value, _ = excess(infeasible_scale)
    _, best = excess(feasible_scale)
    # Illinois (safeguarded regula falsi) on log δ(S): log δ is smooth and nearly linear in
    # log S, so it converges in a few calls; every step keeps a feasible and an infeasible end.
    side = 0
    while feasible_scale - infeasible_scale > rtol * feasible_scale:
        weight = infeasible_value / (infeasible_value - feasible_value)
        trial = infeasible_scale + weight * (feasible_scale - infeasible_scale)
        width = feasible_scale - infeasible_scale
        # Keep the trial strictly inside, at least rtol/2 of S away from either end.
        margin = min(0.5 * rtol * feasible_scale, 0.25 * width)
        trial = min(max(trial, infeasible_scale + margin), feasible_scale - margin)
        value, tried = excess(trial)
        if value <= 0:
            feasible_scale, feasible_value, best = trial, value, tried
            if side == 1:
                infeasible_value /= 2
            side = 1
        else:
            infeasible_scale, infeasible_value = trial, value
            if side == -1:
                feasible_value /= 2
            side = -1
    return best


def calibrate_discrete_laplace(
    epsilon: RationalLike, queries: Sequence = ((1, 1),)
) -> list[Fraction]:
    """Exact scales b_j so that the composition is pure ε-DP: b_j = ||μ_j||₁/(share_j·ε).

    Pure ε-DP composes additively (Δ/b per query); ε is read down and b rounded UP.

    Example:

        >>> from dp_pipeline.accounting import calibrate_discrete_laplace
        >>> calibrate_discrete_laplace(1, [(1, [1])])  # one count: b = Δ/ε
        [Fraction(1, 1)]
        >>> calibrate_discrete_laplace("1/2", [("1/2", [1]), ("1/2", [2, 2])])
        [Fraction(4, 1), Fraction(16, 1)]
    """
    target = _target_down(epsilon, "epsilon")
    if target <= 0:
        raise DPValueError(f"epsilon must be > 0, got {epsilon!r}")
    parsed = _parse_queries(queries)
    return [
        round_up_to_small_denominator(Fraction(sum(shifts)) / (share * target))
        for share, shifts in parsed
    ]
