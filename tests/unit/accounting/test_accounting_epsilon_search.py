"""ε(δ) search (`epsilon_search`): each end is certified by its own δ evaluation and lies
within the documented 1e-7 of the crossing that plain bisection finds on the same bounds."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.bounds import DeltaBound, ignoring_decide
from dp_pipeline.accounting.epsilon_search import epsilon_from_delta_function
from dp_pipeline.accounting.strategy import Built
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace

DELTA = 1e-10
RTOL = 1e-7  # the documented relative width of each end (module docstring)
WINDOW = 1e-5  # relative distance from the returned end within which bisection looks


def _one_gaussian():
    return PrivacyAccountant().add(DiscreteGaussian(Fraction(3154196919438483, 4096)), [26051])


def _capped_by_zcdp():
    # a tiny-σ² Gaussian with a huge shift: the zCDP cap gives the bound at the start
    accountant = PrivacyAccountant()
    accountant.add(DiscreteGaussian(Fraction(1046564546684843453818047382966763520)), [8167])
    accountant.add(DiscreteLaplace(Fraction(3747090928, 761)), 7010)
    accountant.add(DiscreteGaussian(Fraction(123286, 943043)), [29387])
    accountant.add(DiscreteGaussian(Fraction(21401944, 593471)), [4471, 1, 45])
    accountant.add(DiscreteGaussian(Fraction(21703415495572679542458438719111168)), [90822, 29410])
    return accountant


def _mixed():
    accountant = PrivacyAccountant()
    huge = Fraction(4725309678429783452771029113874243649536)
    accountant.add(DiscreteGaussian(huge), [2935, 13829])
    accountant.add(DiscreteGaussian(Fraction(3847767083064517, 512)), [37977, 1, 31])
    for epsilon in (Fraction(4, 363), Fraction(1325, 711), Fraction(50, 923), Fraction(56, 65)):
        accountant.add(BaseTwoExponential(epsilon))
    accountant.add(DiscreteGaussian(Fraction(258792953942797242723205120)), [2, 50803, 2])
    return accountant


def _large_rho():
    # random plan 0 of bench/bench_accounting.py: ρ ≈ 9e6, a staircase-like δ(ε) near 1e-10
    accountant = PrivacyAccountant()
    accountant.add(DiscreteLaplace(Fraction(61345, 382)), 36)
    accountant.add(DiscreteGaussian(Fraction(2100158276335495, 32)), [640914, 141])
    accountant.add(BaseTwoExponential(Fraction(7, 220)))
    accountant.add(DiscreteGaussian(Fraction(116253171, 825259)), [5131])
    huge = Fraction(1068649440221556942585475405700923392)
    accountant.add(DiscreteGaussian(huge), [72661, 258819, 73])
    accountant.add(DiscreteLaplace(Fraction(4254654674, 437)), 12703)
    accountant.add(DiscreteGaussian(Fraction(1052267, 390187)), [79, 6959])
    return accountant


def _coarse_lattice():
    # random plan 60: a discrete Gaussian with Δ/σ ≈ 2,860 (conditioned on, `conditioning`)
    accountant = PrivacyAccountant()
    accountant.add(DiscreteGaussian(Fraction(579961577, 958029)), [70368])
    accountant.add(DiscreteGaussian(Fraction(5602494291994047, 131072)), [56816])
    accountant.add(BaseTwoExponential(Fraction(255, 749)))
    accountant.add(DiscreteGaussian(Fraction(7347250449828789, 512)), [6811])
    accountant.add(BaseTwoExponential(Fraction(37, 416)))
    return accountant


def _cks_figure_four():
    return PrivacyAccountant().add(DiscreteGaussian(2500), count=100)


def _bisect(is_feasible, infeasible: float, feasible: float, steps: int = 40) -> tuple:
    """Plain bisection of a bracket (infeasible end, feasible end)."""
    for _ in range(steps):
        middle = 0.5 * (infeasible + feasible)
        if is_feasible(middle):
            feasible = middle
        else:
            infeasible = middle
    return infeasible, feasible


@pytest.mark.parametrize(
    "plan", [_one_gaussian, _capped_by_zcdp, _mixed, _cks_figure_four, _large_rho, _coarse_lattice]
)
def test_epsilon_ends_match_plain_bisection_on_the_same_bounds(plan):
    accountant = plan()
    result = accountant.epsilon(DELTA)
    assert 0 <= result.lower <= result.upper
    # the upper end is feasible, and ε a little below it is not: bisection between them
    # finds the crossing, which the returned end is within 1e-7 of
    assert accountant.delta(result.upper).upper <= DELTA
    below = result.upper * (1 - WINDOW)
    assert accountant.delta(below).upper > DELTA
    _, smallest = _bisect(lambda e: accountant.delta(e).upper <= DELTA, below, result.upper)
    assert smallest <= result.upper <= smallest * (1 + 1.01 * RTOL)
    if result.lower == 0:
        # no lower end: δ_lower(ε) <= δ already just below the upper end
        assert accountant.delta(result.upper * (1 - RTOL)).lower <= DELTA
        return
    assert accountant.delta(result.lower).lower > DELTA
    above = result.lower * (1 + WINDOW)
    assert accountant.delta(above).lower <= DELTA
    largest, _ = _bisect(lambda e: accountant.delta(e).lower <= DELTA, result.lower, above)
    assert largest * (1 - 1.01 * RTOL) <= result.lower <= largest


def test_probe_settles_a_capped_plan_in_a_few_evaluations():
    accountant = _capped_by_zcdp()
    result = accountant.epsilon(DELTA)
    calls = []
    original = accountant._composition()[0]

    def counted(eps):
        calls.append(eps)
        return original(eps)

    accountant._cache["composition"] = Built(ignoring_decide(counted), accountant.method)
    again = accountant.epsilon(DELTA)
    assert again == result
    # start (nudged up while infeasible), the probe 5e-8 below it, then the lower end
    assert len(calls) <= 10


def test_large_rho_plan_starts_within_two_standard_deviations():
    # the first trial is 2·sqrt(2ρ) below the zCDP start, not 10%: 10 evaluations, not 14
    accountant = _large_rho()
    calls = []
    original = accountant._composition()[0]

    def counted(eps):
        calls.append(eps)
        return original(eps)

    accountant._cache["composition"] = Built(ignoring_decide(counted), accountant.method)
    result = accountant.epsilon(DELTA)
    assert calls[1] == pytest.approx(calls[0] - 2 * math.sqrt(2 * float(accountant.rho())))
    assert len(calls) <= 10
    # the upper end rounded up is not evaluated again by the lower search
    assert result.upper not in calls


def _exponential_bracket(width: float):
    """δ(ε) = e^{-ε} bracketed by (1 - width, 1) times it: crossings known exactly."""

    def delta_of(eps: float) -> DeltaBound:
        exact = math.exp(-eps)
        return DeltaBound(exact * (1 - width), exact, "synthetic")

    return delta_of


def test_search_of_a_known_function_from_an_infeasible_start():
    # the start is 1e-9 relative below the upper crossing (a rounded closed form)
    delta = 1e-6
    crossing = -math.log(delta)
    bound = epsilon_from_delta_function(
        _exponential_bracket(1e-3), delta, crossing * (1 - 1e-9), "synthetic"
    )
    assert math.exp(-bound.upper) <= delta
    assert crossing <= bound.upper <= crossing * (1 + 1.01 * RTOL)
    lower_crossing = math.log(1 - 1e-3) - math.log(delta)
    assert math.exp(-bound.lower) * (1 - 1e-3) > delta
    assert lower_crossing * (1 - 1.01 * RTOL) <= bound.lower <= lower_crossing


def test_probe_that_fails_falls_back_to_the_full_search():
    # the probe is asked for although the crossing is far below the start
    delta = 1e-6
    crossing = -math.log(delta)
    bound = epsilon_from_delta_function(
        _exponential_bracket(1e-3), delta, 2 * crossing, "synthetic", probe=lambda b: True
    )
    assert crossing <= bound.upper <= crossing * (1 + 1.01 * RTOL)


@pytest.mark.parametrize("spread", [1e-3, 0.5, 0.7])
def test_search_with_a_spread_hint_certifies_both_ends(spread):
    # a first trial feasible (spread 1e-3), at the crossing (0.5) or 0.4 below it (0.7)
    delta = 1e-6
    crossing = -math.log(delta)
    bound = epsilon_from_delta_function(
        _exponential_bracket(1e-3), delta, crossing + 1.0, "synthetic", spread=spread
    )
    assert crossing <= bound.upper <= crossing * (1 + 1.01 * RTOL)
    lower_crossing = math.log(1 - 1e-3) - math.log(delta)
    assert lower_crossing * (1 - 1.01 * RTOL) <= bound.lower <= lower_crossing


def _staircase(step_at: float, lower_step_at: float):
    """δ(ε) of one coarse lattice step: 1 below it, 1e-169 above (the lower end earlier)."""

    def delta_of(eps: float) -> DeltaBound:
        upper = 1.0 if eps < step_at else 1e-169
        lower = 0.99 if eps < lower_step_at else 1e-170
        return DeltaBound(lower=lower, upper=upper, method="staircase")

    return delta_of


def test_a_staircase_is_searched_down_from_the_loss_scale_not_by_halving():
    # seed 35 of the random plans: a single lattice step a few spreads below the start;
    # halving first and creeping back took 39 evaluations, doubling from the spread 22
    spread, step_at = 2.1e7, 222189391060880.3
    calls = []
    staircase = _staircase(step_at, step_at - 5.6e8)

    def counted(eps):
        calls.append(eps)
        return staircase(eps)

    high = step_at + 6.5 * spread
    result = epsilon_from_delta_function(counted, DELTA, high, "staircase", spread=spread)
    assert step_at <= result.upper <= step_at * (1 + 1.01 * RTOL)
    assert (step_at - 5.6e8) * (1 - 1.01 * RTOL) <= result.lower <= step_at - 5.6e8
    assert len(calls) <= 26
    assert min(calls) > step_at - 100 * spread  # never halfway down
