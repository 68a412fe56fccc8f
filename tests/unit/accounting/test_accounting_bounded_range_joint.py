"""Selections at several ε by the joint adaptive recursion, against mpmath.

References computed here, none through the accountant or `bounded_range_joint`:
- an explicit adaptive strategy over runs at two ε: at every step it picks which ε runs
  next and its t (on a grid) from the loss so far, the last run by the closed-form curve
  of one ε-BR mechanism; its δ is a lower bound of the optimal adaptive composition, so
  every sound bound lies above it;
- DDR's optimal non-adaptive composition, each ε with one fixed t (a lower bound too).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from bounded_range_reference import delta_one, mpf_of, non_adaptive_two, p_of

from dp_pipeline import BaseTwoExponential, DiscreteGaussian
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.bounded_range import adaptive_blocks, bounded_range_epsilon_of
from dp_pipeline.accounting.bounded_range_adaptive import lattice_losses
from dp_pipeline.accounting.bounded_range_joint import (
    joint_lattice,
    joint_pair,
    joint_recursion,
)
from dp_pipeline.accounting.brackets import inversion_delta
from dp_pipeline.accounting.paths import fft_composition, inversion_of, pld_of

MPMATH_DPS = 20  # decimal digits: tests/conftest.py sets them for each test


@functools.cache
def _any_order(left: tuple, x, grid: int):
    """The δ(x) of the adaptive strategy choosing the next ε and its t (grid) greedily by
    the value of the rest: runs ``left`` ((ε, runs left) pairs)."""
    best = mp.mpf(0)
    for b, (epsilon, k) in enumerate(left):
        if not k:
            continue
        rest = tuple((e, r - (i == b)) for i, (e, r) in enumerate(left))
        eps = mpf_of(epsilon)
        if not any(r for _, r in rest):
            best = max(best, delta_one(eps, x))
            continue
        for j in range(grid + 1):
            t = eps * j / grid
            p = p_of(eps, t)
            value = p * _any_order(rest, x - eps + t, grid)
            best = max(best, value + (1 - p) * _any_order(rest, x + t, grid))
    return best


def _mixed(groups) -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    for epsilon, k in groups:
        accountant.add(BaseTwoExponential(Fraction(epsilon)), count=k)
    return accountant


def _groups(groups):
    """The (bounded-range ε, runs) pairs the accountant sees, increasing in ε."""
    exact = ((bounded_range_epsilon_of(BaseTwoExponential(Fraction(e))), k) for e, k in groups)
    return tuple(sorted(exact))


def test_two_epsilons_sit_within_two_percent_of_an_adaptive_strategy():
    # fails on the product of one block per ε, 4-20% above the best interleaved strategy
    groups = (("1/2", 2), ("1/5", 2))
    accountant = _mixed(groups)
    left = _groups(groups)
    for x in (0.3, 0.6):
        reference = _any_order(left, mp.mpf(x), 10)
        bound = accountant.delta(x).upper
        assert reference <= bound <= reference * 1.02
        non_adaptive = non_adaptive_two(left, mp.mpf(x), 24)
        assert non_adaptive <= bound


# ε(1e-6) with one block per ε (the product of the blocks' pairs), docs/benchmarks.md
_ROWS = [
    ((("1/2", 3), ("1/5", 20)), 2.79),
    ((("1/2", 5), ("1/4", 5)), 2.7239),
    ((("1/10", 10), ("1/5", 10), ("3/10", 10)), 2.6959),
    ((("1/10", 2), ("1/8", 3), ("1/6", 2), ("1/4", 5)), 1.4122),
    ((("1/10", 5), ("1/8", 5), ("1/6", 5), ("1/4", 5)), 1.6788),
]


@pytest.mark.parametrize(("groups", "blocks"), _ROWS)
def test_the_joint_block_is_tighter_than_one_block_per_epsilon(groups, blocks):
    accountant = _mixed(groups)
    assert len(adaptive_blocks(accountant.events)) == 1
    assert accountant.epsilon(1e-6).upper < 0.995 * blocks


def test_the_joint_bound_lies_above_the_non_adaptive_optimum():
    groups = (("1/2", 3), ("1/5", 20))
    accountant = _mixed(groups)
    for x in (1.0, 2.0):
        assert non_adaptive_two(_groups(groups), mp.mpf(x), 16) <= accountant.delta(x).upper


@pytest.mark.parametrize("groups", [_ROWS[i][0] for i in (0, 1, 3)])
def test_the_joint_lattice_raises_each_epsilon_a_little(groups):
    exact = _groups(groups)
    step, cells = joint_lattice(exact)
    # each ε raised to its lattice multiple: never below it, by 0-1.2% here, 0.25% at
    # most weighted by k·ε² (about the relative raise of ε(δ) it costs)
    raised = weights = 0.0
    for (epsilon, k), n in zip(exact, cells, strict=True):
        assert epsilon <= n * step <= epsilon * Fraction(1015, 1000)
        raised += k * float(epsilon) ** 2 * float(n * step / epsilon - 1)
        weights += k * float(epsilon) ** 2
    assert raised <= 0.0025 * weights
    upper = joint_recursion(exact, step, cells)
    lower = joint_recursion(exact, step, cells, True)
    assert np.all(lower <= upper)
    # the charged steps against the recursion over lattice t (both at the raised ε;
    # 30 cells or more for the smallest ε here, at most 0.2-1.2% apart where δ >= 1e-6)
    live = lower > 1e-6
    assert np.all(upper[live] <= 1.02 * lower[live])


def test_the_joint_pair_dominates_the_recursion_at_every_point():
    exact = _groups((("1/2", 5), ("1/4", 5)))
    step, cells = joint_lattice(exact)
    upper = joint_recursion(exact, step, cells)
    for stride in (1, 4):
        offset, lattice_step, masses = joint_pair(exact, stride)
        losses = lattice_losses(offset, lattice_step, len(masses))
        assert losses[-1] >= sum(k * float(e) for e, k in exact)
        points = upper[::stride]
        profile = [float(np.sum(masses * np.maximum(0.0, -np.expm1(x - losses)))) for x in losses]
        assert np.all(np.asarray(profile) >= points * (1 - 1e-12))


def test_joint_blocks_take_every_path_alike():
    events = (
        _mixed((("1/2", 3), ("1/5", 4)))
        .add(DiscreteGaussian(Fraction(300)), sensitivity=[1, 1])
        .events
    )
    brackets = [fft_composition(events)[0], pld_of(events).delta]
    brackets.append(inversion_delta(inversion_of(events)))
    for x in (0.5, 1.0, 1.5):
        bounds = [delta_of(x) for delta_of in brackets]
        assert all(b.lower <= b.upper for b in bounds)
        assert max(b.upper for b in bounds) <= 1.08 * min(b.upper for b in bounds)


def test_selections_at_five_epsilons_keep_one_block_per_epsilon():
    groups = (("1/10", 1), ("1/8", 2), ("1/6", 2), ("1/4", 2), ("1/2", 2))
    blocks = adaptive_blocks(_mixed(groups).events)
    assert [block[0] for block in blocks] == [e for e, _ in _groups(groups)]
