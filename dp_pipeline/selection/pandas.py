"""DP quantiles and top-k on pandas: bucket counts by the pandas engine, selection on the driver.

Bins with the same IEEE expression as the Spark path, so both release the same
selection for the same key and labels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.pandas.aggregate import input_column, run_pandas
from dp_pipeline.query.diagnostics import Diagnostics, invalid_rows_error
from dp_pipeline.selection.query import QuantileQuery, TopKQuery

__all__ = ["run_quantile_pandas", "run_top_k_pandas"]


def run_quantile_pandas(df: pd.DataFrame, query: QuantileQuery) -> pd.DataFrame:
    """Bin ``query.column`` on the candidate grid with numpy; select on the driver."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(df).__name__}")
    series = input_column(df, query.column, "quantile")
    if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
        raise TypeError(
            f"quantile column {query.column!r} has dtype {series.dtype}; it must be numeric"
        )
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    rows_invalid = int(bad.sum())
    if rows_invalid and query.on_invalid == "error":
        raise invalid_rows_error(query.column, "hold null, NaN or infinite values")
    positions, outside = query.positions(values[~bad])
    bucket_counts = np.bincount(positions, minlength=len(query.candidates)).astype(np.int64)
    diagnostics = Diagnostics(
        rows_in=len(df),
        rows_invalid_value=rows_invalid,
        rows_clamped=int(outside.sum()),
        rows_used=int(positions.size),
    )
    return query.release(bucket_counts, diagnostics)


def run_top_k_pandas(df: pd.DataFrame, query: TopKQuery) -> pd.DataFrame:
    """Bounded per-candidate counts by the count engine; select on the driver."""
    if query.method == "one_shot":
        noisy, diagnostics = run_pandas(df, query.counts)
        return query.release(noisy["count"].to_numpy(dtype=np.int64), diagnostics)
    (counts,) = aggregate(df, [query.counts])
    return query.release(counts.count, counts.diagnostics)
