"""The Spark engine behind `dp_pipeline.engines.backend.aggregate`: dense vectors on the driver.

Runs `dp_pipeline.engines.spark.aggregate.aggregate_queries` (the Parquet pass or
the Spark SQL jobs) and collects the non-empty cells, at most one row per
declared cell, into one `CellAggregates` per query.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as sf

from dp_pipeline.engines.base import CellAggregates, dense_aggregates
from dp_pipeline.engines.spark.aggregate import aggregate_queries
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN

__all__ = ["aggregate"]

_COLUMNS = [TABLE_COLUMN, CELL_COLUMN, "n", "s"]


def aggregate(
    df, queries: Sequence[QuerySpec], *, derived: dict | None = None
) -> list[CellAggregates]:
    """One `CellAggregates` per query of the Spark DataFrame ``df``, in one pass."""
    queries = list(queries)
    aggregates, diagnostics = aggregate_queries(df, queries, collect=True, derived=derived)
    if isinstance(aggregates, pa.Table):
        rows = aggregates.filter(pc.greater_equal(aggregates.column(CELL_COLUMN), 0))
        rows = rows.select(_COLUMNS)
    else:
        try:
            rows = aggregates.filter(sf.col(CELL_COLUMN) >= 0).select(*_COLUMNS).toArrow()
        finally:
            aggregates.unpersist()
    tables = rows.column(TABLE_COLUMN).to_numpy()
    cells = rows.column(CELL_COLUMN).to_numpy()
    counts = rows.column("n").to_numpy()
    sums = rows.column("s").to_pylist()  # exact (clamped into ±2**62): int64 after this
    results = []
    for index, (query, query_diagnostics) in enumerate(zip(queries, diagnostics, strict=True)):
        mine = tables == index
        query_sums = None
        if query.column is not None:
            query_sums = np.array(
                [int(s) for s, m in zip(sums, mine, strict=True) if m], dtype=np.int64
            )
        results.append(
            dense_aggregates(
                query.cells.total, cells[mine], counts[mine], query_sums, query_diagnostics
            )
        )
    return results
