"""The one return type of every engine's ``aggregate(df, queries)``: dense true vectors.

`CellAggregates` holds one query's true bounded aggregates over its whole
declared domain (int64 by cell index, zero for empty cells) and the run's
`Diagnostics`. They are NOT private: they are what noise is added to
(`dp_pipeline.udfs.noise.noisy_dense`) or what a selection scores; never publish
them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dp_pipeline.errors import InternalError
from dp_pipeline.query.diagnostics import Diagnostics

__all__ = ["CellAggregates", "dense_aggregates"]


@dataclass(frozen=True, repr=False)
class CellAggregates:
    """One query's true bounded ``count`` (and ``sum``, in granularity units) per cell."""

    count: np.ndarray
    sum: np.ndarray | None
    diagnostics: Diagnostics

    def vectors(self) -> dict[str, np.ndarray | None]:
        """``{"count": ..., "sum": ...}``, the form `noisy_dense` takes."""
        return {"count": self.count, "sum": self.sum}

    def __repr__(self) -> str:  # the true values stay out of logs and tracebacks
        return f"CellAggregates({self.count.size} cells, sum={self.sum is not None})"


def dense_aggregates(
    total: int,
    cells: np.ndarray,
    counts: np.ndarray,
    sums: np.ndarray | None,
    diagnostics: Diagnostics,
) -> CellAggregates:
    """`CellAggregates` of ``total`` cells from the non-empty ``cells``' counts and sums."""
    cells = np.asarray(cells, dtype=np.int64)
    if cells.size and (cells.min() < 0 or cells.max() >= total):
        raise InternalError(f"aggregates name cells outside 0..{total - 1}")
    count = np.zeros(total, dtype=np.int64)
    count[cells] = counts
    dense_sum = None
    if sums is not None:
        dense_sum = np.zeros(total, dtype=np.int64)
        dense_sum[cells] = sums
    return CellAggregates(count, dense_sum, diagnostics)
