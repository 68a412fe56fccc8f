"""The numpy dialect of the query rules, shared by the pandas engine and the Parquet pass.

Clamp-and-round of summed values to granularity units, the first invalid-row
reason code of every row, the rows that break a public hierarchy, and the exact
clamped cell sums. Both numpy paths
call these functions, and the Spark SQL dialect (`dp_pipeline.engines.spark_sql`)
evaluates the same IEEE operations, so all three put every row in the same
cell with the same value units.
"""

from __future__ import annotations

import numpy as np

from dp_pipeline.query.bounds import ValueBounds
from dp_pipeline.query.exact_sums import cell_totals
from dp_pipeline.query.hierarchy import HierarchyRule

__all__ = [
    "KEY_LIMIT",
    "cell_sums",
    "clip_units",
    "first_reason_codes",
    "hierarchy_breaks",
    "integral_keys",
    "rounded_units",
    "value_units",
]

# Integer domains lie within [-2**62, 2**62] (`dp_pipeline.query.domain`): a floating-point
# key beyond that is outside every domain, and every one within it converts to int64 exactly.
KEY_LIMIT = float(2**62)


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


def hierarchy_breaks(rule: HierarchyRule, positions: list[np.ndarray]) -> np.ndarray:
    """Mask of the rows that break ``rule`` (`dp_pipeline.query.hierarchy`).

    ``positions``: each of ``rule.domains``' row positions, -1 where the key is null
    or outside its domain. A row breaks the rule when its finest position is -1 or
    a coarser position is not the ancestor of its finest one: one ``take`` per
    coarser level. The Spark SQL dialect is `spark_sql.coding.hierarchy_broken`.
    """
    finest, *coarser = positions
    broken = finest < 0
    index = np.where(broken, 0, finest) if broken.any() else finest
    for ancestors, position in zip(rule.ancestors, coarser, strict=True):
        broken |= ancestors.take(index) != position
    return broken


def cell_sums(cells: np.ndarray, weights: np.ndarray, total: int) -> np.ndarray:
    """Exact per-cell sums, clamped into [-2**62, 2**62] before noise (`query.exact_sums`)."""
    return cell_totals(cells, weights, total).clamped()


def integral_keys(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(int64 keys, missing mask, not-an-integer mask) of a floating-point integer-key column.

    A float column holds what an integer column with a missing value becomes in pandas
    or Parquet: NaN is a missing key (a null key); a value that is not an integer
    (``1.5``, ±inf) or lies beyond ±2**62 is outside every integer domain. The Spark SQL
    dialect (`dp_pipeline.engines.spark_sql.coding`) applies the same rule. Keys of the
    masked rows are 0 (placeholders, never looked up).
    """
    values = np.asarray(values, dtype=np.float64)
    missing = np.isnan(values)
    with np.errstate(invalid="ignore"):
        integral = (np.rint(values) == values) & (np.abs(values) <= KEY_LIMIT)
    keys = np.where(integral, values, 0.0).astype(np.int64)
    return keys, missing, ~missing & ~integral
