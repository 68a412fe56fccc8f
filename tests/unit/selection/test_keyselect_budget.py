"""A budget too small to release any key, and max_cells past the certified limit, are
refused at plan time in one line; the least budget that would release a key is exact."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect import minimum_epsilon, plan_selection
from dp_pipeline.keyselect.budget import decimal_up, three_digits_up
from dp_pipeline.keyselect.rules import MAX_CELLS_LIMIT

DELTA = Fraction(1, 10**6)


def _grid_step(value: Fraction) -> Fraction:
    """The unit of the third significant digit of ``value``."""
    step = Fraction(1)
    while value / step >= 1000:
        step *= 10
    while value / step < 100:
        step /= 10
    return step


@pytest.mark.parametrize(
    ("noise", "max_cells", "neighbouring", "units"),
    [
        ("laplace", 1, "add_remove", 50),
        ("laplace", 5, "replace", 200),
        ("gaussian", 3, "add_remove", 100),
    ],
)
def test_minimum_epsilon_is_the_least_grid_budget_releasing_a_key_of_n_units(
    noise, max_cells, neighbouring, units
):
    arguments = dict(noise=noise, delta=DELTA, max_cells=max_cells, neighbouring=neighbouring)
    least = minimum_epsilon(units, **arguments)
    assert three_digits_up(least) == least
    assert plan_selection(epsilon=least, **arguments).threshold <= units
    below = least - _grid_step(least)
    assert plan_selection(epsilon=below, **arguments).threshold > units


def test_a_budget_too_small_for_max_units_names_the_threshold_and_the_least_epsilon():
    arguments = dict(noise="laplace", delta=DELTA, max_cells=3)
    plan = plan_selection(epsilon=Fraction(1, 100), **arguments)
    least = minimum_epsilon(100, **arguments)
    with pytest.raises(DPValueError) as caught:
        plan_selection(epsilon=Fraction(1, 100), max_units=100, **arguments)
    assert str(caught.value) == (
        f"epsilon=1/100, delta=1e-06, max_cells=3: budget too small for key selection: its "
        f"threshold is {plan.threshold} distinct units, above max_units=100, so no key could "
        f"be released; epsilon >= {decimal_up(least)} would release a key held by 100 units "
        f"with probability at least 1/2 (or raise delta, or lower max_cells)"
    )
    # at that budget the same call plans
    assert plan_selection(epsilon=least, max_units=100, **arguments).threshold <= 100


def test_max_units_no_budget_can_reach_is_refused_saying_so():
    with pytest.raises(
        DPValueError,
        match=r"^epsilon=1, delta=1e-06, max_cells=3: budget too small for key selection: its "
        r"threshold is \d+ distinct units, above max_units=1, so no key could be released; no "
        r"epsilon up to 50 would; raise delta or lower max_cells$",
    ):
        plan_selection(noise="laplace", epsilon=1, delta=DELTA, max_cells=3, max_units=1)
    with pytest.raises(
        DPValueError,
        match=r"^units=1: no epsilon up to 50 gives a threshold of at most 1 distinct units at "
        r"delta=1e-06, max_cells=3; raise delta or lower max_cells$",
    ):
        minimum_epsilon(1, noise="laplace", delta=DELTA, max_cells=3)


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "10"])
def test_bad_units_are_refused_by_name(bad):
    with pytest.raises(DPValueError, match=r"^max_units=.*: must be a positive int"):
        plan_selection(noise="laplace", epsilon=1, delta=DELTA, max_cells=1, max_units=bad)
    with pytest.raises(DPValueError, match=r"^units=.*: must be a positive int"):
        minimum_epsilon(bad, noise="laplace", delta=DELTA, max_cells=1)


def test_max_cells_past_the_limit_is_refused_in_one_line_naming_the_limit():
    with pytest.raises(DPValueError) as caught:
        plan_selection(noise="laplace", epsilon=1, delta=DELTA, max_cells=MAX_CELLS_LIMIT + 1)
    assert str(caught.value) == (
        f"max_cells={MAX_CELLS_LIMIT + 1}: must be between 1 and {MAX_CELLS_LIMIT}, the largest "
        f"for which the selection's delta is certified; lower max_cells (the keyed bounding "
        f"keeps each unit's first max_cells keys)"
    )


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_the_accountant_certifies_a_selection_at_the_max_cells_limit(noise):
    plan = plan_selection(
        noise=noise, epsilon=1, delta=DELTA, max_cells=MAX_CELLS_LIMIT, neighbouring="replace"
    )
    bound = PrivacyAccountant().add_event(plan.event()).delta(1.0)
    assert bound.upper <= float(plan.delta)
    assert bound.method.endswith("key_selection")


def test_describe_is_one_line_with_the_threshold_and_bounds_rounded_up():
    plan = plan_selection(noise="laplace", epsilon=1, delta=DELTA, max_cells=1)
    line = plan.describe()
    assert "\n" not in line
    assert line.startswith(f"key selection: threshold {plan.threshold} distinct units (")
    assert f"at most {decimal_up(plan.single_unit_release)})" in line
    assert (
        f"policy truncated_geometric, laplace noise scale 1, truncated at ±{plan.truncation};"
        in line
    )
    assert line.endswith(
        f"delta <= {decimal_up(plan.delta_upper)} at epsilon 1; max_cells 1, add_remove"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Fraction(1, 3), "0.334"),
        (Fraction(999, 1000), "0.999"),
        (Fraction(9995, 10000), "1"),
        (Fraction(123456), "1.24e+05"),
        (Fraction(7, 10**20), "7e-20"),
        (Fraction(0), "0"),
    ],
)
def test_decimals_shown_are_rounded_up(value, shown):
    assert decimal_up(value) == shown
    assert Fraction(shown) >= value
