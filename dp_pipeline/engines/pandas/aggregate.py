"""The pandas engine: rows of a DataFrame -> dense true cell vectors + diagnostics.

Same rules as the Parquet pass on Spark (`dp_pipeline.engines.numpy_rules`,
`dp_pipeline.engines.bounding`), and noise per noise partition by the shared
`dp_pipeline.udfs` code, so the same data, key, release id and table give a
bit-identical release on pandas and Spark.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dp_pipeline.engines.base import CellAggregates
from dp_pipeline.engines.bounding import (
    BoundingSalt,
    bound_contributions,
    bound_shared_rows,
    unit_keys,
)
from dp_pipeline.engines.numpy_rules import (
    cell_sums,
    hierarchy_breaks,
    integral_keys,
    value_units,
)
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.diagnostics import Diagnostics, invalid_rows_error
from dp_pipeline.query.domain import Domain
from dp_pipeline.query.hierarchy import HIERARCHY_RULE, HierarchyRule
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import noisy_dense, release_columns

__all__ = [
    "aggregate",
    "aggregate_pandas",
    "code_keys",
    "drop_null_units",
    "input_column",
    "release_frame",
    "run_pandas",
    "unit_column",
    "unit_values",
]


def input_column(df: pd.DataFrame, name: str, role: str) -> pd.Series:
    if name not in df.columns:
        raise DPValueError(
            f"{role} column {name!r} is not in the DataFrame; its columns are {list(df.columns)}"
        )
    return df[name]


def check_key_dtype(series: pd.Series, domain: Domain) -> None:
    """Raise `DPTypeError` naming the column when its dtype cannot hold ``domain``'s keys."""
    dtype = series.dtype
    if domain.kind == "int":
        # A float column is an integer column with missing values (NaN), as pandas and
        # Parquet writers make it: its NaN rows are null keys, non-integers out of domain.
        if not (pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_float_dtype(dtype)):
            raise DPTypeError(
                f"key column {domain.column!r} has dtype {dtype} but its domain holds integers; "
                f"it must have an integer dtype (or a float dtype holding integers and NaN)"
            )
    elif not (pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype)):
        raise DPTypeError(
            f"key column {domain.column!r} has dtype {dtype} but its domain holds strings; "
            f"it must have a string or object dtype"
        )


def key_positions(series: pd.Series, domain: Domain) -> tuple[np.ndarray, np.ndarray]:
    """(null mask, position of every row's key in ``domain``: -1 outside, anything if null)."""
    if domain.kind == "int" and pd.api.types.is_float_dtype(series.dtype):
        values, null, not_integral = integral_keys(
            series.to_numpy(dtype=np.float64, na_value=np.nan)
        )
        pos = domain.positions(values)
        pos[not_integral] = -1
        return null, pos
    null = series.isna().to_numpy()
    if domain.kind == "int":
        values = series.to_numpy(dtype=np.int64, na_value=0)
    else:
        values = np.where(null, "", series.to_numpy(dtype=object))
    if not null.any():  # the common case: no masked copies of 10^7-row columns
        return null, domain.positions(values)
    pos = np.full(len(values), -1, dtype=np.int64)
    pos[~null] = domain.positions(values[~null])
    return null, pos


def unit_column(df: pd.DataFrame, privacy_unit: str | None) -> pd.Series | None:
    """The privacy unit column (None without a unit), refused unless integers or strings."""
    if privacy_unit is None:
        return None
    series = input_column(df, privacy_unit, "privacy_unit")
    if not (
        pd.api.types.is_integer_dtype(series.dtype) or pd.api.types.is_string_dtype(series.dtype)
    ):
        raise DPTypeError(
            f"privacy_unit column {privacy_unit!r} has dtype {series.dtype}; "
            f"it must hold integers or strings"
        )
    return series


def code_keys(
    key_series: Sequence[pd.Series], cells, on_invalid: str, valid: np.ndarray
) -> tuple[list[np.ndarray], dict[str, int], dict[str, int]]:
    """(key positions, null-key rows, out-of-domain rows per column); clears ``valid`` in place.

    A row is attributed to the first key column (in ``cells`` order) that fails; under
    ``on_invalid="error"`` the first failing column is refused (`invalid_rows_error`).
    """
    positions = []
    null_counts: dict[str, int] = {}
    ood_counts: dict[str, int] = {}
    for series, domain in zip(key_series, cells.domains, strict=True):
        null, pos = key_positions(series, domain)
        dropped_null = valid & null
        dropped_ood = valid & ~null & (pos < 0)
        null_counts[domain.column] = int(dropped_null.sum())
        ood_counts[domain.column] = int(dropped_ood.sum())
        if on_invalid == "error":
            if null_counts[domain.column]:
                raise invalid_rows_error(domain.column, "have a null key")
            if ood_counts[domain.column]:
                raise invalid_rows_error(
                    domain.column, f"have a key outside the declared domain {domain!r}"
                )
        valid &= ~null & (pos >= 0)
        positions.append(pos)
    return positions, null_counts, ood_counts


def drop_null_units(
    units: pd.Series | None, privacy_unit: str | None, on_invalid: str, valid: np.ndarray
) -> int:
    """Rows still ``valid`` whose privacy unit is null (cleared in place, or refused)."""
    if units is None:
        return 0
    null_unit = valid & units.isna().to_numpy()
    rows_null_unit = int(null_unit.sum())
    if rows_null_unit and on_invalid == "error":
        raise invalid_rows_error(privacy_unit, "have a null privacy unit")
    valid &= ~null_unit
    return rows_null_unit


def unit_values(units: pd.Series) -> np.ndarray:
    """Privacy units as exact values: int64 for any integer dtype, else objects.

    A nullable ``Int64`` column's ``to_numpy()`` is float64 (5 -> 5.0, and inexact
    above 2**53), which would hash as "5.0" where Spark hashes "5"; null rows are
    dropped before this is used, so they may take any placeholder.
    """
    if pd.api.types.is_integer_dtype(units.dtype):
        return units.to_numpy(dtype=np.int64, na_value=0)
    return units.to_numpy(dtype=object)


def _shared_row_cells(df: pd.DataFrame, spec: QuerySpec, valid: np.ndarray) -> np.ndarray:
    """Each valid row's cell index over the union of its group's keys (-1 if undefined)."""
    union = spec.shared_rows.cells
    positions = []
    defined = np.ones(int(valid.sum()), dtype=bool)
    for domain in union.domains:
        series = input_column(df, domain.column, "key")
        check_key_dtype(series, domain)
        null_rows, positions_all = key_positions(series, domain)
        pos = np.where(null_rows, -1, positions_all)[valid]
        defined &= pos >= 0
        positions.append(np.where(defined, pos, 0))
    return np.where(defined, union.cell_index(positions), -1)


def hierarchy_positions(
    df: pd.DataFrame, rule: HierarchyRule, known: dict[str, np.ndarray] | None = None
) -> list[np.ndarray]:
    """Row positions of each of ``rule``'s domains, -1 where null or outside.

    ``known``: positions the caller already has of some of these columns in the
    same domains, read as they are (their null rows may hold anything: the caller
    drops those rows as null keys before the hierarchy is looked at).
    """
    out = []
    for domain in rule.domains:
        if known is not None and domain.column in known:
            out.append(known[domain.column])
            continue
        series = input_column(df, domain.column, "key")
        check_key_dtype(series, domain)
        null, pos = key_positions(series, domain)
        out.append(np.where(null, -1, pos) if null.any() else pos)
    return out


def aggregate_pandas(
    df: pd.DataFrame, spec: QuerySpec
) -> tuple[dict[str, np.ndarray], list[pd.Series], Diagnostics]:
    """True bounded aggregates of every declared cell (dense int64 arrays by cell index).

    Returns ({"count": ..., "sum": ... or None}, the key columns, diagnostics).
    """
    if not isinstance(df, pd.DataFrame):
        raise DPTypeError(f"expected a pandas DataFrame, got {type(df).__name__}")
    cells = spec.cells
    key_series = [input_column(df, d.column, "key") for d in cells.domains]
    for series, domain in zip(key_series, cells.domains, strict=True):
        check_key_dtype(series, domain)
    unit_series = unit_column(df, spec.privacy_unit)
    value_series = input_column(df, spec.column, "summed") if spec.column else None
    if value_series is not None and (
        not pd.api.types.is_numeric_dtype(value_series.dtype)
        or pd.api.types.is_bool_dtype(value_series.dtype)
    ):
        raise DPTypeError(
            f"summed column {spec.column!r} has dtype {value_series.dtype}; it must be numeric"
        )

    n = len(df)
    valid = np.ones(n, dtype=bool)
    positions, null_counts, ood_counts = code_keys(key_series, cells, spec.on_invalid, valid)
    rows_hierarchy = 0
    if spec.hierarchy is not None:
        # After the key checks, before the unit and value checks: every engine's order.
        known = {
            d.column: pos
            for d, pos in zip(cells.domains, positions, strict=True)
            if any(d.canonical() == h.canonical() for h in spec.hierarchy.domains)
        }
        rule = spec.hierarchy
        broken = valid & hierarchy_breaks(rule, hierarchy_positions(df, rule, known))
        rows_hierarchy = int(broken.sum())
        if rows_hierarchy and spec.on_invalid == "error":
            raise invalid_rows_error(spec.hierarchy.finest.column, HIERARCHY_RULE)
        valid &= ~broken

    rows_null_unit = drop_null_units(unit_series, spec.privacy_unit, spec.on_invalid, valid)

    rows_invalid_value = 0
    rows_clamped = 0
    units = None
    if value_series is not None:
        values = value_series.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = valid & ~np.isfinite(values)
        rows_invalid_value = int(bad.sum())
        if rows_invalid_value and spec.on_invalid == "error":
            raise invalid_rows_error(spec.column, "hold null, NaN or infinite values")
        valid &= ~bad
        units, clamped = value_units(values[valid], spec.value_bounds)
        rows_clamped = int(clamped.sum())

    all_valid = bool(valid.all())
    row_cells = cells.cell_index(positions if all_valid else [p[valid] for p in positions])
    total = cells.total
    removed_per_cell = removed_cells = pairs_removed = 0
    if unit_series is None:
        counts = np.bincount(row_cells, minlength=total).astype(np.int64)
        sums = None if units is None else cell_sums(row_cells, units, total)
        rows_used = int(row_cells.size)
    else:
        if spec.shared_rows is not None:
            salt = BoundingSalt.derive_shared(
                spec.master_key(), spec.release_id, spec.shared_rows.group
            )
            codes, ukeys = unit_keys(unit_values(unit_series)[valid], salt)
            shared_cells = _shared_row_cells(df, spec, valid)
            bounded = bound_shared_rows(codes, ukeys, row_cells, shared_cells, salt, units)
        else:
            salt = BoundingSalt.derive(spec.master_key(), spec.release_id, spec.table)
            codes, ukeys = unit_keys(unit_values(unit_series)[valid], salt)
            bounded = bound_contributions(
                codes, ukeys, row_cells, units, spec.max_cells, spec.max_per_cell, salt
            )
        counts = np.bincount(bounded.cells, weights=bounded.counts, minlength=total).astype(
            np.int64
        )
        sums = None if units is None else cell_sums(bounded.cells, bounded.sums, total)
        removed_per_cell = bounded.rows_removed_max_per_cell
        removed_cells = bounded.rows_removed_max_cells
        pairs_removed = bounded.pairs_removed_max_cells
        rows_used = int(bounded.counts.sum())

    diagnostics = Diagnostics(
        rows_in=n,
        rows_null_key=null_counts,
        rows_out_of_domain=ood_counts,
        rows_null_unit=rows_null_unit,
        rows_hierarchy_mismatch=rows_hierarchy,
        rows_invalid_value=rows_invalid_value,
        rows_clamped=rows_clamped,
        rows_removed_max_per_cell=removed_per_cell,
        rows_removed_max_cells=removed_cells,
        unit_cells_removed_max_cells=pairs_removed,
        rows_used=rows_used,
    )
    return {"count": counts, "sum": sums}, key_series, diagnostics


def run_pandas(df: pd.DataFrame, spec: QuerySpec) -> tuple[pd.DataFrame, Diagnostics]:
    """Aggregate, bound and noise ``df`` per ``spec``; return (release, diagnostics).

    The release has one row per declared cell, in cell-index order.
    """
    (true,) = aggregate(df, [spec])
    return release_frame(df, spec, true), true.diagnostics


def release_frame(df: pd.DataFrame, spec: QuerySpec, true: CellAggregates) -> pd.DataFrame:
    """The noisy release of ``true`` (``spec``'s aggregates of ``df``): every declared cell,
    in cell-index order, its key columns with the input's dtypes, then the value columns."""
    cells = spec.cells
    released = release_columns(spec, noisy_dense(spec, true.vectors()))
    keys = cells.decode(np.arange(cells.total, dtype=np.int64))
    columns = {}
    for domain, values in zip(cells.domains, keys, strict=True):
        dtype = df[domain.column].dtype
        if domain.kind == "int" and not (
            isinstance(dtype, np.dtype) and np.issubdtype(dtype, np.integer)
        ):  # nullable or float input: the released keys hold no nulls
            dtype = np.dtype(np.int64)
        columns[domain.column] = pd.array(values, dtype=dtype)
    columns.update(released)
    return pd.DataFrame(columns)


def aggregate(df: pd.DataFrame, queries: Sequence[QuerySpec]) -> list[CellAggregates]:
    """The pandas engine behind `dp_pipeline.engines.backend.aggregate`."""
    results = []
    for query in queries:
        true_values, _, diagnostics = aggregate_pandas(df, query)
        results.append(CellAggregates(true_values["count"], true_values["sum"], diagnostics))
    return results
