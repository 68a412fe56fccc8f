"""Controlled rounding takes the closest rounding (L1) that fits both margins.

A rounding that merely fits the margins (a maximum flow) moves cells by up to one
count where the closest one keeps them; a brute force over every floor/ceil choice
of small tables is the reference.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest

from dp_pipeline.postprocess.two_way import controlled_round, fit_two_way


def _closest_by_enumeration(x, row, col, R, C):
    """The smallest total |n - x| over every floor/ceil choice meeting both margins."""
    low = np.floor(x).astype(np.int64)
    best = np.inf
    for up in product((0, 1), repeat=x.size):
        n = low + np.array(up)
        if np.array_equal(np.bincount(row, n, R.size), R) and np.array_equal(
            np.bincount(col, n, C.size), C
        ):
            best = min(best, float(np.abs(n - x).sum()))
    return best


def _instance(seed: int, rows: int = 3, cols: int = 4):
    rng = np.random.default_rng(seed)  # test data only
    truth = rng.poisson(2, (rows, cols))
    z = truth + rng.normal(0, 1.5, truth.shape)  # some negative estimates
    row, col = np.divmod(np.arange(rows * cols), cols)
    R, C = truth.sum(1), truth.sum(0)
    x, _ = fit_two_way(z.ravel(), row, col, R, C, nonnegative=True)
    return x, row, col, R, C


@pytest.mark.parametrize("seed", range(40))
def test_controlled_rounding_is_the_closest_in_l1(seed):
    x, row, col, R, C = _instance(seed)
    out = controlled_round(x, row, col, R, C, nonnegative=True)
    np.testing.assert_array_equal(np.bincount(row, out, R.size), R)
    np.testing.assert_array_equal(np.bincount(col, out, C.size), C)
    assert np.all(np.abs(out - x) < 1)
    best = _closest_by_enumeration(x, row, col, R, C)
    assert float(np.abs(out - x).sum()) <= best + 1e-9, (
        f"seed {seed}: total move {np.abs(out - x).sum():.4f}, closest {best:.4f}"
    )


def test_a_near_exact_table_keeps_its_nearest_integers_where_they_fit():
    # Estimates within 0.35 of integers, margins those integers' margins plus one count
    # in one row and one column: the closest rounding moves one cell (the one 0.45 above
    # its integer), a rounding that only fits the margins may move many (each row's
    # cells trading counts).
    rng = np.random.default_rng(7)  # test data only
    rows, cols = 40, 6
    truth = rng.integers(0, 20, (rows, cols))
    x = (truth + rng.uniform(-0.35, 0.35, truth.shape)).ravel()
    x[0] = truth[0, 0] + 0.45
    row, col = np.divmod(np.arange(rows * cols), cols)
    R, C = truth.sum(1), truth.sum(0)
    R[0] += 1
    C[0] += 1
    out = controlled_round(x, row, col, R, C, nonnegative=True)
    moved = out != truth.ravel()
    assert np.count_nonzero(moved) == 1 and moved[0], np.flatnonzero(moved)
