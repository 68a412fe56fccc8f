"""The one sensitivity function, checked once against vectors derived by hand.

Each expected vector is written out from the rule in `dp_pipeline.query.sensitivity`:
add/remove touches min(L0, cells) coordinates, replace min(2·L0, cells); a count moves
by L∞, a sum by L∞·max(|L|, |U|) under add/remove and L∞·max(|L|, |U|, U − L) under
replace; without a privacy unit L0 = L∞ = 1.
"""

from __future__ import annotations

import pytest

from dp_pipeline.errors import InternalError
from dp_pipeline.query.sensitivity import sensitivity_vector

# (statistic, neighbouring, privacy unit, L0, L∞, (L, U), cells, expected vector)
CASES = [
    # count, with a privacy unit
    ("count", "add_remove", True, 3, 2, None, 10, (2, 2, 2)),
    ("count", "replace", True, 3, 2, None, 10, (2, 2, 2, 2, 2, 2)),
    ("count", "replace", True, 3, 2, None, 4, (2, 2, 2, 2)),  # 2·3 = 6 capped at 4 cells
    ("count", "replace", True, 3, 2, None, 6, (2,) * 6),  # exactly at the cap
    ("count", "add_remove", True, 5, 2, None, 3, (2, 2, 2)),  # L0 = 5 capped at 3 cells
    # count, every row its own unit: the declared L0 and L∞ do not apply
    ("count", "add_remove", False, 3, 2, None, 10, (1,)),
    ("count", "replace", False, 3, 2, None, 10, (1, 1)),
    ("count", "replace", False, 3, 2, None, 1, (1,)),  # leaving and entering the one cell
    # sum over [-4, 10], with a privacy unit: add/remove 2·10 = 20, replace 2·14 = 28
    ("sum", "add_remove", True, 3, 2, (-4, 10), 10, (20, 20, 20)),
    ("sum", "replace", True, 3, 2, (-4, 10), 10, (28,) * 6),
    ("sum", "replace", True, 3, 2, (-4, 10), 5, (28,) * 5),  # 2·3 = 6 capped at 5 cells
    ("sum", "add_remove", True, 4, 2, (-4, 10), 2, (20, 20)),  # L0 = 4 capped at 2 cells
    # sum whose bounds do not straddle 0: U − L is not larger than max(|L|, |U|)
    ("sum", "replace", True, 1, 3, (0, 10), 10, (30, 30)),
    ("sum", "replace", True, 1, 1, (-7, -2), 10, (7, 7)),
    ("sum", "add_remove", True, 1, 1, (-7, -2), 10, (7,)),
    # sum, every row its own unit: L∞ = 1
    ("sum", "add_remove", False, 3, 2, (-4, 10), 10, (10,)),
    ("sum", "replace", False, 3, 2, (-4, 10), 10, (14, 14)),
    ("sum", "replace", False, 3, 2, (-4, 10), 1, (14,)),
]


@pytest.mark.parametrize(
    ("statistic", "neighbouring", "unit", "l0", "linf", "bounds", "cells", "expected"), CASES
)
def test_sensitivity_vector_matches_the_hand_derived_vector(
    statistic, neighbouring, unit, l0, linf, bounds, cells, expected
):
    lower, upper = bounds if bounds is not None else (None, None)
    vector = sensitivity_vector(
        statistic,
        max_cells=l0,
        max_per_cell=linf,
        neighbouring=neighbouring,
        cells=cells,
        privacy_unit=unit,
        lower=lower,
        upper=upper,
    )
    assert vector == expected
    assert all(isinstance(entry, int) for entry in vector)


def test_every_combination_is_covered():
    combinations = {(c[0], c[1], c[2]) for c in CASES}
    assert combinations == {
        (statistic, neighbouring, unit)
        for statistic in ("count", "sum")
        for neighbouring in ("add_remove", "replace")
        for unit in (True, False)
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(statistic="mean"), "is not count or sum"),
        (dict(neighbouring="swap"), "neighbouring 'swap' is unknown"),
        (dict(cells=0), "cells must be an integer >= 1"),
        (dict(max_cells=0), "max_cells must be an integer >= 1"),
        (dict(statistic="sum"), "a sum needs its lower and upper bounds"),
        (dict(statistic="sum", lower=0.5, upper=2), "lower must be an integer"),
    ],
)
def test_bad_arguments_are_internal_errors(arguments, message):
    call = dict(statistic="count", max_cells=1, max_per_cell=1, neighbouring="replace", cells=2)
    call.update(arguments)
    statistic = call.pop("statistic")
    with pytest.raises(InternalError, match=message):
        sensitivity_vector(statistic, **call)
