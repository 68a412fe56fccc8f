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

from dp_pipeline import BaseTwoExponential, DiscreteGaussian
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.bounded_range import (
    adaptive_block,
    bounded_range_epsilon_of,
    bounded_range_lattice,
)
from dp_pipeline.accounting.bounded_range_adaptive import (
    MAX_RUNS,
    adaptive_delta_bounds,
    adaptive_pair,
)
from dp_pipeline.accounting.brackets import inversion_delta
from dp_pipeline.accounting.lattice import lattice_loss
from dp_pipeline.accounting.paths import fft_composition, inversion_of, pld_of

mp.mp.dps = 30


def _p(eps, t):
    """P-mass of the loss ε - t in B_t (the other loss is -t)."""
    return (mp.e**eps - mp.e ** (eps - t)) / mp.expm1(eps)


def _delta_one(eps, x):
    if x >= eps:
        return mp.mpf(0)
    if x <= -eps:
        return -mp.expm1(x)
    return (mp.e ** (eps / 2) - mp.e ** (x / 2)) ** 2 / mp.expm1(eps)


def _mpf(value):
    if isinstance(value, Fraction):
        return mp.mpf(value.numerator) / value.denominator
    return mp.mpf(value)


@functools.cache
def _adaptive(epsilon: Fraction, k: int, x, grid: int):
    """max over a grid of t of the recursion, at every level: an adaptive strategy's value."""
    eps, x = _mpf(epsilon), _mpf(x)
    if k == 1:
        return _delta_one(eps, x)
    best = mp.mpf(0)
    for j in range(grid + 1):
        t = eps * j / grid
        p = _p(eps, t)
        high = _adaptive(epsilon, k - 1, x - eps + t, grid)
        best = max(best, p * high + (1 - p) * _adaptive(epsilon, k - 1, x + t, grid))
    return best


def _non_adaptive(eps, k: int, x, grid: int = 400):
    eps, x = _mpf(eps), _mpf(x)
    best = mp.mpf(0)
    for j in range(grid + 1):
        t = eps * j / grid
        p = _p(eps, t)
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
    eps, x = _mpf(_br("1/2")), mp.mpf(0)
    best = mp.mpf(0)
    for i in range(101):
        t1 = eps * i / 100
        p1 = _p(eps, t1)
        # after loss l1 the best second run reaches δ_1(x - l1): pick its t
        value = mp.mpf(0)
        for mass, loss in ((p1, eps - t1), (1 - p1, -t1)):
            rest = x - loss
            t2 = min(max((eps - rest) / 2, 0), eps)  # e^{2t} = e^{ε - x}
            p2 = _p(eps, t2)
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


def test_the_block_is_the_heaviest_selection_and_has_a_size_limit():
    two = (
        PrivacyAccountant()
        .add(BaseTwoExponential(Fraction(1, 2)), count=3)
        .add(BaseTwoExponential(Fraction(1, 5)), count=20)
    )
    assert adaptive_block(two.events) == (_br("1/5"), 20)
    # the ε = 1/2 runs keep the one-run pair: still above their own adaptive optimum
    assert two.delta(1.0).upper >= _selections("1/2", 3).delta(1.0).upper
    assert adaptive_block(_selections("1/10", 1).events) is None
    many = _selections("1/10", MAX_RUNS + 1)
    assert adaptive_block(many.events) is None
    assert many.epsilon(1e-6).upper > _selections("1/10", MAX_RUNS).epsilon(1e-6).upper


def test_bad_block_arguments_are_named():
    with pytest.raises(ValueError, match=r"count must be an integer in 1\.\.128"):
        adaptive_pair(Fraction(1, 2), 0)
    with pytest.raises(ValueError, match="epsilon must be a positive Fraction"):
        adaptive_pair(0.5, 3)
    with pytest.raises(ValueError, match="stride must be an integer >= 1 dividing 512"):
        adaptive_pair(Fraction(1, 2), 3, 3)
