"""Exact one-dimensional accounting: zCDP conversions and CKS Theorem 7 against mpmath."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest

from dp_pipeline.accounting import (
    DeltaBound,
    EpsilonBound,
    PrivacyLossDistribution,
    standard_zcdp_epsilon,
    zcdp_to_delta,
    zcdp_to_epsilon,
)
from dp_pipeline.accounting.discrete_gaussian import (
    discrete_gaussian_delta,
    discrete_gaussian_epsilon,
    discrete_gaussian_rho,
)
from dp_pipeline.accounting.discrete_laplace import (
    discrete_laplace_delta,
    discrete_laplace_epsilon,
    discrete_laplace_pure_epsilon,
    discrete_laplace_rho,
)
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

MPMATH_DPS = 60  # decimal digits: tests/conftest.py sets them for each test


def _mp_discrete_gaussian_delta(sigma2: Fraction, shift: int, epsilon: float) -> mpmath.mpf:
    """Independent route: δ = P[Y > εσ²/Δ - Δ/2] - e^ε P[Y > εσ²/Δ + Δ/2] at 60 digits."""
    s2 = mpmath.mpf(sigma2.numerator) / sigma2.denominator
    limit = int(math.sqrt(float(sigma2)) * 60) + 200 + int(epsilon * float(sigma2))
    weights = {y: mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) for y in range(-limit, limit + 1)}
    total = mpmath.fsum(weights.values())
    eps = mpmath.mpf(epsilon)
    first = eps * s2 / shift - mpmath.mpf(shift) / 2
    second = eps * s2 / shift + mpmath.mpf(shift) / 2
    tail_first = mpmath.fsum(w for y, w in weights.items() if y > first)
    tail_second = mpmath.fsum(w for y, w in weights.items() if y > second)
    return (tail_first - mpmath.exp(eps) * tail_second) / total


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(3), Fraction(25), Fraction(401, 4)])
@pytest.mark.parametrize("shift", [1, 2])
@pytest.mark.parametrize("epsilon", [0.05, 1.0, 3.0])
def test_theorem7_matches_mpmath(sigma2, shift, epsilon):
    exact = _mp_discrete_gaussian_delta(sigma2, shift, epsilon)
    ours = discrete_gaussian_delta(DiscreteGaussian(sigma2), epsilon, sensitivity=shift).upper
    # Max over shifts 1..Δ: compute the mpmath value for every shift too.
    exact = max(_mp_discrete_gaussian_delta(sigma2, s, epsilon) for s in range(1, shift + 1))
    if exact < 1e-30:
        assert ours <= 1e-29
        return
    assert ours >= float(exact) * (1 - 1e-12)  # an upper bound up to float noise
    assert abs(ours - float(exact)) <= 1e-10 * float(exact)


def test_theorem7_tiny_delta_keeps_relative_accuracy():
    # δ around 1e-25..1e-30: the difference form would cancel catastrophically.
    sigma2 = Fraction(4)
    epsilon = 5.5
    exact = _mp_discrete_gaussian_delta(sigma2, 1, epsilon)
    assert 1e-32 < exact < 1e-20
    ours = discrete_gaussian_delta(DiscreteGaussian(sigma2), epsilon).upper
    assert abs(ours - float(exact)) <= 1e-10 * float(exact)


def test_theorem7_boundary_has_no_spurious_atom():
    # εσ²/Δ - Δ/2 is an integer: the loss equals ε exactly there and contributes 0.
    sigma2, epsilon = Fraction(4), 0.75  # threshold 0.75*4 - 0.5 = 2.5; use ε = 0.625 -> 2
    epsilon = 0.625
    exact = _mp_discrete_gaussian_delta(sigma2, 1, epsilon)
    assert abs(
        discrete_gaussian_delta(DiscreteGaussian(sigma2), epsilon).upper - float(exact)
    ) <= 1e-12 * float(exact)


def test_epsilon_inverts_delta_and_is_rounded_up():
    mechanism = DiscreteGaussian(50)
    epsilon = discrete_gaussian_epsilon(mechanism, 1e-6).upper
    assert discrete_gaussian_delta(mechanism, epsilon).upper <= 1e-6
    assert discrete_gaussian_delta(mechanism, epsilon * (1 - 1e-6)).upper > 1e-6


def test_one_mechanism_delta_and_epsilon_are_two_sided_bounds():
    # One result type per verb: every `delta` is a DeltaBound, every `epsilon` an
    # EpsilonBound, as the accountant's; the true value lies between lower and upper.
    for mechanism, delta_of, epsilon_of, method in (
        (DiscreteGaussian(50), discrete_gaussian_delta, discrete_gaussian_epsilon, "theorem7"),
        (DiscreteLaplace(4), discrete_laplace_delta, discrete_laplace_epsilon, "discrete_laplace"),
    ):
        bound = delta_of(mechanism, 0.1)
        assert isinstance(bound, DeltaBound) and bound.method == method
        assert 0 < bound.lower <= bound.upper <= bound.lower * (1 + 1e-9)
        epsilon = epsilon_of(mechanism, 1e-3)
        assert isinstance(epsilon, EpsilonBound) and epsilon.method == method
        assert 0 < epsilon.lower <= epsilon.upper <= epsilon.lower * (1 + 1e-6)
        assert delta_of(mechanism, epsilon.upper).upper <= 1e-3  # the guarantee holds
        assert delta_of(mechanism, epsilon.lower).lower > 1e-3  # and the lower end is short
        pld = PrivacyLossDistribution.from_mechanism(mechanism, 1, 1e-4)
        assert isinstance(pld.delta(0.1), DeltaBound) and isinstance(
            pld.epsilon(1e-3), EpsilonBound
        )


def test_rho_is_exact():
    assert discrete_gaussian_rho(DiscreteGaussian(Fraction(7, 3)), 2) == Fraction(4 * 3, 2 * 7)
    assert discrete_laplace_rho(DiscreteLaplace(4), 2) == Fraction(1, 8)
    assert discrete_laplace_pure_epsilon(DiscreteLaplace(4), 2) == Fraction(1, 2)


def test_discrete_laplace_delta_against_binomial_closed_form():
    # One discrete Laplace: loss ±a with P(+a) = e^a/(1+e^a) (ALGORITHMS §4, k = 1).
    scale = Fraction(5)
    a = 1 / 5
    p = math.exp(a) / (1 + math.exp(a))
    epsilon = 0.05
    expected = p * (1 - math.exp(epsilon - a))
    assert discrete_laplace_delta(DiscreteLaplace(scale), epsilon).upper == pytest.approx(
        expected, rel=1e-12
    )
    assert discrete_laplace_delta(DiscreteLaplace(scale), 0.2).upper == 0.0
    assert discrete_laplace_epsilon(DiscreteLaplace(scale), 0.01).upper <= 0.2


def test_zcdp_conversion_pinned_and_below_standard():
    # ALGORITHMS §4: ρ = 0.02 gives δ ≈ 8.8e-8 at ε = 1 (CKS Figure 4's "1e-7").
    assert zcdp_to_delta(0.02, 1.0) == pytest.approx(8.8e-8, rel=0.01)
    for rho in [1e-4, 0.02, 0.5, 3.0]:
        for delta in [1e-12, 1e-6, 0.1]:
            epsilon = zcdp_to_epsilon(rho, delta)
            assert epsilon <= standard_zcdp_epsilon(rho, delta)
            assert zcdp_to_delta(rho, epsilon) <= delta * (1 + 1e-9)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: discrete_gaussian_delta(DiscreteGaussian(4), -0.1),
            "epsilon must be finite and >= 0",
        ),
        (
            lambda: discrete_gaussian_epsilon(DiscreteGaussian(4), 0.0),
            "delta must lie strictly between 0 and 1",
        ),
        (
            lambda: discrete_gaussian_epsilon(DiscreteGaussian(4), 1.0),
            "delta must lie strictly between 0 and 1",
        ),
        (lambda: DiscreteGaussian(0), "sigma2 must be > 0"),
        (lambda: DiscreteGaussian(-1), "sigma2 must be > 0"),
        (
            lambda: discrete_gaussian_delta(DiscreteGaussian(4), 1.0, 1.5),
            "sensitivity must be an integer",
        ),
        (
            lambda: discrete_gaussian_rho(DiscreteGaussian(4), 0),
            "sensitivity must be an integer >= 1",
        ),
        (
            lambda: discrete_laplace_delta(DiscreteLaplace(4), 1.0, 0.5),
            "sensitivity must be an integer",
        ),
        (lambda: zcdp_to_delta(-1, 1.0), "rho must be finite and >= 0"),
        (lambda: zcdp_to_epsilon(0.1, 2.0), "delta must lie strictly between 0 and 1"),
    ],
)
def test_bad_input_names_argument_and_rule(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
