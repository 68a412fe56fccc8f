"""Calibration round trips and exact margins of error (against mpmath brute force)."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from dp_pipeline.accounting import (
    PrivacyAccountant,
    calibrate_discrete_gaussian,
    calibrate_discrete_laplace,
    margin_of_error,
)
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace


def _accountant(sigma2s, queries):
    accountant = PrivacyAccountant()
    for sigma2, (_, shifts) in zip(sigma2s, queries, strict=True):
        accountant.add(DiscreteGaussian(sigma2), shifts)
    return accountant


CENSUS_SHARES = [Fraction(1, 2)] + [Fraction(1, 8)] * 3 + [Fraction(1, 16)] * 2
# Just-invalid twin: σ² (or ε) shrunk by this factor must miss the target, i.e. calibration
# is tight to better than 0.1% (its search tolerance is rtol = 1e-4 in the noise scale).
TWIN = Fraction(999, 1000)


@pytest.mark.parametrize(
    ("queries", "epsilon", "delta"),
    [
        pytest.param([(1, [1] * 100)], 1.0, 1e-6, id="one-table-100-cells"),
        pytest.param([(Fraction(1, 2), 1), (Fraction(1, 2), [1, 1])], 1.0, 1e-6, id="two"),
        pytest.param([(1, 1)], 0.5, 1e-9, id="theorem7"),
        pytest.param([(0.3, [1, 2]), (0.7, [3])], 1.0, 1e-8, id="float-shares"),
        pytest.param(list(zip(CENSUS_SHARES, [[1]] * 6, strict=True)), 2.0, 1e-10, id="census"),
    ],
)
def test_calibration_meets_target_and_its_twin_does_not(queries, epsilon, delta):
    sigma2s = calibrate_discrete_gaussian(epsilon=epsilon, delta=delta, queries=queries)
    assert all(isinstance(s, Fraction) and s.denominator <= 10**7 for s in sigma2s)
    accountant = _accountant(sigma2s, queries)
    assert accountant.delta(epsilon).upper <= delta
    assert accountant.methods in (
        ("mgf_inversion", "multivariate_fft"),
        ("mgf_inversion", "support_exact"),
        ("mgf_inversion", "support_exact + gaussian_tails"),
        ("multivariate_fft",),
        ("theorem7",),
    )  # lattice-aware rounding keeps an exact path available
    smaller = _accountant([s * TWIN for s in sigma2s], queries)
    assert smaller.delta(epsilon).upper > delta


def test_calibration_keeps_share_ratios_exact():
    # σ_j² = c_j·S with c_j = ||μ_j||²/(2·share_j): one rounding of S keeps the ratios
    # 1 : 4 : 4 : 4 : 8 : 8 exact, so the privacy loss stays on a coarse lattice.
    queries = list(zip(CENSUS_SHARES, [[1]] * 6, strict=True))
    sigma2s = calibrate_discrete_gaussian(epsilon=2.0, delta=1e-10, queries=queries)
    assert [s / sigma2s[0] for s in sigma2s] == [1, 4, 4, 4, 8, 8]


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([(DiscreteGaussian(Fraction(1001, 3)), 1, 1)], id="theorem7"),
        pytest.param([(DiscreteGaussian(2500), 1, 100)], id="multivariate"),
        pytest.param(
            [(DiscreteGaussian(Fraction(51, 10)), [1, 1], 1), (DiscreteGaussian(999983), 1, 1)],
            id="pld-fallback",
        ),
        pytest.param(
            [(DiscreteLaplace(50), 1, 20), (DiscreteGaussian(400), 1, 20)], id="mixed-lattice"
        ),
    ],
)
@pytest.mark.parametrize("delta", [1e-10, 1e-5])
def test_epsilon_is_tight_and_its_twin_is_not(events, delta):
    accountant = PrivacyAccountant()
    for mechanism, sensitivity, count in events:
        accountant.add(mechanism, sensitivity, count)
    epsilon = accountant.epsilon(delta)
    assert epsilon.lower <= epsilon.upper
    assert accountant.delta(epsilon.upper).upper <= delta
    assert accountant.delta(epsilon.upper * (1 - 1e-3)).upper > delta


def test_calibration_for_rho_is_exact():
    # σ_j² = ||μ_j||² / (2·share_j·ρ): 1/(2·(1/4)·(1/10)) = 20 and 8/(2·(3/4)·(1/10)) = 160/3.
    sigma2s = calibrate_discrete_gaussian(rho=Fraction(1, 10), queries=[(0.25, 1), (0.75, [2, 2])])
    assert sigma2s == [Fraction(20), Fraction(160, 3)]
    assert _accountant(sigma2s, [(0, 1), (0, [2, 2])]).rho() == Fraction(1, 10)


def test_round_up_keeps_short_values_and_never_rounds_down():
    from dp_pipeline.accounting.calibration import round_up_to_small_denominator

    assert round_up_to_small_denominator(Fraction(16, 3)) == Fraction(16, 3)
    long = Fraction(10**7 + 1, 3 * 10**7)  # denominator above 10^6: rounded up to 10^-k
    rounded = round_up_to_small_denominator(long)
    assert rounded >= long and rounded.denominator <= 10**7
    assert rounded - long <= long / 10**6
    with pytest.raises(ValueError, match="value must be > 0, got 0"):
        round_up_to_small_denominator(Fraction(0))


def test_laplace_calibration_meets_pure_epsilon():
    scales = calibrate_discrete_laplace(1.0, [(0.5, 1), (0.5, [1, 2])])
    assert scales == [Fraction(2), Fraction(6)]
    accountant = (
        PrivacyAccountant().add(DiscreteLaplace(scales[0])).add(DiscreteLaplace(scales[1]), [1, 2])
    )
    assert accountant.pure_epsilon() == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": 1.0, "delta": 1e-6, "queries": []}, "queries must not be empty"),
        ({"epsilon": 1.0, "delta": 1e-6, "queries": [(0.5, 1)]}, "shares must sum to 1"),
        ({"epsilon": 1.0, "delta": 1e-6, "queries": [(0, 1), (1, 1)]}, "share must be > 0"),
        ({"epsilon": 1.0, "delta": 1e-6, "queries": [(1, 1.5)]}, "must be an integer"),
        ({"epsilon": 1.0, "queries": [(1, 1)]}, "epsilon and delta together"),
        ({"epsilon": -1.0, "delta": 1e-6, "queries": [(1, 1)]}, "epsilon must be finite and >= 0"),
        ({"epsilon": 1.0, "delta": 1.0, "queries": [(1, 1)]}, "delta must lie strictly"),
        ({"rho": 0, "queries": [(1, 1)]}, "rho must be > 0"),
    ],
)
def test_calibration_bad_input(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        calibrate_discrete_gaussian(**kwargs)


def _mp_margin(weight, confidence):
    mpmath.mp.dps = 40
    limit = 4000
    weights = [weight(y) for y in range(-limit, limit + 1)]
    total = mpmath.fsum(weights)
    inside = weights[limit] / total
    m = 0
    while inside < confidence:
        m += 1
        inside += (weights[limit + m] + weights[limit - m]) / total
    return m


@pytest.mark.parametrize("sigma2", [Fraction(1, 3), 1, 7, 2500, Fraction(90001, 7)])
@pytest.mark.parametrize("confidence", [0.5, 0.95, 0.999])
def test_gaussian_margin_matches_brute_force(sigma2, confidence):
    s2 = mpmath.mpf(Fraction(sigma2).numerator) / Fraction(sigma2).denominator
    expected = _mp_margin(lambda y: mpmath.exp(-(mpmath.mpf(y) ** 2) / (2 * s2)), confidence)
    assert margin_of_error(DiscreteGaussian(sigma2), confidence) == expected


@pytest.mark.parametrize("scale", [Fraction(1, 2), 3, 40])
@pytest.mark.parametrize("confidence", [0.5, 0.95, 0.999])
def test_laplace_margin_matches_brute_force(scale, confidence):
    b = mpmath.mpf(Fraction(scale).numerator) / Fraction(scale).denominator
    expected = _mp_margin(lambda y: mpmath.exp(-abs(mpmath.mpf(y)) / b), confidence)
    assert margin_of_error(DiscreteLaplace(scale), confidence) == expected


def test_margin_bad_input():
    with pytest.raises(ValueError, match="confidence must lie strictly between 0 and 1"):
        margin_of_error(DiscreteGaussian(4), 1.0)
    with pytest.raises(TypeError, match="mechanism must be a DiscreteGaussian"):
        margin_of_error(object())
    assert math.isfinite(margin_of_error(DiscreteGaussian(4)))


@pytest.mark.parametrize("sigma2", [Fraction(10**9), Fraction(4 * 10**9, 3)])
@pytest.mark.parametrize("confidence", [0.5, 0.95, 0.999])
def test_gaussian_margin_for_large_sigma_matches_term_by_term_sums(sigma2, confidence):
    """σ > 26,000 uses the Euler–Maclaurin tail: check it against summing the pmf."""
    margin = margin_of_error(DiscreteGaussian(sigma2), confidence)
    variance = np.longdouble(sigma2.numerator) / sigma2.denominator
    y = np.arange(1, int(40 * np.sqrt(float(sigma2))), dtype=np.longdouble)
    weights = np.exp(-(y * y) / (2 * variance))
    total = 1 + 2 * weights.sum()
    # P(|Y| > m) = 2·Σ_{y > m} w_y / total, summed from the small end in extended precision.
    outside = 2 * np.cumsum(weights[::-1])[::-1] / total  # index i: P(|Y| >= i + 1)
    assert outside[margin] <= 1 - confidence < outside[margin - 1]
