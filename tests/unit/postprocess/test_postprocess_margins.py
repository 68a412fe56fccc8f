"""The top-down step's moves as counts: the same percentile from a whole table or its groups."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.accounting.accuracy import margin_of_error
from dp_pipeline.accounting.noise_variance import noise_variance
from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.postprocess.margins import (
    MOVE_UNITS,
    add_counts,
    class_move_counts,
    least_squares_margin,
    move_counts,
    move_percentile,
    moves,
    size_classes,
)
from dp_pipeline.release.tables.consistency import (
    NORMAL_95,
    class_margins,
    value_margin,
    value_margin_of_counts,
)


def test_a_move_is_rounded_up_to_a_whole_sixteenth_with_a_float_slack():
    value = np.array([3, 3, 0, 5, 7, 2], dtype=np.int64)
    least_squares = np.array([3.0, 2.5, -0.2, 5.0 + 1e-12, 4.0 - 1e-11, 4.000001])
    assert MOVE_UNITS == 16
    assert moves(value, least_squares).tolist() == [0, 8, 4, 0, 48, 33]
    assert moves(value, least_squares).dtype == np.int64


def test_raising_a_negative_estimate_toward_zero_adds_nothing_to_a_nonnegative_truth():
    value = np.array([0, 1, 3, 2, 5], dtype=np.int64)
    least_squares = np.array([-2.5, -3.0, -1.0, 2.5, 4.0])
    # Raised from -2.5 to 0 and from -3 to 1: no truth t >= 0 is further from them;
    # from -1 to 3: up to 3 - 1 = 2 counts further (t = 0); lowered 2.5 -> 2: 1/2.
    assert moves(value, least_squares, nonnegative=True).tolist() == [0, 0, 32, 8, 16]
    assert moves(value, least_squares).tolist() == [40, 64, 64, 8, 16]
    # The bound: |value - t| <= |ls - t| + move for every truth t >= 0.
    truths = np.arange(0, 12)[:, None]
    moved = moves(value, least_squares, nonnegative=True) / MOVE_UNITS
    assert np.all(np.abs(value - truths) <= np.abs(least_squares - truths) + moved + 1e-12)


@pytest.mark.parametrize("cells", [1, 2, 19, 20, 21, 100, 1001])
def test_the_percentile_is_the_order_statistic_ceil_of_95_percent(cells):
    rng = np.random.default_rng(cells)  # test data only
    moved = rng.integers(0, 6, size=cells)
    expected = int(np.sort(moved)[-(-95 * cells // 100) - 1])
    assert move_percentile(move_counts(moved)) == expected
    # q = 1: every cell within it, the largest move.
    assert move_percentile(move_counts(moved), Fraction(1)) == int(moved.max())


def test_groups_counts_added_give_the_whole_tables_percentile():
    rng = np.random.default_rng(7)  # test data only
    moved = rng.poisson(0.4, size=5000)
    parts = np.array_split(moved, [13, 900, 901, 4000])
    total = np.zeros(1, dtype=np.int64)
    for part in parts:
        total = add_counts(total, move_counts(part))
    assert np.array_equal(total, move_counts(moved))
    assert move_percentile(total) == move_percentile(move_counts(moved))


def test_no_cells_no_move():
    assert move_percentile(np.zeros(0, dtype=np.int64)) == 0
    assert move_percentile(move_counts(np.zeros(0, dtype=np.int64))) == 0


def test_the_value_margin_adds_the_percentile_to_the_least_squares_margin():
    value = np.array([0, 0, 1, 2, 9] * 20, dtype=np.int64)
    least_squares = value + np.array([0.0, 0.4, -1.2, 0.0, 2.5] * 20)
    # Moves 0, 0.4, 1.2, 0, 2.5: 95% of 100 cells are within 2.5 counts, 80% within 1.2.
    counts = move_counts(moves(value, least_squares, False))
    assert move_percentile(counts) == 40
    # Integers: |value - truth| is an integer <= 10.2 + 2.5, so at most 12.
    assert value_margin(10.2, value, least_squares, False, True) == 12
    assert value_margin_of_counts(10.2, counts, True) == 12
    # Real values: the ceiling.
    assert value_margin(10.2, value, least_squares, False, False) == 13
    assert value_margin_of_counts(10.2, counts, False) == 13


def test_cells_are_classed_by_their_noisy_value_and_counted_per_class():
    noisy = np.array([-3, 0, 20, 21, 100, 101, 5000])
    np.testing.assert_array_equal(size_classes(noisy), [0, 0, 0, 1, 1, 2, 2])
    moved = np.array([0, 2, 1, 0, 3, 1, 1])
    counts = class_move_counts(moved, size_classes(noisy))
    np.testing.assert_array_equal(counts, [[1, 1, 1, 0], [1, 0, 0, 1], [0, 2, 0, 0]])
    np.testing.assert_array_equal(counts.sum(axis=0), move_counts(moved))
    # Classes without cells get no margin; the others their own moves' percentile.
    margins = class_margins(1.0, counts, True)
    assert margins == {"20 or less": 1, "21 to 100": 1, "over 100": 1}
    assert class_margins(1.0, counts[:1], True) == {"20 or less": 1}
    assert set(class_margins(1.0, np.zeros((3, 1), np.int64), True)) == set()


def test_a_near_exact_tables_margin_is_its_raw_margin_not_the_normal_point():
    # σ² = 1/4: noise variance about 0.213, raw (exact discrete 95%) margin 1; the normal
    # law's 1.96 sd is 0.9, which a whole-count margin rounds down to 0.
    noise = noise_variance(DiscreteGaussian(Fraction(1, 4)))
    raw = margin_of_error(DiscreteGaussian(Fraction(1, 4)))
    assert raw == 1
    assert least_squares_margin(0.9 * float(noise), noise, raw, NORMAL_95) == 1.0
    # Mostly averaged with other tables (below half the noise variance): the normal point.
    small = 0.3 * float(noise)
    assert least_squares_margin(small, noise, raw, NORMAL_95) == NORMAL_95 * small**0.5
    assert value_margin_of_counts(1.0, move_counts(np.zeros(10, np.int64)), True) == 1
