"""Conditioning on a discrete Gaussian with a coarse loss lattice, against mpmath.

The reference sums the composed privacy loss exactly: every (y, rest outcome) pair of the
discrete Gaussian N_Z(0, σ²) with shift μ and of the other mechanisms' loss support, at
50 digits (prefix sums over the rest's sorted losses), independently of the accountant's
conditioning, caps, tail bounds and inversion. The discrete Gaussian is the one of the
random plan with seed 60 in bench/bench_accounting.py (σ² ≈ 605, μ = 70,368, Δ/σ ≈ 2,860).
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction

import mpmath
import pytest

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.discrete_gaussian import (
    discrete_gaussian_pmf_bounds,
    discrete_gaussian_tail_bounds,
)
from dp_pipeline.accounting.events import PureDP
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace

MPMATH_DPS = 50  # decimal digits: tests/conftest.py sets them for each test

SIGMA2 = Fraction(579961577, 958029)  # seed 60's coarse-lattice discrete Gaussian
SHIFT = 70368


def _mp(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


def _mp_gaussian(sigma2: Fraction, shift: int, reach: float = 60):
    """(probability, loss) pairs of N_Z(0, σ²) with shift μ, |y| <= 60σ (the rest < e^-1800)."""
    s2 = _mp(sigma2)
    limit = int(reach * math.sqrt(float(sigma2))) + 2
    weights = [mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) for y in range(-limit, limit + 1)]
    total = mpmath.fsum(weights)
    return [
        (w / total, (mpmath.mpf(shift * shift) + 2 * shift * y) / (2 * s2))
        for w, y in zip(weights, range(-limit, limit + 1), strict=True)
    ]


def _mp_pure(epsilon: Fraction):
    eps = _mp(epsilon)
    high = 1 / (1 + mpmath.exp(-eps))
    return [(high, eps), (1 - high, -eps)]


def _mp_laplace(scale: int):
    """Lap_Z(scale), shift 1: loss ±1/scale with P-mass P[X <= 0] and P[X >= 1]."""
    t = mpmath.exp(-mpmath.mpf(1) / scale)
    below = 1 / (1 + t)  # P[X <= 0] = 1/(1 + e^{-1/s}) for the two-sided geometric
    return [(below, mpmath.mpf(1) / scale), (1 - below, -mpmath.mpf(1) / scale)]


def _convolve(one, two):
    return [(p * q, a + b) for p, a in one for q, b in two]


def _mp_delta(rest, epsilon: float, sigma2: Fraction = SIGMA2, shift: int = SHIFT) -> mpmath.mpf:
    """δ(ε) = Σ_{y, j} p(y)·q_j·(1 - e^{ε - ℓ_y - r_j})_+ by prefix sums over the rest."""
    ordered = sorted(rest, key=lambda pair: pair[1])
    losses = [loss for _, loss in ordered]
    mass = [mpmath.mpf(0)] * (len(ordered) + 1)
    tilted = [mpmath.mpf(0)] * (len(ordered) + 1)
    for i in range(len(ordered) - 1, -1, -1):
        q, r = ordered[i]
        mass[i] = mass[i + 1] + q
        tilted[i] = tilted[i + 1] + q * mpmath.exp(-r)
    eps = mpmath.mpf(epsilon)
    total = mpmath.mpf(0)
    for p, loss in _mp_gaussian(sigma2, shift):
        t = eps - loss
        first = bisect.bisect_right(losses, t)  # rest outcomes with r_j > t
        total += p * (mass[first] - mpmath.exp(t) * tilted[first])
    return total


def _plan(rest) -> PrivacyAccountant:
    accountant = PrivacyAccountant().add(DiscreteGaussian(SIGMA2), [SHIFT])
    for mechanism, sensitivity in rest:
        accountant.add(mechanism, sensitivity)
    return accountant


def _loss(y: int) -> float:
    return float(Fraction(SHIFT * SHIFT + 2 * SHIFT * y, 2) / SIGMA2)


RESTS = {
    "pure_dp": ([(PureDP(Fraction(1, 10)), 1)], lambda: _mp_pure(Fraction(1, 10))),
    "laplace": ([(DiscreteLaplace(10), 1)], lambda: _mp_laplace(10)),
    "gaussian_and_pure": (
        [(DiscreteGaussian(50), [1]), (PureDP(Fraction(1, 4)), 1)],
        lambda: _convolve(_mp_gaussian(Fraction(50), 1), _mp_pure(Fraction(1, 4))),
    ),
}


@pytest.fixture(scope="module", params=sorted(RESTS))
def case(request):
    events, reference = RESTS[request.param]
    return request.param, _plan(events), reference()


# ε at the loss of lattice point y plus t: the rest decides the middle term when t is
# within a few units of 0 (both signs); t = 30 and -45 leave no y between the closed bounds
@pytest.mark.parametrize(
    "y, t",
    [
        (157, -0.3),
        (157, -0.02),
        (157, 0.0),
        (157, 0.05),
        (157, 0.7),
        (157, 30.0),
        (158, -45.0),
        (-10, 0.1),
        (600, 0.2),
        (40, -1.0),
    ],
)
def test_conditioning_brackets_the_exact_composition(case, y, t):
    name, accountant, rest = case
    assert accountant.method.startswith("lattice_conditioning")
    epsilon = max(0.0, _loss(y) + t)
    bound = accountant._composition()[0](epsilon)  # uncapped by the zCDP conversion
    exact = _mp_delta(rest, epsilon)
    assert bound.method.startswith("lattice_conditioning"), (name, bound)
    assert mpmath.mpf(bound.lower) <= exact <= mpmath.mpf(bound.upper), (name, bound, exact)
    assert bound.upper - bound.lower <= 1e-9 * bound.upper, (name, bound)


def test_conditioning_epsilon_brackets_the_exact_composition():
    accountant = _plan(RESTS["gaussian_and_pure"][0])
    rest = RESTS["gaussian_and_pure"][1]()
    bound = accountant.epsilon(1e-10)
    assert bound.method.startswith("lattice_conditioning")
    assert _mp_delta(rest, bound.upper) <= 1e-10
    assert _mp_delta(rest, bound.lower) > 1e-10
    assert bound.upper - bound.lower <= 1e-7 * bound.upper


def test_seed_60_plan_agrees_with_the_inversion_bracket():
    """The random plan with seed 60 (five mechanisms): the conditioning's bracket overlaps
    the direct MGF inversion's (independent code), and is at least as tight."""
    accountant = PrivacyAccountant()
    accountant.add(DiscreteGaussian(SIGMA2), [SHIFT])
    accountant.add(DiscreteGaussian(Fraction(5602494291994047, 131072)), [56816])
    accountant.add(BaseTwoExponential(Fraction(255, 749)))
    accountant.add(DiscreteGaussian(Fraction(7347250449828789, 512)), [6811])
    accountant.add(BaseTwoExponential(Fraction(37, 416)))
    assert accountant.method == "lattice_conditioning + mgf_inversion"
    assert accountant.methods[0] == "lattice_conditioning + mgf_inversion"
    for epsilon in (4107961.6, 4108011.4, 4108023.7, 4108053.3):
        ours = accountant._composition()[0](epsilon)
        direct = accountant._strategy().paths().delta_of(epsilon)
        assert ours.lower <= direct.upper and direct.lower <= ours.upper
        # the upper end at least as tight; the lower end comes from the plan with its
        # selections as ε-BR pairs (`selection_lower`), below the worst case
        assert ours.upper <= direct.upper
        assert ours.upper - ours.lower <= 0.05 * ours.upper


def test_conditioning_of_a_narrow_gaussian_with_a_huge_shift():
    # σ² ≈ 0.02, μ = 900,000: at ε = 2 the Theorem 7 tail starts at y ≈ -450,000, cut at -40σ
    sigma2, shift = Fraction(20585, 986774), 900_000
    accountant = PrivacyAccountant().add(DiscreteGaussian(sigma2), [shift])
    accountant.add(PureDP(Fraction(1, 10)))
    assert accountant.method.startswith("lattice_conditioning")
    rest = _mp_pure(Fraction(1, 10))
    centre = float(Fraction(shift * shift, 2) / sigma2)
    for epsilon in (2.0, centre - 0.05, centre + 0.05):
        bound = accountant._composition()[0](epsilon)
        exact = _mp_delta(rest, epsilon, sigma2, shift)
        assert mpmath.mpf(bound.lower) <= exact <= mpmath.mpf(bound.upper), (epsilon, bound)
        assert bound.upper - bound.lower <= 1e-9 * bound.upper


def test_no_conditioning_without_a_coarse_lattice():
    # step μ/σ² = 1/50: nothing to condition on
    accountant = PrivacyAccountant().add(DiscreteGaussian(50), [1]).add(PureDP(Fraction(1, 10)))
    assert not accountant.method.startswith("lattice_conditioning")
    # the step 116 is below T + t_hi of a rest with ρ = 20 (t_hi ≈ 260)
    accountant = PrivacyAccountant().add(DiscreteGaussian(SIGMA2), [SHIFT])
    accountant.add(DiscreteGaussian(40), [40])
    assert not accountant.method.startswith("lattice_conditioning")


def test_pmf_bounds_against_mpmath():
    for sigma2, y in [(SIGMA2, 157), (SIGMA2, -3), (Fraction(1, 3), 2), (Fraction(10**6), 7000)]:
        s2 = _mp(sigma2)
        limit = int(60 * math.sqrt(float(sigma2))) + 5
        total = mpmath.fsum(mpmath.exp(-mpmath.mpf(k * k) / (2 * s2)) for k in range(-limit, limit))
        exact = mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) / total
        lower, upper = discrete_gaussian_pmf_bounds(sigma2, y)
        assert mpmath.mpf(lower) <= exact <= mpmath.mpf(upper)
        assert upper - lower <= 1e-12 * upper


def test_tail_bounds_reject_a_first_index_at_or_below_epsilon():
    with pytest.raises(ValueError, match=r"needs L\(first\) > epsilon, got first = 2"):
        discrete_gaussian_tail_bounds(Fraction(4), 1, 1.0, 2)  # L(2) = 5/8 <= 1


def test_tail_bounds_reject_a_sum_too_long():
    with pytest.raises(ValueError, match="is too long to sum"):
        discrete_gaussian_tail_bounds(Fraction(10**14), 1, 0.0, 0)


def test_conditioning_with_several_lattice_points_between_its_closed_forms():
    """DG(4/25) with shift 13 (loss step 81.25) beside DG(6)@3 and pure ε = 1: the rest's
    t_hi is about 49, so two lattice points lie between the closed forms; each is summed
    from the rest's bracket (a symmetric rest: the lower ends add up)."""
    from dp_pipeline.accounting.conditioning import LatticeConditioning, conditioning_coordinate
    from dp_pipeline.accounting.events import PrivacyEvent
    from dp_pipeline.accounting.strategy import rest_summary

    sigma2, shift = Fraction(4, 25), 13
    events = [
        PrivacyEvent(DiscreteGaussian(sigma2), (shift,), 1),
        PrivacyEvent(DiscreteGaussian(6), (3,), 1),
        PrivacyEvent(PureDP(Fraction(1)), (1,), 1),
    ]
    assert conditioning_coordinate(events, rest_summary) is None  # one point: not enough
    chosen = conditioning_coordinate(events, rest_summary, 4)
    assert chosen is not None and chosen[3]  # the rest is symmetric
    conditioning = LatticeConditioning(*chosen)
    rest = _convolve(_mp_gaussian(Fraction(6), 3, 40), _mp_pure(Fraction(1)))
    loss = float(Fraction(shift * shift + 2 * shift * 4, 2) / sigma2)  # ℓ_4 = 853.125
    for t in (-60.0, -30.0, -2.0, 0.0, 0.5, 10.0, 35.0, 70.0):
        bound = conditioning.delta_bound(loss + t)
        exact = _mp_delta(rest, loss + t, sigma2, shift)
        assert mpmath.mpf(bound.lower) <= exact <= mpmath.mpf(bound.upper), (t, bound, exact)
        assert bound.upper - bound.lower <= 1e-6 * bound.upper, (t, bound)


def test_wide_seed_56_epsilon_at_1e_100_is_tight():
    """2xDG(89403/10)@18 + DG(307/50)@11 + PureDP(8) + DG(4/25)@13 + 2xDG(4031/2)@6: the MGF
    inversion alone bracketed ε(1e-100) in [1143.86, 1230.60] (its comb bound over the
    81.25-step lattice); intersected with the conditioning on DG(4/25) it is tight."""
    accountant = PrivacyAccountant()
    accountant.add(DiscreteGaussian(Fraction(89403, 10)), [18], 2)
    accountant.add(DiscreteGaussian(Fraction(307, 50)), [11])
    accountant.add(PureDP(Fraction(8)))
    accountant.add(DiscreteGaussian(Fraction(4, 25)), [13])
    accountant.add(DiscreteGaussian(Fraction(4031, 2)), [6], 2)
    for delta in (1e-30, 1e-100):
        bound = accountant.epsilon(delta)
        assert bound.upper - bound.lower <= 1e-6 * bound.upper, (delta, bound)
    bound = accountant.delta(1228.0)
    assert bound.method.startswith("lattice_conditioning")
    assert bound.upper - bound.lower <= 1e-3 * bound.upper, bound


def test_conditioning_with_an_asymmetric_rest_keeps_the_largest_middle_term():
    """A selection (bounded range) in the rest: its two directions differ, so the lower end
    keeps the largest middle term only; the bracket overlaps the MGF inversion's (direct,
    independent of the conditioning, loose over this lattice) and is narrower."""
    from dp_pipeline.accounting.brackets import inversion_delta
    from dp_pipeline.accounting.conditioning import LatticeConditioning, conditioning_coordinate
    from dp_pipeline.accounting.events import PrivacyEvent
    from dp_pipeline.accounting.paths import inversion_of
    from dp_pipeline.accounting.strategy import rest_summary

    events = [
        PrivacyEvent(DiscreteGaussian(Fraction(4, 25)), (13,), 1),
        PrivacyEvent(DiscreteGaussian(6), (3,), 1),
        PrivacyEvent(BaseTwoExponential(Fraction(1, 2)), (1,), 1),
        PrivacyEvent(DiscreteGaussian(37), (1,), 1),
    ]
    chosen = conditioning_coordinate(events, rest_summary, 4)
    assert chosen is not None and not chosen[3]
    conditioning = LatticeConditioning(*chosen)
    direct = inversion_delta(inversion_of(events))
    for epsilon in (450.0, 528.6, 560.0, 600.0, 620.0):  # ℓ_0 = 528.125, step 81.25
        ours, theirs = conditioning.delta_bound(epsilon), direct(epsilon)
        assert ours.lower <= theirs.upper and theirs.lower <= ours.upper, (epsilon, ours, theirs)
        assert ours.upper - ours.lower <= theirs.upper - theirs.lower
