"""The numpy dialect of the query rules, shared by the pandas engine and the Parquet pass.

Clamp-and-round of summed values to granularity units, the first invalid-row
reason code of every row, and the exact clamped cell sums. Both numpy paths
call these functions, and the Spark SQL dialect (`dp_pipeline.engines.spark_sql`)
evaluates the same IEEE operations, so all three put every row in the same
cell with the same value units.
"""

from __future__ import annotations

import numpy as np

from dp_pipeline.query.bounds import ValueBounds
from dp_pipeline.query.exact_sums import cell_totals

__all__ = ["cell_sums", "clip_units", "first_reason_codes", "rounded_units", "value_units"]


def rounded_units(values: np.ndarray, bounds: ValueBounds) -> tuple[np.ndarray, np.ndarray]:
    """(``rint(v·den/num)`` as float64, mask of values outside ``[lower, upper]`` units).

    The same IEEE operations as the Spark plan; NaN stays NaN (callers drop it first
    or mark it invalid).
    """
    with np.errstate(invalid="ignore"):
        raw = np.rint(values * float(bounds.scale_denominator) / float(bounds.scale_numerator))
        clamped = (raw < bounds.lower_units) | (raw > bounds.upper_units)
    return raw, clamped


def clip_units(raw: np.ndarray, bounds: ValueBounds) -> np.ndarray:
    """Rounded units clamped into ``[lower_units, upper_units]``, as int64 (finite ``raw`` only)."""
    return np.clip(raw, bounds.lower_units, bounds.upper_units).astype(np.int64)


def value_units(values: np.ndarray, bounds: ValueBounds) -> tuple[np.ndarray, np.ndarray]:
    """Units ``clip(rint(v·den/num), L, U)`` of finite ``values``, and the clamped mask."""
    raw, clamped = rounded_units(values, bounds)
    return clip_units(raw, bounds), clamped


def first_reason_codes(conditions: list[tuple[np.ndarray | None, int]], size: int) -> np.ndarray:
    """0 where no condition holds, else the code of the first condition that holds."""
    code = np.zeros(size, dtype=np.int64)
    for condition, value in reversed(conditions):  # earlier conditions overwrite later ones
        if condition is not None and condition.any():
            code[condition] = value
    return code


def cell_sums(cells: np.ndarray, weights: np.ndarray, total: int) -> np.ndarray:
    """Exact per-cell sums, clamped into [-2**62, 2**62] before noise (`query.exact_sums`)."""
    return cell_totals(cells, weights, total).clamped()
