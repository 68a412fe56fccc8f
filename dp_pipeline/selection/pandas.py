"""DP quantiles and top-k on pandas: bucket counts by the pandas engine, selection on the driver.

Bins with the same IEEE expression as the Spark path and bounds each privacy unit's
rows by the same keyed rule, so both release the same selection for the same key
and labels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.bounding import bound_rows, unit_keys
from dp_pipeline.engines.pandas.aggregate import (
    check_key_dtype,
    code_keys,
    drop_null_units,
    input_column,
    run_pandas,
    unit_column,
    unit_values,
)
from dp_pipeline.errors import DPTypeError
from dp_pipeline.query.diagnostics import Diagnostics, invalid_rows_error
from dp_pipeline.selection.query import QuantileQuery, TopKQuery

__all__ = ["run_quantile_pandas", "run_top_k_pandas"]


def run_quantile_pandas(df: pd.DataFrame, query: QuantileQuery) -> pd.DataFrame:
    """Bin ``query.column`` on the candidate grid per group, bound each unit's rows by the
    count engine's keyed rule (`dp_pipeline.engines.bounding.bound_rows`); select on the driver.

    Guarantee: after bounding, each privacy unit holds at most ``max_per_cell`` rows in
    each of at most ``max_cells`` groups, so it moves a group's rank losses by at most
    the mechanism's Δu and changes at most ``runs`` groups' selections.
    """
    if not isinstance(df, pd.DataFrame):
        raise DPTypeError(f"expected a pandas DataFrame, got {type(df).__name__}")
    selection = query.selection
    series = input_column(df, query.column, "quantile")
    if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
        raise DPTypeError(
            f"quantile column {query.column!r} has dtype {series.dtype}; it must be numeric"
        )
    groups = selection.groups
    key_series = []
    if groups is not None:
        key_series = [input_column(df, d.column, "key") for d in groups.domains]
        for key, domain in zip(key_series, groups.domains, strict=True):
            check_key_dtype(key, domain)
    units = unit_column(df, selection.privacy_unit)
    valid = np.ones(len(df), dtype=bool)
    null_keys: dict[str, int] = {}
    outside_domains: dict[str, int] = {}
    key_positions = []
    if groups is not None:
        key_positions, null_keys, outside_domains = code_keys(
            key_series, groups, query.on_invalid, valid
        )
    rows_null_unit = drop_null_units(units, selection.privacy_unit, query.on_invalid, valid)
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = valid & ~np.isfinite(values)
    rows_invalid = int(bad.sum())
    if rows_invalid and query.on_invalid == "error":
        raise invalid_rows_error(query.column, "hold null, NaN or infinite values")
    valid &= ~bad
    all_valid = bool(valid.all())
    positions, outside = query.positions(values if all_valid else values[valid])
    if groups is None:
        cells = np.zeros(positions.size, dtype=np.int64)
    else:
        cells = groups.cell_index(key_positions if all_valid else [p[valid] for p in key_positions])
    removed = (0, 0, 0)
    if units is not None:
        salt = query.salt()
        codes, keys = unit_keys(unit_values(units if all_valid else units[valid]), salt)
        bounded = bound_rows(
            codes, keys, cells, positions, selection.max_cells, selection.max_per_cell, salt
        )
        cells, positions = cells[bounded.keep], positions[bounded.keep]
        removed = (
            bounded.rows_removed_max_per_cell,
            bounded.rows_removed_max_cells,
            bounded.pairs_removed_max_cells,
        )
    width = len(query.candidates)
    buckets = np.bincount(cells * width + positions, minlength=selection.group_count * width)
    diagnostics = Diagnostics(
        rows_in=len(df),
        rows_null_key=null_keys,
        rows_out_of_domain=outside_domains,
        rows_null_unit=rows_null_unit,
        rows_invalid_value=rows_invalid,
        rows_clamped=int(outside.sum()),
        rows_removed_max_per_cell=removed[0],
        rows_removed_max_cells=removed[1],
        unit_cells_removed_max_cells=removed[2],
        rows_used=int(positions.size),
    )
    return query.release(
        buckets.astype(np.int64).reshape(selection.group_count, width), diagnostics
    )


def run_top_k_pandas(df: pd.DataFrame, query: TopKQuery) -> pd.DataFrame:
    """Bounded per-candidate counts by the count engine; select on the driver."""
    if query.method == "one_shot":
        noisy, diagnostics = run_pandas(df, query.counts)
        return query.release(noisy["count"].to_numpy(dtype=np.int64), diagnostics)
    (counts,) = aggregate(df, [query.counts])
    return query.release(counts.count, counts.diagnostics)
