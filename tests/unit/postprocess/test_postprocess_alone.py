"""A table alone (no other table, no geography key) is made non-negative cell by cell.

With no margin to agree with, fixing the table's own total before raising its cells
below 0 would take that mass from every positive cell: on a table of many empty cells
and a few large ones, the large cells lost about one noise standard deviation.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.postprocess import NoisyCounts, make_consistent


def _table(values, variance=Fraction(37, 2)):
    return NoisyCounts("t", ("age",), (values.size,), values, variance)


def test_large_cells_of_a_table_alone_are_not_biased():
    rng = np.random.default_rng(0)  # test data only
    truth = np.concatenate([np.zeros(900, np.int64), np.full(100, 200)])
    errors = []
    for _ in range(20):
        raw = truth + np.rint(rng.normal(0.0, float(Fraction(37, 2)) ** 0.5, truth.size)).astype(
            np.int64
        )
        value = make_consistent([_table(raw)], None).values["t"]
        errors.append(value[900:] - 200)
    bias = float(np.mean(errors))
    assert abs(bias) <= 0.2 * float(Fraction(37, 2)) ** 0.5, f"large-cell bias {bias:+.2f}"


@pytest.mark.parametrize(
    "nonnegative, integer, method",
    [
        (True, True, "wls+topdown-nonnegative-integer"),
        (True, False, "wls+topdown-nonnegative-real"),
        (False, True, "wls+topdown-integer"),
        (False, False, "wls"),
    ],
)
def test_each_cell_is_its_own_closest_value(nonnegative, integer, method):
    raw = np.array([-3, -1, 0, 2, 250, 7])
    result = make_consistent([_table(raw)], None, nonnegative=nonnegative, integer=integer)
    expected = np.maximum(raw, 0) if nonnegative else raw
    np.testing.assert_array_equal(result.values["t"], expected)
    assert result.values["t"].dtype == (np.int64 if integer else np.float64)
    assert result.method == method
    if nonnegative or integer:
        np.testing.assert_array_equal(result.least_squares["t"], raw.astype(np.float64))
    else:
        assert result.least_squares is None


def test_no_cell_moves_away_from_a_nonnegative_truth():
    rng = np.random.default_rng(3)  # test data only
    truth = rng.poisson(3, 5000)
    raw = truth + rng.integers(-6, 7, truth.size)
    value = make_consistent([_table(raw)], None).values["t"]
    assert np.all(np.abs(value - truth) <= np.abs(raw - truth))
