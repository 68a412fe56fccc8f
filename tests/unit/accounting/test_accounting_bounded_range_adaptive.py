"""k selections by Dong, Durfee & Rogers' optimal adaptive composition, against mpmath.

References computed here, none through the accountant or `bounded_range_adaptive`:
- δ_1, the closed-form curve of one ε-BR mechanism (sup over t of the pair B_t);
- DDR's adaptive recursion δ_k(x) = sup_t p_t δ_{k-1}(x - ε + t) + (1 - p_t) δ_{k-1}(x + t)
  by brute force over a grid of t at every level (mpmath): the value of an explicit
  adaptive strategy, so every sound bound lies above it;
- an explicit adaptive strategy for two runs (t of the second chosen from the first
  output), its hockey-stick divergence summed over its four outcomes;
- DDR's optimal non-adaptive composition sup_t δ(B_t^{⊗k}) (below the adaptive one).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from bounded_range_reference import delta_one, mpf_of, non_adaptive_two, p_of

from dp_pipeline import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.bounded_range import (
    adaptive_blocks,
    block_pld,
    bounded_range_epsilon_of,
    bounded_range_lattice,
    bounded_range_pld,
)
from dp_pipeline.accounting.bounded_range_adaptive import (
    BLOCK_RUNS,
    MAX_RUNS,
    adaptive_delta_bounds,
    adaptive_pair,
)
from dp_pipeline.accounting.brackets import inversion_delta
from dp_pipeline.accounting.gaussian_split import gaussian_split
from dp_pipeline.accounting.lattice import lattice_loss
from dp_pipeline.accounting.paths import fft_composition, inversion_of, pld_of
from dp_pipeline.accounting.support_composition import support_loss
from dp_pipeline.accounting.zcdp import zcdp_to_delta

MPMATH_DPS = 30  # decimal digits: tests/conftest.py sets them for each test


def _adaptive(epsilon: Fraction, k: int, x, grid: int):
    """max over a grid of t of the recursion, at every level: an adaptive strategy's value."""
    eps, x = mpf_of(epsilon), mpf_of(x)
    if k == 1:
        return delta_one(eps, x)
    best = mp.mpf(0)
    for j in range(grid + 1):
        t = eps * j / grid
        p = p_of(eps, t)
        high = _adaptive(epsilon, k - 1, x - eps + t, grid)
        best = max(best, p * high + (1 - p) * _adaptive(epsilon, k - 1, x + t, grid))
    return best


def _non_adaptive(eps, k: int, x, grid: int = 400):
    eps, x = mpf_of(eps), mpf_of(x)
    best = mp.mpf(0)
    for j in range(grid + 1):
        t = eps * j / grid
        p = p_of(eps, t)
        total = mp.fsum(
            mp.binomial(k, i)
            * p ** (k - i)
            * (1 - p) ** i
            * (1 - mp.e ** (x - (k - i) * eps + k * t))
            for i in range(k + 1)
            if (k - i) * eps - k * t > x
        )
        best = max(best, total)
    return best


def _selections(epsilon: str, k: int) -> PrivacyAccountant:
    return PrivacyAccountant().add(BaseTwoExponential(Fraction(epsilon)), count=k)


def _br(epsilon: str) -> Fraction:
    """The bounded-range ε the mechanism states (its base-2 rounding of ``epsilon``)."""
    return bounded_range_epsilon_of(BaseTwoExponential(Fraction(epsilon)))


# ----------------------------------------------------------------- against mpmath


@pytest.mark.parametrize(("k", "grid"), [(2, 400), (3, 60)])
def test_k_selections_sit_just_above_the_adaptive_recursion_by_brute_force(k, grid):
    eps = _br("1/2")
    accountant = _selections("1/2", k)
    for x in (0.0, 0.5, 1.0):
        reference = _adaptive(eps, k, x, grid)
        bound = accountant.delta(x)
        assert reference <= bound.upper
        assert bound.upper <= reference * (1 + 3e-3)


def test_an_explicit_adaptive_strategy_exceeds_the_non_adaptive_optimum_and_is_bounded():
    # two runs at ε = 1/2: the first B_{t1}; the second B_{t2} with t2 read from the
    # first output; its hockey-stick divergence at e^0 beats every non-adaptive pair of
    # runs by ~5%: a bound built on non-adaptive composition would be unsound
    eps, x = mpf_of(_br("1/2")), mp.mpf(0)
    best = mp.mpf(0)
    for i in range(101):
        t1 = eps * i / 100
        p1 = p_of(eps, t1)
        # after loss l1 the best second run reaches δ_1(x - l1): pick its t
        value = mp.mpf(0)
        for mass, loss in ((p1, eps - t1), (1 - p1, -t1)):
            rest = x - loss
            t2 = min(max((eps - rest) / 2, 0), eps)  # e^{2t} = e^{ε - x}
            p2 = p_of(eps, t2)
            for mass2, loss2 in ((p2, eps - t2), (1 - p2, -t2)):
                value += mass * mass2 * max(0, 1 - mp.e ** (rest - loss2))
        best = max(best, value)
    non_adaptive = _non_adaptive(eps, 2, x)
    assert best > non_adaptive * 1.05
    assert best <= _selections("1/2", 2).delta(0.0).upper <= best * (1 + 1e-3)


def test_two_selections_after_a_discrete_gaussian_against_brute_force():
    # the runs may read the Gaussian's output: Σ_y P[y] δ_2(x - ℓ_y) is reached
    sigma2, eps = 4, _br("1/2")
    accountant = _selections("1/2", 2).add(DiscreteGaussian(Fraction(sigma2)))
    limit = 16  # the weights beyond are below e^-32; dropping them lowers the reference
    weights = {y: mp.e ** (-mp.mpf(y * y) / (2 * sigma2)) for y in range(-limit, limit + 1)}
    normalizer = mp.fsum(weights.values())
    for x in (0.3, 0.9):
        reference = mp.fsum(
            w / normalizer * _adaptive(eps, 2, x - mp.mpf(1 + 2 * y) / (2 * sigma2), 80)
            for y, w in weights.items()
        )
        bound = accountant.delta(x)
        assert reference <= bound.upper <= reference * (1 + 3e-3)


@pytest.mark.parametrize("k", [2, 5, 10])
def test_k_selections_lie_above_the_non_adaptive_optimum_and_within_ten_percent(k):
    accountant = _selections("1/2", k)
    for x in (0.0, 0.3 * math.sqrt(k) * 0.5, 0.6 * math.sqrt(k) * 0.5):
        reference = _non_adaptive(_br("1/2"), k, x, grid=200)
        bound = accountant.delta(x)
        assert reference <= bound.upper <= 1.1 * reference


@pytest.mark.parametrize("k", [20, 30])
def test_many_selections_are_within_five_percent_of_the_non_adaptive_optimum(k):
    # fails on the one-run pair composed k times (1.12-2.10x here) and on the zCDP cap
    accountant = _selections("1/2", k)
    for x in (0.3 * math.sqrt(k) * 0.5, 0.6 * math.sqrt(k) * 0.5, math.sqrt(k) * 0.5):
        reference = _non_adaptive(_br("1/2"), k, x, grid=150)
        bound = accountant.delta(x)
        assert reference <= bound.upper <= 1.05 * reference


def test_the_block_is_tighter_than_the_one_run_pair_composed():
    # the previous composition: the one-run dominating pair, k copies on the lattice FFT
    k, epsilon = 20, Fraction(1, 2)
    old = lattice_loss([bounded_range_lattice(epsilon, k)], 1e-14, max_size=1 << 20)
    new = _selections("1/2", k)
    for x in (1.0, 2.0, 3.0):
        assert new.delta(x).upper < 0.9 * old.delta_bound(x, "old").upper


# ----------------------------------------------------------------- the pair and the paths


def test_the_pair_dominates_the_recursion_between_its_points():
    epsilon, k = Fraction(1, 2), 4
    xs, lower, upper = adaptive_delta_bounds(epsilon, k)
    assert np.all(lower <= upper * (1 + 1e-12))
    assert np.all((upper <= lower * 1.01)[lower > 1e-7])
    for stride in (1, 8):
        offset, step, masses = adaptive_pair(epsilon, k, stride)
        assert math.fsum(masses) == pytest.approx(1.0, abs=1e-9)
        losses = np.array([float(offset + step * j) for j in range(len(masses))])
        for x in np.linspace(-2.1, 2.0, 37):
            above = losses > x
            pair = math.fsum((masses[above] * -np.expm1(x - losses[above])).tolist())
            i = int(np.searchsorted(xs, x))  # δ_k is decreasing: δ_k(x) <= upper[i-1]
            assert pair >= lower[min(i, len(lower) - 1)]  # lower[i] <= δ_k(x_i) <= δ_k(x)
            assert pair <= upper[max(i - 1, 0)] * 1.05 + 1e-15


def test_every_path_brackets_the_same_block_and_gaussians():
    events = (
        _selections("3/10", 6)
        .add(DiscreteGaussian(Fraction(200)), sensitivity=[1, 1, 1])
        .add(DiscreteGaussian(Fraction(9)), sensitivity=1)
        .events
    )
    brackets = [fft_composition(events)[0], pld_of(events).delta]
    brackets.append(inversion_delta(inversion_of(events)))
    for x in (0.5, 1.0, 2.0):
        bounds = [delta_of(x) for delta_of in brackets]
        assert max(b.lower for b in bounds) <= min(b.upper for b in bounds)
        assert max(b.upper for b in bounds) <= 1.01 * min(b.upper for b in bounds)


def test_every_selection_epsilon_forms_its_blocks():
    two = (
        PrivacyAccountant()
        .add(BaseTwoExponential(Fraction(1, 2)), count=3)
        .add(BaseTwoExponential(Fraction(1, 5)), count=20)
        .add(BaseTwoExponential(Fraction(1, 5)), count=1)
    )
    # two ε within the joint recursion's budget: one joint block of all their runs
    groups = ((_br("1/5"), 21), (_br("1/2"), 3))
    assert adaptive_blocks(two.events) == ((groups, 24, 1),)
    # beyond it (more than MAX_RUNS runs in all): each ε its own blocks
    apart = _mixed((("1/2", 3), ("1/5", MAX_RUNS)))
    assert adaptive_blocks(apart.events) == ((_br("1/5"), MAX_RUNS, 1), (_br("1/2"), 3, 1))
    assert adaptive_blocks(_selections("1/10", 1).events) == ((_br("1/10"), 1, 1),)
    many = _selections("1/10", 2 * MAX_RUNS + 3)
    assert adaptive_blocks(many.events) == ((_br("1/10"), BLOCK_RUNS, 4), (_br("1/10"), 3, 1))
    assert adaptive_blocks(_selections("1/10", MAX_RUNS).events) == ((_br("1/10"), MAX_RUNS, 1),)
    assert many.epsilon(1e-6).upper > _selections("1/10", MAX_RUNS).epsilon(1e-6).upper


# ----------------------------------------------------------------- several ε, many runs


@functools.cache
def _adaptive_sequence(epsilons: tuple, x, grid: int):
    """DDR's recursion for runs at the given ε in this order, brute force over a grid of t
    at every level: the value of an explicit adaptive strategy (a lower bound)."""
    eps, x = mpf_of(epsilons[0]), mpf_of(x)
    if len(epsilons) == 1:
        return delta_one(eps, x)
    best = mp.mpf(0)
    for j in range(grid + 1):
        t = eps * j / grid
        p = p_of(eps, t)
        high = _adaptive_sequence(epsilons[1:], x - eps + t, grid)
        best = max(best, p * high + (1 - p) * _adaptive_sequence(epsilons[1:], x + t, grid))
    return best


def _randomized_response(groups, x):
    """δ(x) of randomized response at each pure ε, composed exactly (binomial sums)."""
    (e1, k1), (e2, k2) = ((mpf_of(e), k) for e, k in groups)
    x = mpf_of(x)
    total = mp.mpf(0)
    h1, h2 = 1 / (1 + mp.e ** (-e1)), 1 / (1 + mp.e ** (-e2))
    for i in range(k1 + 1):
        for j in range(k2 + 1):
            loss = (k1 - 2 * i) * e1 + (k2 - 2 * j) * e2
            if loss > x:
                mass = mp.binomial(k1, i) * h1 ** (k1 - i) * (1 - h1) ** i
                mass *= mp.binomial(k2, j) * h2 ** (k2 - j) * (1 - h2) ** j
                total += mass * (1 - mp.e ** (x - loss))
    return total


def _mixed(groups) -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    for epsilon, k in groups:
        accountant.add(BaseTwoExponential(Fraction(epsilon)), count=k)
    return accountant


@pytest.mark.parametrize("groups", [(("1/2", 3), ("1/5", 4)), (("3/10", 5), ("1/10", 6))])
def test_selections_at_two_epsilons_lie_between_brute_force_and_the_old_bounds(groups):
    # each ε its own block: fails on the accountant where only the heaviest ε formed one
    # (the other ε's runs by their one-run pair, 2-4% above this bound in δ here)
    accountant = _mixed(groups)
    exact = tuple((_br(e), k) for e, k in groups)
    total = sum(k * float(e) for e, k in exact)
    rho = sum(k * float(e) ** 2 / 8 for e, k in exact)
    # the old accountant's compositions, on a fine grid PLD (the lattices share no step)
    step = 1e-4
    one_run = {e: bounded_range_pld(e, step).self_compose(k) for e, k in exact}
    heaviest = max(exact, key=lambda g: g[1] * g[0] ** 2)
    old = one_run[exact[0][0]].compose(one_run[exact[1][0]])
    rest = [one_run[e] for e, k in exact if (e, k) != heaviest]
    partial = block_pld(*heaviest, step).compose(rest[0])
    for fraction in (0.15, 0.3, 0.45):
        x = fraction * total
        reference = non_adaptive_two(exact, x, grid=24)
        bound = accountant.delta(x)
        # 1.10-1.45x: the adaptive optimum lies above this reference, and composing the
        # blocks' curves is looser than the joint adaptive optimum (the test below)
        assert reference <= bound.upper <= 1.5 * reference
        assert bound.upper <= min(_randomized_response(exact, x), zcdp_to_delta(rho, x))
        assert bound.upper < old.delta(x).lower
        # the heaviest ε's runs alone as a block, the others by their one-run pair
        assert bound.upper < partial.delta(x).lower


def test_interleaved_runs_at_two_epsilons_are_bounded_by_the_blocks():
    # an adaptive strategy over runs ε1, ε2, ε1, ε2 in that order (t of each read from
    # the losses so far): the product of the two blocks bounds every such order, 4-20%
    # above the best strategy found in δ (the price of composing the blocks' curves)
    e1, e2 = _br("1/2"), _br("1/5")
    accountant = _mixed((("1/2", 2), ("1/5", 2)))
    for x in (0.0, 0.3, 0.6):
        for order in ((e1, e2, e1, e2), (e2, e2, e1, e1)):
            reference = _adaptive_sequence(order, x, 16)
            assert reference <= accountant.delta(x).upper <= reference * 1.25


@pytest.mark.parametrize("k", [MAX_RUNS + 1, 300])
def test_more_runs_than_a_block_compose_as_blocks(k):
    # fails on the accountant that kept the one-run pair for more than 128 runs: the
    # blocks cut ε(1e-6) by ~6% here
    epsilon = _br("1/10")
    accountant = _selections("1/10", k)
    rho = k * float(epsilon) ** 2 / 8
    old = lattice_loss([bounded_range_lattice(epsilon, k)], 1e-14, max_size=1 << 22)
    for x in (0.25 * math.sqrt(k) * 0.1, 0.5 * math.sqrt(k) * 0.1, math.sqrt(k) * 0.1):
        reference = _non_adaptive(epsilon, k, x, grid=60)
        bound = accountant.delta(x)
        assert reference <= bound.upper <= 1.3 * reference
        cap = min(old.delta_bound(x, "one-run pair").upper, zcdp_to_delta(rho, x))
        assert bound.upper < 0.9 * cap


def test_blocks_take_every_path_alike():
    # each path composes its own dominating measure of the blocks (the MGF inversion a
    # strided one, 1.5-7% higher in δ here), so each bracket holds its own measure's δ
    events = (
        _mixed((("1/2", 3), ("1/5", 4), ("1/10", MAX_RUNS + 2)))
        .add(DiscreteGaussian(Fraction(300)), sensitivity=[1, 1])
        .events
    )
    brackets = [fft_composition(events)[0], pld_of(events).delta]
    brackets.append(inversion_delta(inversion_of(events)))
    for x in (1.0, 2.0, 3.0):
        bounds = [delta_of(x) for delta_of in brackets]
        assert all(b.lower <= b.upper for b in bounds)
        assert max(b.upper for b in bounds) <= 1.08 * min(b.upper for b in bounds)


def test_bad_block_arguments_are_named():
    with pytest.raises(ValueError, match=r"count must be an integer in 1\.\.128"):
        adaptive_pair(Fraction(1, 2), 0)
    with pytest.raises(ValueError, match="epsilon must be a positive Fraction"):
        adaptive_pair(0.5, 3)
    with pytest.raises(ValueError, match="stride must be an integer >= 1 dividing 512"):
        adaptive_pair(Fraction(1, 2), 3, 3)


# ----------------------------------------------------------------- the exact support paths


def _with_randomized_response(epsilon, k: int, scale, n: int, x, grid: int = 200):
    """max over a grid of t of δ(B_t^{⊗k} ⊗ L^{⊗n})(x), L a discrete Laplace of ``scale``
    with shift 1 (its loss ±1/scale, P[+] = 1/(1 + e^{-1/scale})): a lower bound."""
    eps, x, r = mpf_of(epsilon), mpf_of(x), 1 / mpf_of(scale)
    high = 1 / (1 + mp.e ** (-r))
    best = mp.mpf(0)
    for j in range(grid + 1):
        t = eps * j / grid
        p = p_of(eps, t)
        total = mp.mpf(0)
        for i in range(k + 1):
            for m in range(n + 1):
                loss = (k - i) * eps - k * t + (n - 2 * m) * r
                if loss > x:
                    mass = mp.binomial(k, i) * p ** (k - i) * (1 - p) ** i
                    mass *= mp.binomial(n, m) * high ** (n - m) * (1 - high) ** m
                    total += mass * (1 - mp.e ** (x - loss))
        best = max(best, total)
    return best


def test_selections_beside_laplaces_take_the_exact_support_composition():
    # fails on the support composition that refused every selection (its randomized
    # response pair has float losses): the grid PLD's δ at 1e-11 was 7% higher here
    accountant = _selections("1/2", 5).add(DiscreteLaplace(Fraction(4)), sensitivity=1, count=2)
    loss = support_loss(accountant.events)
    assert loss is not None
    for x, ratio in ((1.0, 1.08), (2.0, 1.07), (2.5, 1.002), (2.8, 1.004), (2.95, 1.09)):
        reference = _with_randomized_response(_br("1/2"), 5, 4, 2, x)
        bound = accountant.delta(x)
        assert bound.method == "support_exact"
        assert reference <= bound.upper <= ratio * reference
        # the lower end: the same plan with each run as the ε-BR pair B_{ε/2}, one of the
        # reference's t (`selection_lower`), so at most the reference
        assert bound.lower <= reference * (1 + 1e-12)


def test_selections_at_a_lattice_rounded_up_stay_above_brute_force():
    # the selection's dyadic ε and the Gaussian's 1/9 share no practical lattice: the
    # selection's offset and step are rounded up (its losses only move up)
    accountant = _selections("1/2", 2).add(DiscreteGaussian(Fraction(9)), sensitivity=1)
    assert support_loss(accountant.events) is not None
    weights = {y: mp.e ** (-mp.mpf(y * y) / 18) for y in range(-16, 17)}
    normalizer = mp.fsum(weights.values())
    for x in (0.3, 0.9, 1.5):
        reference = mp.fsum(
            w / normalizer * _adaptive(_br("1/2"), 2, x - mp.mpf(1 + 2 * y) / 18, 80)
            for y, w in weights.items()
        )
        bound = accountant.delta(x)
        assert bound.method == "support_exact"
        assert reference <= bound.upper <= reference * (1 + 3e-3)


def test_the_gaussian_split_sums_a_wide_gaussian_beside_selections():
    # fails on the split that refused every selection. The MGF inversion's bracket is
    # 16% wide at x = 1 (its integrand returns at the selections' and the Laplaces'
    # lattice periods), and it composes a strided block (2.4% higher at x = 2.8)
    accountant = (
        _selections("1/2", 5)
        .add(DiscreteLaplace(Fraction(4)), sensitivity=1, count=2)
        .add(DiscreteGaussian(Fraction(10**6)), sensitivity=1)
    )
    split = gaussian_split(accountant.events)
    assert split is not None
    inversion = inversion_delta(inversion_of(accountant.events))
    for x in (1.0, 2.0, 2.8):
        exact, other = split.delta_bound(x), inversion(x)
        assert exact.upper <= exact.lower * (1 + 1e-9)
        assert exact.upper <= other.upper
        # dropping the Gaussian only lowers δ: the reference without it is below
        assert _with_randomized_response(_br("1/2"), 5, 4, 2, x) <= exact.upper
        assert accountant.delta(x).upper <= other.upper
    assert split.delta_bound(1.0).upper < 0.95 * inversion(1.0).upper
    assert split.delta_bound(2.8).upper < 0.98 * inversion(2.8).upper
