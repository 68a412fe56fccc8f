"""The one backend interface over every engine path: dense true vectors, or noisy cells.

- `aggregate(df, queries)`: one dense `CellAggregates` per query on the driver. A
  pandas DataFrame is aggregated by the pandas engine (`engines.pandas`), a Spark
  DataFrame by `engines.spark` (the one Parquet pass over a bare scan of local
  Parquet files when it applies, Spark SQL jobs otherwise); bit-identical across paths.
- `noisy_cells(df, queries)` (Spark): one bounding pass kept on the executors, from
  which `NoisyCells` hands out lazy noisy DataFrames (`noisy_table`), released tables
  collected to the driver (`collect_released`) and dense true aggregates
  (`true_aggregates`). `noisy_tables(df, queries)` is the lazy form for every query.

Where the noise is drawn is one rule, `collect_noisy_cells` in
`dp_pipeline.engines.spark.noise`: a release's collected tables are noised on the
driver when they declare at most `DRIVER_NOISE_CELLS` cells together (no Spark job's
fixed cost) and by the Spark noise job above it (the driver never holds dense
vectors of more cells); a lazy noisy DataFrame is always noised on the executors.
The draws are the same wherever they run. PySpark is optional: the Spark adapter
is loaded only for a Spark DataFrame.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import pandas as pd

from dp_pipeline.engines.base import CellAggregates
from dp_pipeline.engines.pandas.aggregate import aggregate as aggregate_pandas_queries
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.spec import QuerySpec

__all__ = ["CellAggregates", "aggregate", "noisy_cells", "noisy_tables"]


def _spark_adapter():
    # The Spark adapter imports PySpark, an optional dependency.
    return importlib.import_module("dp_pipeline.engines.spark.cells")


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
            raise DPValueError("derived columns are for Spark inputs; add them to the pandas frame")
        return aggregate_pandas_queries(df, queries)
    return _spark_adapter().aggregate(df, queries, derived=derived)


def noisy_cells(
    df, queries: Sequence[QuerySpec], *, derived: dict | None = None, collect: bool = False
):
    """`dp_pipeline.engines.spark.cells.NoisyCells` of ``queries`` over the Spark ``df``.

    Guarantee: the same bounding as `aggregate` (one pass for all queries, which must
    share the privacy unit column); each query's noise is drawn from its own keyed
    streams, so every form it hands out equals the pandas engine's release bit for
    bit. ``collect``: the Parquet pass keeps its rows on the driver (a release that
    collects every cell anyway). Diagnostics are computed eagerly: bad data raises
    here with ``on_invalid="error"``, before any noise.
    """
    if isinstance(df, pd.DataFrame):
        raise DPTypeError(
            "noisy_cells takes a Spark DataFrame; for a pandas DataFrame use aggregate "
            "and add noise with dp_pipeline.udfs.noise.noisy_dense"
        )
    return _spark_adapter().noisy_cells(df, list(queries), derived=derived, collect=collect)


def noisy_tables(
    df, queries: Sequence[QuerySpec], *, wrap_udf: Callable[[Callable], Callable] | None = None
):
    """(lazy noisy Spark DataFrame, `Diagnostics`) per query of the Spark ``df``.

    Guarantee: as `noisy_cells`; the noise is added on the executors when a table
    runs. Queries must also have distinct (release_id, table) stream labels.
    ``wrap_udf`` wraps the noise function (tests inject a one-time task failure).
    """
    if isinstance(df, pd.DataFrame):
        raise DPTypeError("noisy_tables takes a Spark DataFrame; for pandas use df.dp")
    return _spark_adapter().noisy_tables(df, list(queries), wrap_udf=wrap_udf)
