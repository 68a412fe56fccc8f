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
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting._checks import (
    Real,
    check_delta,
    check_epsilon,
    check_integer_sensitivity,
    round_up,
)
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound, Method
from dp_pipeline.accounting.inversion import (
    SMOOTH_SIGMA2,
    TINY,
    InversionComposition,
    smooth_gaussian,
)
from dp_pipeline.accounting.outward import exp_down, exp_up
from dp_pipeline.accounting.zcdp import zcdp_to_epsilon
from dp_pipeline.errors import DPValueError
from dp_pipeline.mechanisms.additive import DiscreteGaussian
from dp_pipeline.rational import RationalLike, positive_rational

__all__ = [
    "discrete_gaussian_delta",
    "discrete_gaussian_delta_bounds",
    "discrete_gaussian_epsilon",
    "discrete_gaussian_log_normalizer",
    "discrete_gaussian_pmf_bounds",
    "discrete_gaussian_rho",
    "discrete_gaussian_tail_bounds",
    "exact_sigma2",
]

# exp(-46) ~ 1e-20: beyond, the remaining terms are bounded (and added) instead of summed.
_TAIL_LOG_RATIO = 46.0
_CHUNK = 1 << 20
_DIRECT_TERMS = 300_000
_UNIT = 2.0**-53


def exact_sigma2(mechanism_or_sigma2: DiscreteGaussian | RationalLike) -> Fraction:
    """The exact rational σ² of a `DiscreteGaussian`, or of a σ² given directly (int,
    Fraction or "p/q"; floats by the conservative rule of `dp_pipeline.rational`)."""
    if isinstance(mechanism_or_sigma2, DiscreteGaussian):
        return mechanism_or_sigma2.sigma2
    return positive_rational(mechanism_or_sigma2, "sigma2")


def discrete_gaussian_log_normalizer(sigma2: float) -> float:
    """log Σ_y exp(-y²/(2σ²)); by Poisson summation for σ² >= 1, directly otherwise.

    Absolute error <= `_log_normalizer_error` (float round-off; the neglected Poisson terms
    k >= 4 are below e^{-315} relative, the direct sum's tail below e^{-760}).
    """
    if sigma2 >= 1:
        # Σ_y e^{-y²/(2σ²)} = sqrt(2πσ²) · Σ_k e^{-2π²σ²k²}
        correction = sum(math.exp(-2 * math.pi**2 * sigma2 * k * k) for k in range(1, 4))
        return 0.5 * math.log(2 * math.pi * sigma2) + math.log1p(2 * correction)
    limit = math.ceil(math.sqrt(2 * sigma2 * 760)) + 1
    ys = np.arange(-limit, limit + 1, dtype=np.float64)
    exponents = -(ys * ys) / (2 * sigma2)
    top = exponents.max()
    return float(top + math.log(np.exp(exponents - top).sum()))


def _log_normalizer_error(sigma2: float, log_normalizer: float) -> float:
    terms = 8 if sigma2 >= 1 else 2 * math.ceil(math.sqrt(2 * sigma2 * 760)) + 12
    return 4 * _UNIT * (abs(log_normalizer) + terms + 2)


def discrete_gaussian_rho(
    sigma2: DiscreteGaussian | RationalLike, sensitivity: int = 1
) -> Fraction:
    """Exact zCDP ρ = Δ²/(2σ²) of N_Z(0, σ²) with sensitivity Δ (CKS Theorem 4).

    ``sigma2``: a `DiscreteGaussian` or its σ² (see `exact_sigma2`).

    Example:

        >>> from dp_pipeline import DiscreteGaussian
        >>> from dp_pipeline.accounting import discrete_gaussian_rho
        >>> discrete_gaussian_rho(DiscreteGaussian(2))
        Fraction(1, 4)
        >>> discrete_gaussian_rho("9/2", sensitivity=3)
        Fraction(1, 1)
    """
    sigma2 = exact_sigma2(sigma2)
    shift = check_integer_sensitivity(sensitivity)
    return Fraction(shift * shift) / (2 * sigma2)


def _terms_needed(sigma2: Fraction, first: int) -> float:
    start = max(first, 0)
    return math.sqrt(float(start) ** 2 + 2 * float(sigma2) * _TAIL_LOG_RATIO) - first + 2


def _bounds_one_shift(
    sigma2: Fraction,
    shift: int,
    epsilon: float,
    log_normalizer: float,
    first: int | None = None,
) -> tuple[float, float]:
    """Rigorous (lower, upper) on Theorem 7's δ for one shift.

    Direct sum Σ_{y >= y0} P[Y=y]·(1 - e^{-(L(y)-ε)}) of non-negative terms, y0 and the
    first gap L(y0) - ε in exact rationals. Error budget (relative, per term): the exponent
    -y²/(2σ²) - log Z is computed with absolute error <= 4u·(y²/(2σ²) + |log Z|) plus the
    normaliser's error, exp adds u, the gap's float evaluation (three roundings, relative
    4u) moves 1 - e^{-gap} by at most 4u + 2u relative; pairwise summation of n terms adds
    u·log2(n). The terms beyond the last one summed (where P has fallen by e^{-46} from y0)
    are at most P[Y = last+1]/(1 - r), r = e^{-(2·last+3)/(2σ²)}, added to the upper bound.
    The terms are summed as e^{log term - top}, relative to the largest e^{top} (their
    exponents' extra rounding charged as above, a term rounded to a subnormal or 0 as
    2^-1074 each), and the bracket is e^{top}·sum converted outward by whole ulps
    (`outward`), so it holds among subnormal δ too.
    Beyond ~300,000 terms (σ ≳ 30,000), the MGF inversion of `inversion` is used instead
    (cost independent of σ). With ``first`` given (an index with L(first) > ε), the same
    sum from y0 = ``first`` on (`discrete_gaussian_tail_bounds`), always summed directly.
    """
    epsilon_exact = Fraction(epsilon)
    partial = first is not None
    if first is None:
        threshold = epsilon_exact * sigma2 / shift - Fraction(shift, 2)
        first = math.floor(threshold) + 1  # smallest y with L(y) > ε (strict)
    if first > 0 and Fraction(first * first) / (2 * sigma2) > 2000:
        # δ <= P[Y >= y0] <= e^{-y0²/(2σ²)}/(1 - e^{-(2y0+1)/(2σ²)}) < e^{-1900}.
        return 0.0, TINY
    too_many = _terms_needed(sigma2, first) > _DIRECT_TERMS
    if too_many and partial:
        raise DPValueError(f"a tail sum from y = {first} at sigma2 = {sigma2} is too long to sum")
    if too_many and sigma2 >= SMOOTH_SIGMA2:
        return InversionComposition([smooth_gaussian(sigma2, shift, 1)], []).delta_bounds(epsilon)
    gap0 = Fraction(2 * first * shift + shift * shift) / (2 * sigma2) - epsilon_exact
    sigma2_float = float(sigma2)
    step = shift / sigma2_float
    start = max(first, 0)
    last = math.ceil(math.sqrt(start * start + 2 * sigma2_float * _TAIL_LOG_RATIO)) + 1
    logs = []
    largest_exponent = largest_weight = 0.0
    for chunk_start in range(first, last + 1, _CHUNK):
        ys = np.arange(chunk_start, min(chunk_start + _CHUNK, last + 1), dtype=np.float64)
        gaps = float(gap0) + (ys - first) * step
        quadratic = (ys * ys) / (2 * sigma2_float)
        largest_exponent = max(largest_exponent, float(quadratic.max()))
        weights = np.log(-np.expm1(-gaps))  # log(1 - e^{-gap}) <= 0, finite (gap > 0)
        largest_weight = max(largest_weight, float(-weights.min()))
        logs.append(-quadratic - log_normalizer + weights)
    log_terms = np.concatenate(logs)
    # the terms are summed relative to the largest, e^top, so that a δ among (or below)
    # the subnormal floats keeps its relative precision; a term below 2^-1074 of the
    # largest (at most 2^-1074 each once rounded) is charged as that, per term
    top = float(log_terms.max())
    differences = log_terms - top
    scaled = np.exp(differences)
    total = float(scaled.sum())  # >= 1: the largest term is e^0
    count = last - first + 1
    # the weight's log and the subtraction of top err by u of their magnitudes each, so
    # term i by a factor e^{±2u(|d_i| + |log w|_max + 1)}: relative to e^top, their sum
    shifted = 2.02 * _UNIT * float(np.sum(scaled * (np.abs(differences) + largest_weight + 1)))
    relative = (
        4 * _UNIT * (largest_exponent + abs(log_normalizer) + 1) * 1.01
        + _log_normalizer_error(sigma2_float, log_normalizer) * 1.01
        + shifted / total
        + 10 * _UNIT
        + _UNIT * (math.ceil(math.log2(count + 1)) + 2)
    )
    tail_exponent = -((last + 1) ** 2) / (2 * sigma2_float) - log_normalizer
    log_tail = tail_exponent + 8 * _UNIT * (abs(tail_exponent) + 1)
    log_tail -= math.log(-math.expm1(-(2 * last + 3) / (2 * sigma2_float))) * (1 + 4 * _UNIT)
    tail = math.exp(log_tail - top) * (1 + 8 * _UNIT * (abs(log_tail) + abs(top) + 1))
    upper = (total * (1 + relative) + tail * (1 + 4 * _UNIT)) * (1 + 4 * _UNIT) + count * TINY
    lower = total * (1 - relative) - count * TINY
    slack = 8 * _UNIT * (abs(top) + 1)  # top + log(·) and log's own rounding, below
    upper_end = exp_up(min(top + math.log(upper) + slack, 0.0))
    lower_end = exp_down(top + math.log(lower) - slack) if lower > 0 else 0.0
    return lower_end, max(TINY, upper_end)


def discrete_gaussian_tail_bounds(
    sigma2: Fraction, shift: int, epsilon: float, first: int
) -> tuple[float, float]:
    """Rigorous (lower, upper) on Σ_{y >= first} P[Y=y]·(1 - e^{ε - L(y)}), Y ~ N_Z(0, σ²),
    L(y) = (μ² + 2μy)/(2σ²), for an index ``first`` with L(first) > ε (the terms of CKS
    Thm. 7 from ``first`` on; error budget of `_bounds_one_shift`). Raises ValueError when
    that needs more than ~300,000 terms."""
    if Fraction(2 * first * shift + shift * shift, 2) / sigma2 <= Fraction(epsilon):
        raise DPValueError(f"the tail sum needs L(first) > epsilon, got first = {first}")
    log_normalizer = discrete_gaussian_log_normalizer(float(sigma2))
    return _bounds_one_shift(sigma2, shift, epsilon, log_normalizer, first)


def discrete_gaussian_pmf_bounds(sigma2: Fraction, y: int) -> tuple[float, float]:
    """Rigorous (lower, upper) on P[Y = y] for Y ~ N_Z(0, σ²) (the exponent's float error
    as in `_bounds_one_shift`: 4u relative to its magnitude plus the normaliser's)."""
    sigma2_float = float(sigma2)
    log_normalizer = discrete_gaussian_log_normalizer(sigma2_float)
    exponent = -(float(y) ** 2) / (2 * sigma2_float) - log_normalizer
    error = (
        4 * _UNIT * (abs(exponent) + abs(log_normalizer) + 1) * 1.01
        + _log_normalizer_error(sigma2_float, log_normalizer) * 1.01
    )
    # outward by whole ulps: valid among subnormal floats too (`outward`)
    return exp_down(exponent - error), min(1.0, exp_up(min(exponent + error, 0.0)))


def discrete_gaussian_delta_bounds(
    sigma2: DiscreteGaussian | RationalLike, epsilon: Real, sensitivity: int = 1
) -> tuple[float, float]:
    """Rigorous (lower, upper) on the exact δ(ε) of N_Z(0, σ²) (CKS Thm. 7, max over shifts
    1..Δ). Relative width about 1e-13 for σ ≲ 30,000 (direct sums, `_bounds_one_shift`),
    about 0.5/σ² beyond (MGF inversion); δ below the float range gives (0, 5e-324).
    ``sigma2``: a `DiscreteGaussian` or its σ² (see `exact_sigma2`)."""
    sigma2 = exact_sigma2(sigma2)
    epsilon = check_epsilon(epsilon)
    shift_bound = check_integer_sensitivity(sensitivity)
    log_normalizer = discrete_gaussian_log_normalizer(float(sigma2))
    bounds = [
        _bounds_one_shift(sigma2, shift, epsilon, log_normalizer)
        for shift in range(1, shift_bound + 1)
    ]
    return min(1.0, max(b[0] for b in bounds)), min(1.0, max(b[1] for b in bounds))


def discrete_gaussian_delta(
    sigma2: DiscreteGaussian | RationalLike, epsilon: Real, sensitivity: int = 1
) -> DeltaBound:
    """Exact δ(ε) of N_Z(0, σ²) for sensitivity Δ (CKS Thm. 7, max over shifts 1..Δ).

    A `DeltaBound`: ``upper`` (the guarantee) and ``lower`` of
    `discrete_gaussian_delta_bounds` (relative width about 1e-13 for σ ≲ 30,000), method
    ``"theorem7"``. ``sigma2``: a `DiscreteGaussian` or its σ² (see `exact_sigma2`).
    """
    lower, upper = discrete_gaussian_delta_bounds(sigma2, epsilon, sensitivity)
    return DeltaBound(lower, upper, Method.THEOREM7.value)


def discrete_gaussian_epsilon(
    sigma2: DiscreteGaussian | RationalLike, delta: Real, sensitivity: int = 1, rtol: float = 1e-9
) -> EpsilonBound:
    """Smallest ε with δ(ε) <= δ by CKS Theorem 7, as an `EpsilonBound`: ``upper`` rounded
    up (the release is (upper, δ)-DP), ``lower`` below the true ε, within ``rtol``.

    ``sigma2``: a `DiscreteGaussian` or its σ² (see `exact_sigma2`).
    """
    sigma2 = exact_sigma2(sigma2)
    delta = check_delta(delta)
    shift = check_integer_sensitivity(sensitivity)
    if discrete_gaussian_delta_bounds(sigma2, 0.0, shift)[1] <= delta:
        return EpsilonBound(0.0, 0.0, Method.THEOREM7.value)
    # The exact δ is at most the zCDP conversion's, so this ε is feasible.
    high = zcdp_to_epsilon(float(Fraction(shift * shift) / (2 * sigma2)), delta)
    while discrete_gaussian_delta_bounds(sigma2, high, shift)[1] > delta:
        high *= 2
    return bracket_epsilon(
        lambda eps: discrete_gaussian_delta_bounds(sigma2, eps, shift), delta, high, rtol
    ).with_method(Method.THEOREM7.value)


def bracket_epsilon(
    delta_bounds_of: Callable[[float], tuple[float, float]],
    delta: float,
    high: float,
    rtol: float = 1e-9,
) -> EpsilonBound:
    """ε(δ) bracketed from (lower, upper) bounds on a non-increasing δ(ε), with
    ``delta_bounds_of(high)[1] <= δ``: ``upper`` the smallest ε (within ``rtol``, rounded
    up) whose upper δ is at most δ, ``lower`` the infeasible end of the search on the lower
    δ (the true ε is above it). ``method`` is left empty for the caller."""
    upper = bisect_epsilon(lambda eps: delta_bounds_of(eps)[1], delta, high, rtol)
    if delta_bounds_of(0.0)[0] <= delta:
        return EpsilonBound(0.0, upper, "")
    low, top = 0.0, upper
    while top - low > rtol * top + 1e-15:
        middle = 0.5 * (low + top)
        if delta_bounds_of(middle)[0] <= delta:
            top = middle
        else:
            low = middle
    return EpsilonBound(min(low, upper), upper, "")


def bisect_epsilon(
    delta_of: Callable[[float], float], delta: float, high: float, rtol: float = 1e-9
) -> float:
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
