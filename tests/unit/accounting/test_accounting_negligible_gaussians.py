"""Discrete Gaussians of negligible ρ beside randomized responses and discrete Laplaces.

Reference: `gaussian_tail_reference.wide_gaussian_delta`, an mpmath interval around the
exact δ of a wide discrete Gaussian composed with randomized responses (a discrete
Laplace of shift 1 is the randomized response at 1/b), Euler–Maclaurin tails with their
remainder bounds; none of it goes through the accountant.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import pytest

from dp_pipeline import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.events import PureDP
from tests.support.gaussian_tail_reference import wide_gaussian_delta

# (σ², the discrete Laplace's scale, the pure-DP ε): σ² = 10^16 is the plan of the audit
# (68x loose at δ ≈ 2e-9, and δ <= 1 answered for ε below the Gaussians' shift)
_PLANS = [
    (10**16, 10, Fraction(1, 3)),
    (4 * 10**15, 3, Fraction(1, 5)),
]


def _plan(sigma2: int, scale: int, pure: Fraction) -> PrivacyAccountant:
    accountant = PrivacyAccountant().add(DiscreteGaussian(sigma2))
    return accountant.add(DiscreteLaplace(scale)).add(PureDP(pure))


def _epsilons(sigma2: int, scale: int, pure: Fraction) -> list[float]:
    # the loss's top atom is 1/b + ε₀; the Gaussian's loss has standard deviation 1/σ:
    # ε from 0 (and inside the Gaussians' shift) up to 9 standard deviations past the top
    top = Fraction(1, scale) + pure
    spread = 1 / math.sqrt(sigma2)
    near = [float(top + Fraction(z * spread)) for z in (-3, -1, 0, 0.5, 1, 2, 3, 4, 5, 6, 7, 9)]
    return [0.0, 1e-12, 1e-9, 1e-7, 0.05, float(Fraction(1, scale)), *near]


@pytest.mark.parametrize("sigma2,scale,pure", _PLANS)
def test_delta_is_within_one_percent_of_the_exact_value(sigma2, scale, pure):
    accountant = _plan(sigma2, scale, pure)
    for eps in _epsilons(sigma2, scale, pure):
        low, high = wide_gaussian_delta(sigma2, [Fraction(1, scale), pure], eps)
        bound = accountant.delta(eps)
        assert mp.mpf(bound.lower) <= high and low <= mp.mpf(bound.upper), (eps, bound, low)
        if low > 1e-300:
            # before: δ <= 1 at ε = 0 and 1e-9, and up to 68x the exact δ near 2e-9
            assert bound.upper <= low * 1.01, (eps, bound.upper, mp.nstr(low, 8))
            assert bound.lower >= high * 0.99, (eps, bound.lower, mp.nstr(high, 8))


@pytest.mark.parametrize("sigma2,scale,pure", _PLANS)
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 2e-9, 1e-10, 1e-15, 1e-40])
def test_epsilon_brackets_the_exact_value(sigma2, scale, pure, delta):
    accountant = _plan(sigma2, scale, pure)
    bound = accountant.epsilon(delta)
    at_upper = wide_gaussian_delta(sigma2, [Fraction(1, scale), pure], bound.upper)
    at_lower = wide_gaussian_delta(sigma2, [Fraction(1, scale), pure], bound.lower)
    assert at_upper[0] <= delta, f"upper end {bound.upper!r}: exact δ {mp.nstr(at_upper[0], 6)}"
    assert at_lower[1] >= delta, f"lower end {bound.lower!r}: exact δ {mp.nstr(at_lower[1], 6)}"
    # the bracket within 1e-7 of ε (before: 9.5e-7 at δ = 2e-9, from the shifted rest)
    assert bound.gap <= 1e-7 * bound.upper, bound


def test_a_plan_the_exact_composition_does_not_fit_keeps_the_shifted_bound():
    # two negligible Gaussians: no exact composition, the shifted rest and, below the
    # shift, basic composition (before: δ <= 1 there)
    accountant = _plan(10**16, 10, Fraction(1, 3)).add(DiscreteGaussian(10**16))
    bound = accountant.delta(1e-9)
    assert "basic composition" in bound.method
    assert 0.165 < bound.lower <= bound.upper < 0.1652


# ------------------------------------------- a negligible Gaussian beside another Gaussian


def _wide_tail(sigma2: int, k: int) -> mp.mpf:
    """P(Y >= k) for Y ~ N_Z(0, σ²), σ² >= 10^12: the integral plus half the first term
    (Euler–Maclaurin; the next term is below f(k)·|k|/σ² / 12, and the normaliser is
    sqrt(2πσ²) to within e^{-2π²σ²} by Poisson summation), relative error < 1e-11."""
    s = mp.mpf(sigma2)
    integral = mp.sqrt(s * mp.pi / 2) * mp.erfc(mp.mpf(k) / mp.sqrt(2 * s))
    return (integral + mp.exp(-(mp.mpf(k) ** 2) / (2 * s)) / 2) / mp.sqrt(2 * mp.pi * s)


def _two_gaussians_delta(wide: int, narrow: int, eps: float) -> mp.mpf:
    """δ(ε) of N_Z(0, wide) ⊗ N_Z(0, narrow), shift 1 each: over the narrow one's y (loss
    (1 + 2y)/(2σ²), direct sums), the wide one's δ at ε minus that loss,
    δ_G(x) = P(Y >= k) - e^x·P(Y >= k + 1) with k the first y with (1 + 2y)/(2σ²) > x."""
    s = mp.mpf(narrow)
    reach = int(40 * math.sqrt(narrow)) + 2
    weights = [mp.exp(-mp.mpf(y * y) / (2 * s)) for y in range(-reach, reach + 1)]
    normaliser = mp.fsum(weights)
    total = mp.mpf(0)
    for y, weight in zip(range(-reach, reach + 1), weights, strict=True):
        x = Fraction(eps) - Fraction(1 + 2 * y, 2 * narrow)
        k = math.floor(wide * x - Fraction(1, 2)) + 1
        gaussian = _wide_tail(wide, k) - mp.exp(mp.mpf(x)) * _wide_tail(wide, k + 1)
        total += weight * gaussian
    return total / normaliser


def test_a_negligible_gaussian_beside_a_gaussian_is_exact():
    # before: DiscreteGaussian(1e20) + DiscreteGaussian(100) went to the MGF inversion,
    # 37% loose at δ = 7e-31 (δ(1.0) bracket [8.3e-26, 1.6e-25] around 1.28e-25)
    accountant = PrivacyAccountant().add(DiscreteGaussian(10**20)).add(DiscreteGaussian(100))
    for eps in (0.0, 0.2, 0.5, 1.0, 1.2, 2.0):
        exact = _two_gaussians_delta(10**20, 100, eps)
        bound = accountant.delta(eps)
        assert exact * (1 - 1e-9) <= bound.upper <= exact * 1.01, (eps, bound, exact)
        assert exact * 0.99 <= bound.lower <= exact * (1 + 1e-9), (eps, bound, exact)
    for delta in (1e-3, 1e-6, 1e-10, 7e-31):
        bound = accountant.epsilon(delta)
        assert _two_gaussians_delta(10**20, 100, bound.upper) <= delta * (1 + 1e-9), bound
        assert _two_gaussians_delta(10**20, 100, bound.lower) >= delta * (1 - 1e-9), bound
        assert _two_gaussians_delta(10**20, 100, bound.upper) >= delta * 0.99, bound


def test_beside_a_gaussian_without_an_exact_composition_the_row_steps_aside():
    # the rest (σ² = 10^6) has no finite support here: the shifted bound would lose the
    # inversion's own refinements, so the row says why it is skipped
    accountant = PrivacyAccountant().add(DiscreteGaussian(10**20)).add(DiscreteGaussian(10**6))
    reasons = dict(accountant.explain())
    assert (
        reasons["negligible gaussians"] == "the other discrete Gaussians leave no exact composition"
    )
    assert accountant.method == "mgf_inversion"
    exact = PrivacyAccountant().add(DiscreteGaussian(10**20)).add(DiscreteGaussian(100))
    assert exact.explain()[-1] == ("support_exact + negligible gaussian, composed exactly", "used")
    assert exact.method == "support_exact + negligible gaussian, composed exactly"
