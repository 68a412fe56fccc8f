"""The public candidate grid of a DP quantile, and the one rule that bins a value on it.

Every engine path (pandas, Spark SQL, the Parquet pass) bins with
`quantile_positions`' IEEE expression, so all of them put every value in the
same bucket. The grid is fixed before the data is seen (bounds, granularity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = [
    "MAX_QUANTILE_CANDIDATES",
    "TOP_K_METHODS",
    "GridPosition",
    "check_positive_int",
    "check_value_bounds",
    "quantile_candidate_count",
    "quantile_candidates",
    "quantile_positions",
]

# Candidate grids beyond this size would make the per-candidate arrays unwieldy.
MAX_QUANTILE_CANDIDATES = 10_000_000
TOP_K_METHODS = ("peeling", "one_shot")


def quantile_candidate_count(bounds, granularity) -> int:
    """How many candidates ``lo + i·granularity <= hi`` there are (checked, not listed)."""
    low, high = check_value_bounds(bounds)
    step = positive_rational(granularity, "granularity")
    count = math.floor((high - low) / step) + 1
    if count > MAX_QUANTILE_CANDIDATES:
        raise DPValueError(
            f"bounds {bounds!r} with granularity {granularity!r} give {count} candidates "
            f"(more than {MAX_QUANTILE_CANDIDATES}); use a coarser granularity"
        )
    return count


def quantile_candidates(bounds, granularity) -> list[Fraction]:
    """The public candidate grid ``lo + i·granularity <= hi`` (exact rationals)."""
    count = quantile_candidate_count(bounds, granularity)
    low, _ = check_value_bounds(bounds)
    step = positive_rational(granularity, "granularity")
    return [low + i * step for i in range(count)]


def quantile_positions(values, bounds, granularity) -> tuple[np.ndarray, np.ndarray]:
    """(grid position of each value, mask of values outside ``bounds``).

    The position of ``x`` is the index of the largest candidate ``<= x``,
    computed as ``clip(floor((clip(x, lo, hi) - lo) / g), 0, m - 1)`` in IEEE double
    arithmetic (``lo``, ``g`` rounded to the nearest double once). The Spark
    engine evaluates the same expression, so both engines bin every value
    identically; it is exact for integer data on an integer grid (|x| < 2**53)
    and may place a value within one rounding error of a grid point in the
    neighbouring bin otherwise (any fixed per-value rule keeps Δu = 1).
    ``values`` must be finite (checked by the caller).
    """
    low, high = check_value_bounds(bounds)
    count = quantile_candidate_count(bounds, granularity)  # per row group: never list them
    step = positive_rational(granularity, "granularity")
    data = np.asarray(values, dtype=float)
    low_f, high_f = float(low), float(high)
    clamped = np.clip(data, low_f, high_f)
    raw = np.floor((clamped - low_f) / float(step))
    positions = np.clip(raw, 0, count - 1).astype(np.int64)
    outside = (data < low_f) | (data > high_f)
    return positions, outside


@dataclass(frozen=True)
class GridPosition:
    """A derived integer key: the `quantile_positions` of a numeric ``column``.

    Null where the value is null, NaN or infinite; ``0 .. size - 1`` otherwise.
    Both Spark aggregation paths (`dp_pipeline.engines.spark.aggregate.aggregate_queries`'s
    ``derived``) compute it with the same IEEE operations as the pandas engine.
    """

    column: str
    bounds: tuple[Fraction, Fraction]
    granularity: Fraction

    @property
    def size(self) -> int:
        return quantile_candidate_count(self.bounds, self.granularity)

    def positions(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, finite mask) of float64 ``values`` (positions of non-finite: 0)."""
        finite = np.isfinite(values)
        positions = np.zeros(values.size, dtype=np.int64)
        positions[finite], _ = quantile_positions(values[finite], self.bounds, self.granularity)
        return positions, finite


def check_value_bounds(bounds) -> tuple[Fraction, Fraction]:
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise DPTypeError(f"bounds must be a pair (lower, upper), got {bounds!r}") from None
    low = exact_rational(low, "bounds lower")
    high = exact_rational(high, "bounds upper")
    if low > high:
        raise DPValueError(
            f"bounds {tuple(bounds)!r} are reversed: the lower bound must be <= the upper"
        )
    return low, high


def check_positive_int(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise DPTypeError(f"{name} must be a positive integer, got {value!r}")
    if value < 1:
        raise DPValueError(f"{name} must be >= 1, got {value}")
