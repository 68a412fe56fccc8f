"""Running a `VarianceSpec` on pandas (and, from the derived Spark columns, on Spark).

Both engines add the same two derived value columns to the input (the centred values
``2x − lower − upper`` and the squares of their clamped granularity units, computed with
the IEEE operations the engines round with, `dp_pipeline.engines.numpy_rules`), aggregate
the variance's two queries with the ordinary engines (`dp_pipeline.engines.backend`),
noise the dense true vectors with `noisy_dense` (the keyed streams the Spark noise jobs
use, so the draws are the same) and post-process with
`dp_pipeline.query.variance.variance_columns`: pandas and Spark release the same bytes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.base import CellAggregates
from dp_pipeline.engines.numpy_rules import rounded_units
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.cost import release_info
from dp_pipeline.query.result_info import attach_info
from dp_pipeline.query.variance import VarianceSpec, variance_columns
from dp_pipeline.udfs.noise import noisy_dense

__all__ = [
    "aggregate_variance",
    "check_value_column",
    "run_variance",
    "variance_frame",
    "with_variance_columns",
]


def check_value_column(spec: VarianceSpec, columns: list[str]) -> None:
    """Refuse an input without the value column or that already has a derived column's name."""
    if spec.column not in columns:
        raise DPValueError(
            f"value column {spec.column!r} is not in the DataFrame; its columns are {columns}"
        )
    taken = [name for name in spec.derived_columns if name in columns]
    if taken:
        raise DPValueError(
            f"{spec.statistic} of {spec.column!r} adds the column {taken[0]!r}, which the "
            f"DataFrame already has; rename that column"
        )


def with_variance_columns(df: pd.DataFrame, spec: VarianceSpec) -> pd.DataFrame:
    """``df`` with the centred and squared columns (NaN where the value is not a finite number)."""
    check_value_column(spec, list(df.columns))
    series = df[spec.column]
    if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
        raise DPTypeError(
            f"value column {spec.column!r} has dtype {series.dtype}; {spec.statistic} needs a "
            f"numeric column"
        )
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    bounds = spec.bounds
    # 2x is exact; one rounding for the shift, as the Spark expression does.
    centred = values * 2.0 - float(bounds.lower + bounds.upper)
    raw, _ = rounded_units(centred, spec.centered.value_bounds)
    width = float(spec.width)
    with np.errstate(invalid="ignore"):
        units = np.clip(raw, -width, width)
    centred_name, squared_name = spec.derived_columns
    return df.assign(**{centred_name: centred, squared_name: units * units})


def aggregate_variance(derived, spec: VarianceSpec) -> tuple[CellAggregates, CellAggregates]:
    """The true aggregates of ``spec``'s two queries over ``derived`` (pandas or Spark, its
    derived columns added). A value error of ``on_invalid="error"`` names the user's value
    column, not the derived one it was found in (the same rule, the same rows)."""
    try:
        centered, squares = aggregate(derived, [spec.centered, spec.squares])
    except DPValueError as error:
        message = str(error)
        for name in spec.derived_columns:
            message = message.replace(f"column {name!r}", f"column {spec.column!r}")
        if message == str(error):
            raise
        raise DPValueError(message) from None
    return centered, squares


def variance_frame(
    keys: pd.DataFrame, spec: VarianceSpec, centered: CellAggregates, squares: CellAggregates
) -> pd.DataFrame:
    """The released variance (or std) of every declared cell: ``keys`` then count and value."""
    noisy_centered = noisy_dense(spec.centered, centered.vectors())
    noisy_squares = noisy_dense(spec.squares, squares.vectors())
    columns = variance_columns(spec, noisy_centered, noisy_squares)
    out = keys.copy()
    for name, values in columns.items():
        out[name] = values
    return out


def cell_keys(df: pd.DataFrame, spec: VarianceSpec) -> pd.DataFrame:
    """Every declared cell's key columns, in cell-index order, with the input's dtypes."""
    cells = spec.cells
    keys = cells.decode(np.arange(cells.total, dtype=np.int64))
    columns = {}
    for domain, values in zip(cells.domains, keys, strict=True):
        dtype = df[domain.column].dtype
        if domain.kind == "int" and not (
            isinstance(dtype, np.dtype) and np.issubdtype(dtype, np.integer)
        ):  # nullable or float input: the released keys hold no nulls
            dtype = np.dtype(np.int64)
        columns[domain.column] = pd.array(values, dtype=dtype)
    return pd.DataFrame(columns)


def run_variance(df: pd.DataFrame, spec: VarianceSpec) -> pd.DataFrame:
    """``spec`` on the pandas ``df``: every declared cell with ``count`` and ``var`` / ``std``,
    ``attrs["dp"]`` the `ReleaseInfo` (three events) with the run's diagnostics."""
    info = release_info(spec)  # the cost is known before the data is touched
    derived = with_variance_columns(df, spec)
    centered, squares = aggregate_variance(derived, spec)
    result = variance_frame(cell_keys(df, spec), spec, centered, squares)
    attach_info(result, info.with_diagnostics(centered.diagnostics))
    return result
