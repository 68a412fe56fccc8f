"""How far the non-negative integer step moved each cell, as counts that any engine can add up.

The margin of error of a post-processed table's published value
(`dp_pipeline.release.consistency.value_margin`) adds to the raw noise's margin the
95th percentile, over the table's cells, of how far the top-down step moved a cell
from its least squares estimate. Each cell's move is rounded up to a whole count
(:func:`moves`), so a table's moves are summarised exactly by how many cells moved
by 0, 1, 2, ... counts (:func:`move_counts`): a driver sums one table, an engine
sums each group's counts and adds them, and both find the same percentile
(:func:`move_percentile`), bit for bit, without bringing the cells together.

Pure post-processing of published values and the least squares estimates; deterministic.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["MOVE_SLACK", "PERCENTILE", "add_counts", "move_counts", "move_percentile", "moves"]

# A move within this of a whole count is that count: the least squares estimate is a
# float, so a cell it put at an integer can sit a rounding error away from it.
MOVE_SLACK = 1e-9
PERCENTILE = Fraction(95, 100)


def moves(value: np.ndarray, least_squares: np.ndarray) -> np.ndarray:
    """Per cell, ceil(|value - least_squares| - `MOVE_SLACK`), at least 0 (int64, counts)."""
    moved = np.subtract(value, least_squares, dtype=np.float64)
    np.abs(moved, out=moved)
    moved -= MOVE_SLACK
    np.ceil(moved, out=moved)
    np.maximum(moved, 0.0, out=moved)
    return moved.astype(np.int64)


def move_counts(moved: np.ndarray) -> np.ndarray:
    """How many cells moved by 0, 1, 2, ... counts (int64; index = move)."""
    return np.bincount(np.asarray(moved, dtype=np.int64), minlength=1).astype(np.int64)


def move_percentile(counts: np.ndarray, q: Fraction = PERCENTILE) -> int:
    """The smallest move m with at least ceil(q * cells) cells moved by m or less.

    ``counts`` as :func:`move_counts` gives them (or their sum over groups); the
    order statistic is found in integers, so every engine gets the same m. 0 for a
    table without cells.
    """
    counts = np.asarray(counts, dtype=np.int64)
    cells = int(counts.sum())
    if cells == 0:
        return 0
    needed = -((-q.numerator * cells) // q.denominator)  # ceil(q * cells), exactly
    return int(np.searchsorted(np.cumsum(counts), needed))


def add_counts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sum of two :func:`move_counts` (of different lengths)."""
    out = np.zeros(max(a.size, b.size), dtype=np.int64)
    out[: a.size] += a
    out[: b.size] += b
    return out
