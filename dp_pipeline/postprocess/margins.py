"""How much the top-down step can add to each cell's error, as counts any engine adds up.

The margin of error of a post-processed table's published value
(`dp_pipeline.release.tables.consistency.value_margin`) adds to the least squares
estimate's margin the 95th percentile, over the table's cells, of :func:`moves`:
per cell, the most the top-down step can have added to the cell's error whatever
the truth, |value − truth| ≤ |ls − truth| + move. Moving a cell by d adds at most
d; when the truth is known to be non-negative (counts, sums with a lower bound of
0), raising a negative estimate toward 0 adds nothing until it passes |ls| (for a
truth t ≥ 0 > ls, |value − t| − |ls − t| ≤ max(0, value − |ls|)). Each move is
rounded up to a whole `MOVE_UNITS`-th of a count, so a table's moves are
summarised exactly by how many cells moved by 0, 1, 2, ... units
(:func:`move_counts`): a driver sums one table, an engine sums each group's counts
and adds them, and both find the same percentile (:func:`move_percentile`), bit
for bit, without bringing the cells together.

Pure post-processing of published values and the least squares estimates; deterministic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = [
    "MOVE_SLACK",
    "MOVE_UNITS",
    "NOISY_CLASSES",
    "OWN_NOISE_SHARE",
    "PERCENTILE",
    "add_counts",
    "class_move_counts",
    "least_squares_margin",
    "move_counts",
    "move_percentile",
    "moves",
    "size_classes",
]

# A move within this of a whole unit is that unit: the least squares estimate is a
# float, so a cell it put at an integer can sit a rounding error away from it.
MOVE_SLACK = 1e-9
# Moves are counted in sixteenths of a count: a margin built from them is at most
# 1/16 of a count above the exact percentile.
MOVE_UNITS = 16
PERCENTILE = Fraction(95, 100)
# A table whose least squares variance is at least this share of its noise variance
# takes the raw margin (the exact discrete 95% point of its own noise): its least
# squares error is then mostly its own discrete noise, whose 95% point the normal
# law's can fall below (at σ² = 1/4: 1.96 sd is 0.9 counts, the discrete point 1).
OWN_NOISE_SHARE = 0.5
# Classes of a cell's noisy value (its raw count: the truth is not public), for the
# margins of error published per class; the upper end of each but the last.
NOISY_CLASSES = ("20 or less", "21 to 100", "over 100")
_CLASS_ENDS = np.array([20, 100])


def least_squares_margin(
    ls_variance: float, noise_variance: Fraction, raw_margin: float, z: float
) -> float:
    """The 95% margin of a table's least squares estimate (counts, a real number).

    z·sqrt(ls_variance), never more than ``raw_margin`` (the noise's exact discrete
    95% point: the least squares variance is never larger than the noise's); the raw
    margin itself where ``ls_variance`` is at least :data:`OWN_NOISE_SHARE` of
    ``noise_variance``, so the margin is never below the discrete 95% point of an
    error that is mostly the table's own discrete noise. A public fact only.
    """
    if ls_variance >= OWN_NOISE_SHARE * float(noise_variance):
        return float(raw_margin)
    return min(float(raw_margin), z * math.sqrt(ls_variance))


def moves(value: np.ndarray, least_squares: np.ndarray, nonnegative: bool = False) -> np.ndarray:
    """Per cell, the most the step can add to its error, in `MOVE_UNITS`-ths, rounded up (int64).

    |value − ls| in general; with ``nonnegative`` (the truth is known to be >= 0),
    max(0, value − |ls|) for a cell raised above its estimate (module docstring).
    At least 0.
    """
    ls = np.asarray(least_squares, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    moved = np.subtract(value, ls)
    raised = moved > 0
    np.abs(moved, out=moved)
    if nonnegative:
        moved = np.where(raised, value - np.abs(ls), moved)
    moved *= MOVE_UNITS
    moved -= MOVE_SLACK * MOVE_UNITS
    np.ceil(moved, out=moved)
    np.maximum(moved, 0.0, out=moved)
    return moved.astype(np.int64)


def move_counts(moved: np.ndarray) -> np.ndarray:
    """How many cells moved by 0, 1, 2, ... units (int64; index = move)."""
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


def size_classes(noisy: np.ndarray) -> np.ndarray:
    """Each cell's class of :data:`NOISY_CLASSES` by its noisy value (int64: 0, 1, 2)."""
    return np.searchsorted(_CLASS_ENDS, np.asarray(noisy), side="left").astype(np.int64)


def class_move_counts(moved: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """:func:`move_counts` per class: row k counts the cells of class k (int64, one row
    per class of :data:`NOISY_CLASSES`); the row sum is the table's move_counts."""
    moved = np.asarray(moved, dtype=np.int64)
    width = int(moved.max(initial=0)) + 1
    flat = np.bincount(
        np.asarray(classes, dtype=np.int64) * width + moved, minlength=len(NOISY_CLASSES) * width
    )
    return flat.reshape(len(NOISY_CLASSES), width).astype(np.int64)
