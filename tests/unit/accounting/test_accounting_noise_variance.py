"""Exact noise variances against independent sums in 200-bit arithmetic (mpmath)."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest

from dp_pipeline.accounting.noise_variance import (
    discrete_gaussian_variance,
    discrete_laplace_variance,
    noise_variance,
)
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace


def gaussian_variance_sum(sigma2: Fraction) -> mpmath.mpf:
    """Σ x² e^{-x²/2σ²} / Σ e^{-x²/2σ²} term by term over |x| <= 40σ + 10 (tail < e^{-800})."""
    with mpmath.workprec(200):
        s = mpmath.mpf(sigma2.numerator) / sigma2.denominator
        top = int(40 * mpmath.sqrt(s)) + 10
        weights = [mpmath.exp(-mpmath.mpf(x * x) / (2 * s)) for x in range(top + 1)]
        numerator = 2 * mpmath.fsum(x * x * w for x, w in enumerate(weights))
        denominator = 1 + 2 * mpmath.fsum(weights[1:])
        return numerator / denominator


def laplace_variance_sum(scale: Fraction) -> mpmath.mpf:
    """Σ y² e^{-|y|/t} / Σ e^{-|y|/t} term by term over |y| <= 300t + 50."""
    with mpmath.workprec(200):
        t = mpmath.mpf(scale.numerator) / scale.denominator
        top = int(300 * t) + 50
        weights = [mpmath.exp(-mpmath.mpf(y) / t) for y in range(top + 1)]
        numerator = 2 * mpmath.fsum(y * y * w for y, w in enumerate(weights))
        return numerator / (1 + 2 * mpmath.fsum(weights[1:]))


def relative_error(value: Fraction, reference: mpmath.mpf) -> float:
    with mpmath.workprec(200):
        exact = mpmath.mpf(value.numerator) / value.denominator
        return float(abs(exact - reference) / reference)


@pytest.mark.parametrize(
    "sigma2",
    [
        Fraction(1, 1000),  # 1.4e-217: far below the smallest double's square root
        Fraction(1, 100),
        Fraction(1, 10),
        Fraction(1, 2),
        Fraction(99, 100),
        Fraction(1),  # the switch from direct sums to Poisson summation
        Fraction(1_000_001, 1_000_000),
        Fraction(3, 2),
        Fraction(7, 3),
        Fraction(50),
        Fraction(123_457, 7),
    ],
)
def test_discrete_gaussian_variance_is_the_exact_sum_to_double_precision(sigma2):
    variance = discrete_gaussian_variance(sigma2)
    assert isinstance(variance, Fraction)
    assert relative_error(variance, gaussian_variance_sum(sigma2)) <= 2.0**-52
    assert 0 < variance <= sigma2  # CKS 2020, Proposition 5 / Corollary 9


def test_discrete_gaussian_variance_is_far_below_sigma2_below_one():
    # The figure the least squares weights get at σ² = 1/10, where σ² itself is 7.5x too big.
    assert float(discrete_gaussian_variance(Fraction(1, 10))) == pytest.approx(0.0132967, rel=1e-5)
    # Above σ² = 1 the gap closes as 4π²σ²·e^{-2π²σ²}: 2e-7 at σ² = 1, below 1e-60 at 50.
    assert 1 - discrete_gaussian_variance(Fraction(1)) == pytest.approx(2.1123e-7, rel=1e-4)
    assert discrete_gaussian_variance(Fraction(10**12)) == Fraction(10**12)


@pytest.mark.parametrize(
    "scale", [Fraction(1, 20), Fraction(1, 3), Fraction(1), Fraction(17, 4), Fraction(300)]
)
def test_discrete_laplace_variance_is_the_exact_sum_to_double_precision(scale):
    variance = discrete_laplace_variance(scale)
    assert relative_error(variance, laplace_variance_sum(scale)) <= 2.0**-52


def test_discrete_laplace_variance_keeps_its_digits_at_large_scales():
    # 2q/(1-q)² with q = e^{-1/t} computed in doubles loses ~t·2^-53 to cancellation.
    t = Fraction(10**9)
    with mpmath.workprec(300):
        q = mpmath.exp(-mpmath.mpf(1) / 10**9)
        reference = 2 * q / (1 - q) ** 2
    assert relative_error(discrete_laplace_variance(t), reference) <= 2.0**-52


def test_noise_variance_of_a_mechanism():
    assert noise_variance(DiscreteGaussian(Fraction(1, 10))) == discrete_gaussian_variance(
        Fraction(1, 10)
    )
    assert noise_variance(DiscreteLaplace(Fraction(5, 2))) == discrete_laplace_variance(
        Fraction(5, 2)
    )
    with pytest.raises(TypeError, match="must be a DiscreteGaussian or DiscreteLaplace, got str"):
        noise_variance("gaussian")


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0.1, TypeError, "sigma2 must be an exact rational (Fraction or int), got 0.1"),
        (True, TypeError, "sigma2 must be an exact rational (Fraction or int), got True"),
        (Fraction(0), ValueError, "sigma2 must be > 0, got 0"),
        (-2, ValueError, "sigma2 must be > 0, got -2"),
    ],
)
def test_bad_parameters_are_refused_by_name(value, error, message):
    with pytest.raises(error) as info:
        discrete_gaussian_variance(value)
    assert str(info.value) == message
    with pytest.raises(error, match="scale must be"):
        discrete_laplace_variance(value)
