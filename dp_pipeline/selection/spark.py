"""DP selection on Spark: ``dp_quantile``, ``dp_median``, ``dp_top_k``.

The utilities' inputs are Spark aggregations; the selection runs on the driver
with the same code as the pandas engine (`dp_pipeline.selection.query`), so a
fixed key, release id and table give the same result on both engines.

- quantile / median: one ``groupBy`` of the grid position of every value
  (``clip(floor((clip(x, lo, hi) - lo) / g), 0, m - 1)`` in IEEE double, the
  expression of `dp_pipeline.query.quantile_grid.quantile_positions`), collected to
  the driver as at most ``m + 1`` rows (m candidates, one row of invalid values).
- top-k: the count engine's bounded per-candidate aggregation
  (`dp_pipeline.spark`): ``peeling`` collects the true bounded counts (one row
  per non-empty candidate) and peels on the driver; ``one_shot`` collects the
  count engine's noisy release (discrete Laplace noise added on the executors
  from the per-partition streams) and keeps its top k.

Each function reads the DataFrame eagerly and returns a small pandas
DataFrame whose ``attrs["dp"]`` is a `SelectionInfo`, exactly as
``df.dp.quantile / median / top_k`` do.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
from pyspark.sql import functions as sf
from pyspark.sql.types import NumericType

from dp_pipeline.engines.backend import aggregate, noisy_tables
from dp_pipeline.engines.spark_sql.coding import invalid_number, quantile_position
from dp_pipeline.query.diagnostics import Diagnostics, invalid_rows_error
from dp_pipeline.query.signatures import shim
from dp_pipeline.selection.query import QuantileQuery, TopKQuery
from dp_pipeline.selection.signatures import quantile_signature, selection_doc, top_k_signature

__all__ = [
    "check_numeric_column",
    "dp_median",
    "dp_quantile",
    "dp_top_k",
    "run_quantile_spark",
    "run_top_k_spark",
]

_POSITION = "_dp_position"
_OUTSIDE = "_dp_outside"


def _quantile(statistic: str):
    signature = quantile_signature(statistic, leading=("df",))

    def run(df, **arguments) -> pd.DataFrame:
        if statistic == "median":
            arguments["q"] = Fraction(1, 2)
        return run_quantile_spark(df, QuantileQuery.build(statistic, **arguments))

    return shim(f"dp_{statistic}", signature, selection_doc(statistic, signature), run, __name__)


def _top_k():
    signature = top_k_signature(leading=("df",))

    def run(df, **arguments) -> pd.DataFrame:
        return run_top_k_spark(df, TopKQuery.build(**arguments))

    return shim("dp_top_k", signature, selection_doc("top_k", signature), run, __name__)


dp_quantile = _quantile("quantile")
dp_median = _quantile("median")
dp_top_k = _top_k()


def check_numeric_column(df, column: str, role: str) -> None:
    """Raise, naming ``role`` (e.g. "quantile column"), unless ``column`` is numeric in ``df``."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise ValueError(f"{role} {column!r} is not in the DataFrame; its columns are {df.columns}")
    kind = fields[column]
    if not isinstance(kind, NumericType):
        raise TypeError(
            f"{role} {column!r} has Spark type {kind.simpleString()}; it must be numeric"
        )


def run_quantile_spark(df, query: QuantileQuery) -> pd.DataFrame:
    """One Spark job: per-grid-position counts (and invalid/clamped rows); select on the driver."""
    check_numeric_column(df, query.column, "quantile column")
    value, invalid = invalid_number(query.column)
    low, high = (float(b) for b in query.bounds)
    position = sf.coalesce(
        quantile_position(query.column, query.bounds, query.granularity), sf.lit(-1).cast("long")
    )
    coded = df.select(
        position.alias(_POSITION),
        sf.when(~invalid & ((value < sf.lit(low)) | (value > sf.lit(high))), 1)
        .otherwise(0)
        .alias(_OUTSIDE),
    )
    rows = (
        coded.groupBy(_POSITION)
        .agg(sf.count(sf.lit(1)).alias("n"), sf.sum(_OUTSIDE).alias("outside"))
        .collect()
    )
    bucket_counts = np.zeros(len(query.candidates), dtype=np.int64)
    rows_invalid = rows_clamped = 0
    for row in rows:
        position_value = int(row[_POSITION])
        if position_value < 0:
            rows_invalid = int(row["n"])
        else:
            bucket_counts[position_value] = int(row["n"])
            rows_clamped += int(row["outside"])
    if rows_invalid and query.on_invalid == "error":
        raise invalid_rows_error(query.column, "hold null, NaN or infinite values")
    used = int(bucket_counts.sum())
    diagnostics = Diagnostics(
        rows_in=used + rows_invalid,
        rows_invalid_value=rows_invalid,
        rows_clamped=rows_clamped,
        rows_used=used,
    )
    return query.release(bucket_counts, diagnostics)


def run_top_k_spark(df, query: TopKQuery) -> pd.DataFrame:
    """Per-candidate bounded counts in Spark (true or noisy); select on the driver."""
    spec = query.counts
    total = spec.cells.total
    counts = np.zeros(total, dtype=np.int64)
    if query.method == "one_shot":
        ((noisy, diagnostics),) = noisy_tables(df, [spec])
        (domain,) = spec.cells.domains
        released = noisy.select(query.column, "count").collect()
        keys = np.array([row[0] for row in released], dtype=object)
        positions = domain.positions(keys.astype(np.int64) if domain.kind == "int" else keys)
        counts[positions] = [int(row[1]) for row in released]
        return query.release(counts, diagnostics)
    (true,) = aggregate(df, [spec])
    return query.release(true.count, true.diagnostics)
