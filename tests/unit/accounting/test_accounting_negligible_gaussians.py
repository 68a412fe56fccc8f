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
