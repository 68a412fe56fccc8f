"""``aggregate(df, queries)``: the one backend interface over every engine path.

A pandas DataFrame is aggregated by the pandas engine (`engines.pandas`), a
Spark DataFrame by `engines.spark` (the one Parquet pass over a bare scan of
local Parquet files when it applies, Spark SQL jobs otherwise); every path
returns one `CellAggregates` per query, bit-identical across paths. PySpark is
optional: its adapter is loaded only for a Spark DataFrame.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import pandas as pd

from dp_pipeline.engines.base import CellAggregates
from dp_pipeline.engines.pandas.aggregate import aggregate as aggregate_pandas_queries
from dp_pipeline.query.spec import QuerySpec

__all__ = ["CellAggregates", "aggregate"]


def aggregate(df, queries: Sequence[QuerySpec], *, derived: dict | None = None):
    """One `CellAggregates` per query in ``queries`` over ``df`` (pandas or Spark).

    Guarantee: each query's rows are coded, validated and bounded by its contribution
    bounds (at most ``max_cells`` cells, ``max_per_cell`` rows per cell per unit; sums
    clamped into the bounds), so one unit moves each vector by at most the query's
    sensitivity. ``derived`` (Spark only): key columns computed from the input
    (`dp_pipeline.query.quantile_grid.GridPosition`).
    """
    queries = list(queries)
    if isinstance(df, pd.DataFrame):
        if derived:
            raise ValueError("derived columns are for Spark inputs; add them to the pandas frame")
        return aggregate_pandas_queries(df, queries)
    # The Spark adapter imports PySpark, an optional dependency.
    spark_adapter = importlib.import_module("dp_pipeline.engines.spark.dense")
    return spark_adapter.aggregate(df, queries, derived=derived)
