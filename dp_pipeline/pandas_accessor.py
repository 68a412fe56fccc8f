"""The pandas engine: ``df.dp.count / sum / mean / quantile / median / top_k``.

Registered by ``import dp_pipeline``. The selections (quantile, median,
top-k) are described in `dp_pipeline.selection_query`.

Same parameters, rules and noise as the Spark engine (`dp_pipeline.spark`), so
the same data, key, release id and table give a bit-identical release. Rows are
mapped to cells and bounded with numpy (`dp_pipeline.aggregate`,
`dp_pipeline.bounding`); noise is added per noise partition by the shared
`dp_pipeline.udfs` code.

``result.attrs["dp"]`` is a `dp_pipeline.cost.ReleaseInfo`: mechanisms, σ² or
scale, sensitivity, privacy cost (ρ; ε at δ), margins of error, budget split
and the `Diagnostics` (not private: never publish them). Because pandas
serialises ``attrs`` into Parquet metadata as JSON, ``to_parquet`` refuses a
result that still carries them; publish ``result.attrs["dp"].public_summary()``
and call ``result.attrs.clear()`` (or write ``pd.DataFrame(result)`` after
clearing) before writing.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline.aggregate import (
    DEFAULT_CELL_LIMIT,
    DEFAULT_NOISE_PARTITIONS,
    Diagnostics,
    Domain,
    QuerySpec,
    invalid_rows_error,
)
from dp_pipeline.bounding import BoundingSalt, bound_contributions, unit_keys
from dp_pipeline.cost import release_info
from dp_pipeline.exact_sums import cell_totals
from dp_pipeline.selection_query import QuantileQuery, TopKQuery
from dp_pipeline.udfs.noise import noisy_dense, release_columns

__all__ = [
    "DPAccessor",
    "aggregate_pandas",
    "run_pandas",
    "run_quantile_pandas",
    "run_top_k_pandas",
]


def _column(df: pd.DataFrame, name: str, role: str) -> pd.Series:
    if name not in df.columns:
        raise ValueError(
            f"{role} column {name!r} is not in the DataFrame; its columns are {list(df.columns)}"
        )
    return df[name]


def _check_key_dtype(series: pd.Series, domain: Domain) -> None:
    dtype = series.dtype
    if domain.kind == "int":
        if not pd.api.types.is_integer_dtype(dtype):
            hint = (
                "; cast with .astype('Int64') to keep nulls"
                if pd.api.types.is_float_dtype(dtype)
                else ""
            )
            raise TypeError(
                f"key column {domain.column!r} has dtype {dtype} but its domain holds integers; "
                f"it must have an integer dtype{hint}"
            )
    elif not (pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype)):
        raise TypeError(
            f"key column {domain.column!r} has dtype {dtype} but its domain holds strings; "
            f"it must have a string or object dtype"
        )


def _key_values(series: pd.Series, domain: Domain, null: np.ndarray) -> np.ndarray:
    if domain.kind == "int":
        return series.to_numpy(dtype=np.int64, na_value=0)
    values = series.to_numpy(dtype=object)
    return np.where(null, "", values)


def _value_units(values: np.ndarray, spec: QuerySpec) -> tuple[np.ndarray, np.ndarray]:
    """Granularity units: clip(rint(v * den / num), L, U) — the same IEEE ops as the Spark plan."""
    bounds = spec.value_bounds
    raw = np.rint(values * float(bounds.scale_denominator) / float(bounds.scale_numerator))
    clamped = (raw < bounds.lower_units) | (raw > bounds.upper_units)
    units = np.clip(raw, bounds.lower_units, bounds.upper_units).astype(np.int64)
    return units, clamped


def _cell_sums(cells: np.ndarray, weights: np.ndarray, total: int) -> np.ndarray:
    """Exact per-cell sums, clamped into [-2**62, 2**62] before noise (`dp_pipeline.exact_sums`)."""
    return cell_totals(cells, weights, total).clamped()


def _unit_values(units: pd.Series) -> np.ndarray:
    """Privacy units as exact values: int64 for any integer dtype, else objects.

    A nullable ``Int64`` column's ``to_numpy()`` is float64 (5 -> 5.0, and inexact
    above 2**53), which would hash as "5.0" where Spark hashes "5"; null rows are
    dropped before this is used, so they may take any placeholder.
    """
    if pd.api.types.is_integer_dtype(units.dtype):
        return units.to_numpy(dtype=np.int64, na_value=0)
    return units.to_numpy(dtype=object)


def aggregate_pandas(
    df: pd.DataFrame, spec: QuerySpec
) -> tuple[dict[str, np.ndarray], list[pd.Series], Diagnostics]:
    """True bounded aggregates of every declared cell (dense int64 arrays by cell index).

    Returns ({"count": ..., "sum": ... or None}, the key columns, diagnostics).
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(df).__name__}")
    cells = spec.cells
    key_series = [_column(df, d.column, "key") for d in cells.domains]
    for series, domain in zip(key_series, cells.domains, strict=True):
        _check_key_dtype(series, domain)
    unit_series = _column(df, spec.privacy_unit, "privacy_unit") if spec.privacy_unit else None
    if unit_series is not None and not (
        pd.api.types.is_integer_dtype(unit_series.dtype)
        or pd.api.types.is_string_dtype(unit_series.dtype)
    ):
        raise TypeError(
            f"privacy_unit column {spec.privacy_unit!r} has dtype {unit_series.dtype}; "
            f"it must hold integers or strings"
        )
    value_series = _column(df, spec.column, "summed") if spec.column else None
    if value_series is not None and (
        not pd.api.types.is_numeric_dtype(value_series.dtype)
        or pd.api.types.is_bool_dtype(value_series.dtype)
    ):
        raise TypeError(
            f"summed column {spec.column!r} has dtype {value_series.dtype}; it must be numeric"
        )

    n = len(df)
    valid = np.ones(n, dtype=bool)
    positions = []
    null_counts: dict[str, int] = {}
    ood_counts: dict[str, int] = {}
    for series, domain in zip(key_series, cells.domains, strict=True):
        null = series.isna().to_numpy()
        values = _key_values(series, domain, null)
        if null.any():
            pos = np.full(n, -1, dtype=np.int64)
            pos[~null] = domain.positions(values[~null])
        else:  # the common case: no masked copies of 10^7-row columns
            pos = domain.positions(values)
        dropped_null = valid & null
        dropped_ood = valid & ~null & (pos < 0)
        null_counts[domain.column] = int(dropped_null.sum())
        ood_counts[domain.column] = int(dropped_ood.sum())
        if spec.on_invalid == "error":
            if null_counts[domain.column]:
                raise invalid_rows_error(domain.column, "have a null key")
            if ood_counts[domain.column]:
                raise invalid_rows_error(
                    domain.column, f"have a key outside the declared domain {domain!r}"
                )
        valid &= ~null & (pos >= 0)
        positions.append(pos)

    rows_null_unit = 0
    if unit_series is not None:
        null_unit = valid & unit_series.isna().to_numpy()
        rows_null_unit = int(null_unit.sum())
        if rows_null_unit and spec.on_invalid == "error":
            raise invalid_rows_error(spec.privacy_unit, "have a null privacy unit")
        valid &= ~null_unit

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
        units, clamped = _value_units(values[valid], spec)
        rows_clamped = int(clamped.sum())

    all_valid = bool(valid.all())
    row_cells = cells.cell_index(positions if all_valid else [p[valid] for p in positions])
    total = cells.total
    removed_per_cell = removed_cells = pairs_removed = 0
    if unit_series is None:
        counts = np.bincount(row_cells, minlength=total).astype(np.int64)
        sums = None if units is None else _cell_sums(row_cells, units, total)
        rows_used = int(row_cells.size)
    else:
        salt = BoundingSalt.derive(spec.master_key(), spec.release_id, spec.table)
        codes, ukeys = unit_keys(_unit_values(unit_series)[valid], salt)
        bounded = bound_contributions(
            codes, ukeys, row_cells, units, spec.max_cells, spec.max_per_cell, salt
        )
        counts = np.bincount(bounded.cells, weights=bounded.counts, minlength=total).astype(
            np.int64
        )
        sums = None if units is None else _cell_sums(bounded.cells, bounded.sums, total)
        removed_per_cell = bounded.rows_removed_max_per_cell
        removed_cells = bounded.rows_removed_max_cells
        pairs_removed = bounded.pairs_removed_max_cells
        rows_used = int(bounded.counts.sum())

    diagnostics = Diagnostics(
        rows_in=n,
        rows_null_key=null_counts,
        rows_out_of_domain=ood_counts,
        rows_null_unit=rows_null_unit,
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
    true_values, key_series, diagnostics = aggregate_pandas(df, spec)
    cells = spec.cells
    total = cells.total
    released = release_columns(spec, noisy_dense(spec, true_values))

    keys = cells.decode(np.arange(total, dtype=np.int64))
    columns = {}
    for series, domain, values in zip(key_series, cells.domains, keys, strict=True):
        dtype = series.dtype
        if domain.kind == "int" and isinstance(dtype, pd.api.extensions.ExtensionDtype):
            dtype = np.dtype(np.int64)
        columns[domain.column] = pd.array(values, dtype=dtype)
    columns.update(released)
    return pd.DataFrame(columns), diagnostics


_COMMON_DOC = """
        Parameters (shared with `dp_pipeline.spark`): ``by`` key columns;
        ``domains`` {column: range or list}; ``noise`` a DiscreteGaussian or
        DiscreteLaplace; ``key`` a MasterKey; ``release_id`` and ``table`` name
        the noise streams together with what is measured (the statistic and a
        digest of the query): the same query under the same key and labels
        redraws the same noise, any other query draws independent noise (and
        spends its own budget); ``privacy_unit``
        (None: every row is a unit); ``max_cells`` and ``max_per_cell``
        contribution bounds; ``neighbouring`` "add_remove" or "replace";
        ``on_invalid`` "drop" (count in diagnostics) or "error";
        ``noise_partitions``; ``cell_limit``; ``confidence`` of the margins;
        ``delta`` at which ε is reported.
"""


@pd.api.extensions.register_dataframe_accessor("dp")
class DPAccessor:
    """``df.dp``: DP counts, sums and means over declared cells; DP quantiles and top-k."""

    def __init__(self, df: pd.DataFrame) -> None:
        self._df = df

    def _run(self, statistic: str, **params) -> pd.DataFrame:
        spec = QuerySpec.build(statistic, **params)
        info = release_info(spec)  # the cost is known before the data is touched
        result, diagnostics = run_pandas(self._df, spec)
        result.attrs["dp"] = info.with_diagnostics(diagnostics)
        return result

    def count(
        self,
        *,
        by,
        domains,
        noise,
        key,
        release_id: str,
        table: str,
        privacy_unit: str | None = None,
        max_cells: int = 1,
        max_per_cell: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        noise_partitions: int = DEFAULT_NOISE_PARTITIONS,
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
        delta=Fraction(1, 10**6),
    ) -> pd.DataFrame:
        """Noisy row count of every declared cell (zero counts included): columns by + count.

        Each unit changes at most ``max_cells`` counts by at most
        ``max_per_cell``; that sensitivity vector is what the accountant is told.
        """
        return self._run("count", **_params(locals()))

    def sum(
        self,
        column: str,
        *,
        bounds,
        by,
        domains,
        noise,
        key,
        release_id: str,
        table: str,
        granularity=1,
        privacy_unit: str | None = None,
        max_cells: int = 1,
        max_per_cell: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        noise_partitions: int = DEFAULT_NOISE_PARTITIONS,
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
        delta=Fraction(1, 10**6),
    ) -> pd.DataFrame:
        """Noisy sum of ``column`` per cell: by + sum.

        Values are clamped into ``bounds`` and rounded to multiples of
        ``granularity``; the noise is added to the integer sum in granularity units.
        """
        return self._run("sum", **_params(locals()))

    def mean(
        self,
        column: str,
        *,
        bounds,
        by,
        domains,
        noise,
        key,
        release_id: str,
        table: str,
        granularity=1,
        count_noise=None,
        privacy_unit: str | None = None,
        max_cells: int = 1,
        max_per_cell: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        noise_partitions: int = DEFAULT_NOISE_PARTITIONS,
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
        delta=Fraction(1, 10**6),
    ) -> pd.DataFrame:
        """Noisy sum, noisy count and mean = sum / max(count, 1) clipped into bounds.

        The budget is split between the sum (``noise``) and the count
        (``count_noise``, default the same mechanism); both are composed by the
        accountant and ``attrs["dp"].budget_split`` states each share of ρ.
        """
        return self._run("mean", **_params(locals()))

    count.__doc__ += _COMMON_DOC
    sum.__doc__ += _COMMON_DOC
    mean.__doc__ += _COMMON_DOC

    def quantile(
        self,
        column: str,
        q,
        *,
        bounds,
        granularity,
        epsilon,
        key,
        release_id: str,
        table: str,
        on_invalid: str = "drop",
        confidence=Fraction(95, 100),
    ) -> pd.DataFrame:
        """ε-DP ``q``-quantile of ``column`` (base-2 exponential mechanism): quantile, column.

        Candidates are the public grid ``lo, lo + granularity, ... <= hi`` of
        ``bounds``; values are clamped into ``bounds``; each row is one privacy
        unit (one value per person). ``epsilon`` is the target (the spent
        ``attrs["dp"].epsilon`` is the mechanism's pure ε, never above it) or a
        `BaseTwoExponential`. Null, NaN and ±inf values are dropped (counted in
        the diagnostics) or, with ``on_invalid="error"``, refused.
        ``attrs["dp"].margin_of_error`` is the rank error at ``confidence``.
        Reproducible: the draw comes from ``derive_stream(key, release_id,
        table, "selection", "quantile")``.
        """
        query = QuantileQuery.build(
            "quantile",
            column=column,
            q=q,
            bounds=bounds,
            granularity=granularity,
            epsilon=epsilon,
            key=key,
            release_id=release_id,
            table=table,
            on_invalid=on_invalid,
            confidence=confidence,
        )
        return run_quantile_pandas(self._df, query)

    def median(
        self,
        column: str,
        *,
        bounds,
        granularity,
        epsilon,
        key,
        release_id: str,
        table: str,
        on_invalid: str = "drop",
        confidence=Fraction(95, 100),
    ) -> pd.DataFrame:
        """`quantile` at q = 1/2 (its own stream label "median")."""
        query = QuantileQuery.build(
            "median",
            column=column,
            q=Fraction(1, 2),
            bounds=bounds,
            granularity=granularity,
            epsilon=epsilon,
            key=key,
            release_id=release_id,
            table=table,
            on_invalid=on_invalid,
            confidence=confidence,
        )
        return run_quantile_pandas(self._df, query)

    def top_k(
        self,
        column: str,
        k: int,
        *,
        candidates,
        epsilon,
        key,
        release_id: str,
        table: str,
        method: str = "peeling",
        privacy_unit: str | None = None,
        max_candidates: int = 1,
        max_per_candidate: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
    ) -> pd.DataFrame:
        """ε-DP ``k`` most frequent ``column`` values among ``candidates``: rank, column[, count].

        ``candidates`` is the public domain (list or range); rows outside it
        are dropped (or refused). Each unit counts in at most ``max_candidates``
        candidates, at most ``max_per_candidate`` times each (enforced as in
        ``df.dp.count``). ``method="peeling"``: k exponential-mechanism rounds
        at ε/k; ``"one_shot"``: discrete Laplace noisy counts at scale Δ₁/ε
        and their top k (the winners' noisy counts are returned in ``count``).
        See `dp_pipeline.selection` for when to prefer which.
        """
        query = TopKQuery.build(
            column=column,
            k=k,
            candidates=candidates,
            epsilon=epsilon,
            key=key,
            release_id=release_id,
            table=table,
            method=method,
            privacy_unit=privacy_unit,
            max_candidates=max_candidates,
            max_per_candidate=max_per_candidate,
            neighbouring=neighbouring,
            on_invalid=on_invalid,
            cell_limit=cell_limit,
            confidence=confidence,
        )
        return run_top_k_pandas(self._df, query)


def run_quantile_pandas(df: pd.DataFrame, query: QuantileQuery) -> pd.DataFrame:
    """Bin ``query.column`` on the candidate grid with numpy; select on the driver."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(df).__name__}")
    series = _column(df, query.column, "quantile")
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
    true_values, _, diagnostics = aggregate_pandas(df, query.counts)
    return query.release(true_values["count"], diagnostics)


def _params(local_vars: dict) -> dict:
    params = {k: v for k, v in local_vars.items() if k != "self"}
    return params
