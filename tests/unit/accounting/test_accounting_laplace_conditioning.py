"""The Laplace conditioning bracket, against mpmath, and where the accountant uses it.

The reference sums the composed privacy loss exactly at 40 digits: every (K, y) pair of a
discrete Laplace Lap_Z(b) with shift Δ (loss (2K - Δ)/b) and a discrete Gaussian N_Z(0, σ²)
with shift μ (loss (μ² + 2μy)/(2σ²)), independently of the bracket's tail arguments and
of the accountant's inversion and FFT paths.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest
from accounting_plans import random_release_plan

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.laplace_conditioning import METHOD, laplace_conditionings
from dp_pipeline.accounting.paths import fft_composition
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

MPMATH_DPS = 40  # decimal digits: tests/conftest.py sets them for each test

LAPLACE_SCALE, LAPLACE_SHIFT = Fraction(2), 200  # pure ε = 100
GAUSSIAN_SIGMA2, GAUSSIAN_SHIFT = Fraction(4), 1  # ρ = 1/8


def _mp(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


def _mp_laplace(scale: Fraction, shift: int):
    """(P[K], loss) of Lap_Z(b) with shift Δ: P[K=Δ] = 1/(1+q), P[K=0] = q^Δ/(1+q),
    P[K=Δ-y] = (1-q)/(1+q)·q^y otherwise (q = e^{-1/b})."""
    b = _mp(scale)
    q = mpmath.exp(-1 / b)
    pairs = []
    for k in range(shift + 1):
        y = shift - k
        if y == 0:
            mass = 1 / (1 + q)
        elif k == 0:
            mass = q**shift / (1 + q)
        else:
            mass = (1 - q) / (1 + q) * q**y
        pairs.append((mass, (2 * k - shift) / b))
    return pairs


def _mp_gaussian(sigma2: Fraction, shift: int):
    """(P[y], loss) of N_Z(0, σ²) with shift μ, |y| <= 60σ (the rest below e^-1800)."""
    s2 = _mp(sigma2)
    limit = int(60 * math.sqrt(float(sigma2))) + 2
    weights = [mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) for y in range(-limit, limit + 1)]
    total = mpmath.fsum(weights)
    return [
        (w / total, (mpmath.mpf(shift * shift) + 2 * shift * y) / (2 * s2))
        for w, y in zip(weights, range(-limit, limit + 1), strict=True)
    ]


def _exact_delta(epsilon: float) -> mpmath.mpf:
    eps = mpmath.mpf(epsilon)
    gaussian = _mp_gaussian(GAUSSIAN_SIGMA2, GAUSSIAN_SHIFT)
    terms = []
    for p_laplace, loss_laplace in _mp_laplace(LAPLACE_SCALE, LAPLACE_SHIFT):
        for p_gaussian, loss_gaussian in gaussian:
            loss = loss_laplace + loss_gaussian
            if loss > eps:
                terms.append(p_laplace * p_gaussian * -mpmath.expm1(eps - loss))
    return mpmath.fsum(terms)


def _accountant() -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    accountant.add(DiscreteLaplace(LAPLACE_SCALE), LAPLACE_SHIFT)
    accountant.add(DiscreteGaussian(GAUSSIAN_SIGMA2), GAUSSIAN_SHIFT)
    return accountant


def _conditioning():
    from dp_pipeline.accounting.strategy import rest_summary

    accountant = _accountant()
    (conditioning,) = laplace_conditionings(list(accountant.events), rest_summary)
    return conditioning


@pytest.mark.parametrize("epsilon", [0.0, 10.0, 50.0, 75.0])
def test_bracket_is_tight_well_below_the_pure_epsilon(epsilon):
    # the middle atoms (loss within t_hi ≈ 20.4 of ε) carry <= e^{-(100 - ε - 20.4)/2}
    bound = _conditioning().delta_bound(epsilon)
    exact = _exact_delta(epsilon)
    assert bound.lower <= exact <= bound.upper
    assert bound.upper - bound.lower <= 1e-4 * bound.upper
    assert bound.method == METHOD


@pytest.mark.parametrize("epsilon", [85.0, 99.0, 100.0, 101.0, 130.0])
def test_bracket_holds_but_is_loose_near_and_above_the_pure_epsilon(epsilon):
    # its tight twin: near Δ/b the middle atoms hold most of δ, the bracket says so
    bound = _conditioning().delta_bound(epsilon)
    exact = _exact_delta(epsilon)
    assert bound.lower <= exact <= bound.upper
    if epsilon < 101:
        assert bound.upper - bound.lower > 1e-4 * bound.upper


@pytest.mark.parametrize("epsilon", [10.0, 50.0, 80.0])
def test_the_accountant_uses_it_where_the_inversion_has_nothing(epsilon):
    # σ² = 400 is smooth: the inversion applies, but near its pole (δ close to P[L > ε])
    # its bracket is (0.84, 1) at ε = 10; the exact composition of the supports (common
    # step 1/40) is the independent reference
    accountant = PrivacyAccountant().add(DiscreteLaplace(LAPLACE_SCALE), LAPLACE_SHIFT)
    accountant.add(DiscreteGaussian(400), 10)
    assert accountant.methods == ("mgf_inversion", METHOD, "support_exact")
    bound = accountant.delta(epsilon)
    assert bound.upper - bound.lower <= 1e-4 * bound.upper
    reference_of, name = fft_composition(list(accountant.events), exact_only=True)
    assert name == "support_exact"
    reference = reference_of(epsilon)
    assert bound.lower <= reference.upper and reference.lower <= bound.upper
    # ε(δ) is still the inversion's, where it is tight
    result = accountant.epsilon(1e-10)
    assert result.method == "mgf_inversion"
    assert reference_of(result.upper).lower <= 1e-10 <= reference_of(result.lower).upper


def test_no_conditioning_for_laplaces_held_more_than_once():
    accountant = PrivacyAccountant().add(DiscreteLaplace(50), count=2)
    accountant.add(DiscreteGaussian(2500))
    from dp_pipeline.accounting.strategy import rest_summary

    assert laplace_conditionings(list(accountant.events), rest_summary) == []
    assert METHOD not in accountant.methods


@pytest.mark.parametrize("epsilon", [2.0, 2831.6330909175435])
def test_seed_128_without_fft_agrees_with_the_coarsened_fft(epsilon):
    """The random plan with seed 128 (a Laplace of shift 10,213, pure ε ≈ 3,112): at the
    search's first trial and at δ(2) the bracket closes the inversion's, and the coarsened
    lattice FFT (built here only as a reference) brackets the same δ."""
    accountant = random_release_plan(128)
    bound = accountant.delta(epsilon)
    assert bound.upper - bound.lower <= 1e-4 * bound.upper
    delta_of, name = fft_composition(list(accountant.events))
    assert name == "multivariate_fft_coarsened"
    reference = delta_of(epsilon)
    assert bound.lower <= reference.upper and reference.lower <= bound.upper


def test_search_decides_without_fft_where_a_bracket_already_decides(monkeypatch):
    """Seed 191: at one trial near the answer the inversion's bracket is (0.105, 0.108),
    3% wide but far above δ = 1e-10, and the Laplace bracket decides the trials further
    below; the ε search builds no FFT path, and its ends are certified by full evaluations
    (which, for δ(ε) itself, still build it)."""
    import dp_pipeline.accounting.strategy as strategy

    builds = []
    original = strategy.fft_composition

    def recorded(*args, **kwargs):
        builds.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(strategy, "fft_composition", recorded)
    result = random_release_plan(191).epsilon(1e-10)
    assert builds == []
    assert result.upper - result.lower <= 1e-7 * result.upper
    fresh = random_release_plan(191)
    assert fresh.delta(result.upper).upper <= 1e-10 < fresh.delta(result.lower).lower
    # the twin: δ at that trial is not decided for the δ query, which builds the FFT
    full = fresh.delta(2703.585431564028)
    assert builds and full.method == "multivariate_fft_coarsened"
    assert full.upper - full.lower < 0.002  # the inversion's alone: 0.0032
