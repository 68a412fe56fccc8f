"""The accountant's fallback paths: rounded supports, negligible Gaussians, capped grids.

Each is checked against an independent mpmath reference at an extreme (support over the
inversion's limit, σ² = 10^30 beside a Laplace, grids that cannot fit in memory): the
upper bound must be >= the exact δ, the lower bound <= it, the method named truthfully,
and no path may raise MemoryError.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import mpmath
import pytest

from dp_pipeline.accounting import PrivacyAccountant, PrivacyLossDistribution, zcdp_to_delta
from dp_pipeline.accounting.discrete_laplace import discrete_laplace_loss_pmf
from dp_pipeline.accounting.inversion import InversionComposition, SupportGroup, smooth_gaussian
from dp_pipeline.accounting.paths import inversion_of, pld_of
from dp_pipeline.accounting.pld import GridTooLargeError
from dp_pipeline.accounting.rounded_support import RoundedComposition, rounded_group
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace

MPMATH_DPS = 40  # decimal digits: tests/conftest.py sets them for each test


def _laplace_masses(scale: int, shift: int, top: int):
    """mpmath (loss, P-mass) of Lap_Z(b) with shift Δ for the ``top`` largest losses, and
    the P-mass of the rest (loss (2K - Δ)/b, K = Δ - clip(y, 0, Δ))."""
    q = mpmath.exp(-mpmath.mpf(1) / scale)
    pairs = [(mpmath.mpf(shift) / scale, 1 / (1 + q))]
    for y in range(1, top):
        pairs.append((mpmath.mpf(shift - 2 * y) / scale, (1 - q) / (1 + q) * q**y))
    rest = 1 - sum(mass for _, mass in pairs)
    return pairs, rest


def _gaussian_masses(sigma2: int, shift: int, reach: int):
    """mpmath (loss, P-mass) of N_Z(0, σ²) with shift μ, |y| <= reach (the rest < e^-100)."""
    weights = [mpmath.exp(-mpmath.mpf(y * y) / (2 * sigma2)) for y in range(-reach, reach + 1)]
    total = sum(weights)
    return [
        (mpmath.mpf(shift * shift + 2 * shift * y) / (2 * sigma2), w / total)
        for y, w in zip(range(-reach, reach + 1), weights, strict=True)
    ]


def _hockey(pairs_a, pairs_b, epsilon: float):
    """E[(1 - e^{ε - L_a - L_b})_+] over independent losses (direct double sum)."""
    total = mpmath.mpf(0)
    for loss_a, mass_a in pairs_a:
        for loss_b, mass_b in pairs_b:
            excess = loss_a + loss_b - epsilon
            if excess > 0:
                total += mass_a * mass_b * -mpmath.expm1(-excess)
    return total


def test_rounded_support_brackets_the_exact_delta():
    # Lap_Z(5) with Δ = 5000: 5001 loss values, over the 4096 the inversion sums at every node
    accountant = PrivacyAccountant().add(DiscreteLaplace(5), 5000).add(DiscreteGaussian(4000), [4])
    rounded = [d for c in inversion_of(accountant.events) for d in c]
    assert rounded and all(isinstance(d, RoundedComposition) for d in rounded)
    # the 30 largest Laplace losses (>= 988.4); the Gaussian loss is within ±0.7 for
    # |y| <= 700 (the mass beyond < e^-61), so the omitted pairs contribute < 1e-26
    laplace, _ = _laplace_masses(5, 5000, 30)
    gaussian = _gaussian_masses(4000, 4, 700)
    for epsilon in (1000.02, 1000.1, 1000.2):
        exact = _hockey(laplace, gaussian, epsilon)
        for direction in rounded:
            lower, upper = direction.delta_bounds(epsilon)
            assert lower <= exact * (1 + 1e-12) and upper >= exact * (1 - 1e-12) - 1e-26
            # the heaviest losses are kept exactly: the bracket stays within 0.5% where δ is
            assert upper - lower <= 5e-3 * upper, (epsilon, lower, upper, exact)
        bound = accountant.delta(epsilon)
        assert bound.lower <= exact * (1 + 1e-12) and bound.upper >= exact * (1 - 1e-12)


def test_rounded_group_moves_every_loss_the_stated_way():
    accountant = PrivacyAccountant().add(DiscreteLaplace(30), 9000).add(DiscreteGaussian(50))
    group = next(g for g in inversion_of(accountant.events)[0][0].up.groups)
    assert len(group.masses) <= 4096
    original = inversion_of(PrivacyAccountant().add(DiscreteLaplace(30), 9000).events)
    assert original == []  # no smooth Gaussian: the inversion does not apply alone
    values, masses = discrete_laplace_loss_pmf(Fraction(30), 9000)
    losses = (-9000 + 2.0 * values) / 30
    full = SupportGroup(masses=masses, losses=losses, count=1, loss_error=1e-12)
    up, down = rounded_group(full, True), rounded_group(full, False)
    gaussian = [smooth_gaussian(Fraction(50), 1, 1)]
    # first-order stochastic dominance: the up-rounded CDF is below the original, the
    # down-rounded above it, at every original loss
    for loss in losses[::97]:
        below = masses[losses <= loss].sum()
        assert up.masses[up.losses <= loss].sum() <= below * (1 + 1e-12) + 1e-300
        assert down.masses[down.losses <= loss].sum() >= below * (1 - 1e-12)
    exact = InversionComposition(gaussian, [full])
    rounded = RoundedComposition(
        InversionComposition(gaussian, [up]), InversionComposition(gaussian, [down])
    )
    for epsilon in (250.0, 300.0, 301.0):
        lower, upper = rounded.delta_bounds(epsilon)
        exact_lower, exact_upper = exact.delta_bounds(epsilon)
        assert lower <= exact_upper and exact_lower <= upper


def test_negligible_gaussians_are_bounded_by_basic_composition():
    # σ² = 10^30 beside a Laplace: ρ = 1.25e-29, ε moved by at most ~3e-13
    laplace_only = PrivacyAccountant().add(DiscreteLaplace(10), 3)
    accountant = PrivacyAccountant().add(DiscreteLaplace(10), 3).add(DiscreteGaussian(10**30), [5])
    assert "negligible" in accountant.method
    pairs, _ = _laplace_masses(10, 3, 3)
    pairs.append((-mpmath.mpf(3) / 10, 1 - sum(m for _, m in pairs)))
    for epsilon in (0.0, 0.1, 0.25):
        exact_laplace = sum(
            m * -mpmath.expm1(-(loss - epsilon)) for loss, m in pairs if loss > epsilon
        )
        bound = accountant.delta(epsilon)
        # the exact composition lies in [δ_L(ε), δ_L(ε - t) + δ_G(t)]
        assert bound.upper >= exact_laplace * (1 - 1e-15)
        shifted = sum(
            m * -mpmath.expm1(-(loss - epsilon + 1e-6)) for loss, m in pairs if loss > epsilon
        )
        assert bound.lower <= shifted
        assert "negligible" in bound.method or bound.method.startswith("zcdp")
        if epsilon > 0:
            assert bound.upper <= laplace_only.delta(epsilon - 1e-6).upper * (1 + 1e-9)


def test_grid_pld_refuses_what_cannot_fit_before_allocating():
    with pytest.raises(GridTooLargeError, match=r"σ² = 1e\+20.*grid points, over the limit"):
        PrivacyLossDistribution.from_discrete_gaussian(10**20)
    accountant = PrivacyAccountant().add(DiscreteGaussian(10**14)).add(DiscreteLaplace(3), 2)
    assert pld_of(accountant.events) is None


def test_nothing_fits_gives_the_labelled_zcdp_bound():
    # 40 rounded Laplace supports exceed the inversion's node budget, σ² = 10^12 the PLD's
    accountant = PrivacyAccountant()
    for j in range(40):
        accountant.add(DiscreteLaplace(1000 + j), 5000)
    accountant.add(DiscreteGaussian(10**12), 1)
    assert accountant.method == "zcdp"
    rho = float(accountant.rho())
    bound = accountant.delta(20.0)
    assert bound.lower == 0.0
    assert bound.upper == zcdp_to_delta(rho, 20.0)
    pure = float(sum(Fraction(5000, 1000 + j) for j in range(40)))
    beyond = accountant.delta(pure + 10)
    assert beyond.method.startswith("pure_dp + zcdp")
    assert beyond.upper == zcdp_to_delta(1 / (2 * 10**12), (pure + 10) - pure * (1 + 1e-12))


def _random_plan(seed: int) -> PrivacyAccountant:
    rng = random.Random(seed)
    accountant = PrivacyAccountant()
    for _ in range(rng.randint(1, 10)):
        kind = rng.choice(["gaussian"] * 3 + ["laplace", "exponential"])
        if kind == "gaussian":
            sigma2 = Fraction(10 ** rng.uniform(-4, 40)).limit_denominator(10**6)
            shifts = [max(1, round(10 ** rng.uniform(0, 6))) for _ in range(rng.randint(1, 3))]
            accountant.add(DiscreteGaussian(max(sigma2, Fraction(1, 10**4))), shifts)
        elif kind == "laplace":
            scale = Fraction(10 ** rng.uniform(-2, 8)).limit_denominator(1000)
            accountant.add(
                DiscreteLaplace(max(scale, Fraction(1, 100))), round(10 ** rng.uniform(0, 6))
            )
        else:
            accountant.add(
                BaseTwoExponential(Fraction(10 ** rng.uniform(-2, 0.3)).limit_denominator(1000))
            )
    return accountant


@pytest.mark.parametrize("seed", range(6))
def test_random_plans_answer_with_ordered_labelled_brackets(seed):
    accountant = _random_plan(seed)
    epsilon = accountant.epsilon(1e-10)
    assert 0 <= epsilon.lower <= epsilon.upper < math.inf
    assert epsilon.method
    for eps in (0.5, 2.0, epsilon.upper):
        bound = accountant.delta(eps)
        assert 0 <= bound.lower <= bound.upper <= 1
        assert bound.upper >= 5e-324 or bound.upper == 0
    assert accountant.delta(epsilon.upper).upper <= 1e-10
