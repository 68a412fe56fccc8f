"""Every table of a release plan computed by the pandas engine's numpy rules.

The pandas engine reads the input from exactly the files the release
fingerprinted; the same `numpy_tables` also serves a Spark release of a small
input, collected to the driver (`dp_pipeline.release.tables.on_spark`), so both
give the same tables bit for bit. True (non-private) cell values are computed
only for synthetic input, for the report's accuracy section.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
import pyarrow as pa

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.engines.pandas.invalid_rows import invalid_unit_count
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.quantile_grid import GridPosition
from dp_pipeline.release.plan.queries import table_spec
from dp_pipeline.release.plan.release_plan import TablePlan
from dp_pipeline.release.plan.selections import (
    aggregation_spec,
    position_column,
    release_selection,
)
from dp_pipeline.release.sources.schema import arrow_frame, read_csv_rows
from dp_pipeline.release.sources.source import InputReadError, OpenedInput
from dp_pipeline.release.spec.model import ReleaseSpec, TableSpec
from dp_pipeline.release.tables.invalid_rows import decide, row_checks
from dp_pipeline.release.tables.moments import (
    MOMENT_STATISTICS,
    moment_table_pandas,
    with_truth_column,
)

__all__ = [
    "full_index",
    "numpy_tables",
    "pandas_tables",
    "read_pandas",
    "read_pandas_rows",
    "statistic_column",
    "true_values_pandas",
]


def read_pandas(spec: ReleaseSpec, source: OpenedInput) -> pd.DataFrame:
    """The input read from exactly the listed files (CSV: typed from the spec)."""
    return read_pandas_rows(spec, source)[0]


def read_pandas_rows(spec: ReleaseSpec, source: OpenedInput) -> tuple[pd.DataFrame, int]:
    """`read_pandas` and the number of malformed CSV rows it skipped (0 for Parquet).

    A reader's failure on the contents raises `InputReadError` (file and rule only).
    """
    import pyarrow.dataset as ds

    if source.filesystem is not None:
        return _read_store_rows(spec, source)
    if source.format == "csv":
        return read_csv_rows(spec, source.files[0])
    options = {}
    if source.path.is_dir():
        options = {"partitioning": "hive", "partition_base_dir": str(source.path)}
    try:
        dataset = ds.dataset([str(f) for f in source.files], format="parquet", **options)
        return arrow_frame(dataset.to_table()), 0
    except pa.ArrowException:
        raise InputReadError(
            source.path,
            "the Parquet reader failed on its contents (a corrupt or truncated file, or a "
            "value its column's type cannot hold)",
        ) from None


def _read_store_rows(spec: ReleaseSpec, source: OpenedInput) -> tuple[pd.DataFrame, int]:
    """`read_pandas_rows` of an input on a pyarrow file system (its listed files only)."""
    import pyarrow.dataset as ds

    filesystem, files = source.filesystem, list(source.listed())
    try:
        if source.format == "csv":
            return read_csv_rows(spec, files[0], filesystem)
        options = {}
        if not source.base_is_file:
            options = {"partitioning": "hive", "partition_base_dir": str(source.path)}
        dataset = ds.dataset(files, filesystem=filesystem, format="parquet", **options)
        return arrow_frame(dataset.to_table()), 0
    except (OSError, pa.ArrowException):
        # The store's and the reader's texts can quote the data and the store's names.
        raise InputReadError(
            source.where,
            "reading it from its store failed (the store became unreachable or refused a "
            "request, or a file is corrupt or truncated)",
        ) from None


def full_index(spec: ReleaseSpec, keys) -> pd.MultiIndex:
    # Same order as the engines' cell index: first key most significant.
    return pd.MultiIndex.from_product([list(spec.domains[k]) for k in keys], names=list(keys))


def true_values_pandas(frame: pd.DataFrame, spec: ReleaseSpec, table: TableSpec) -> np.ndarray:
    """Non-private cell values over the full domain (synthetic data only, for the report)."""
    keys = list(table.keys)
    if table.statistic == "count":
        grouped = frame.groupby(keys, observed=True).size()
    else:
        clamped = frame[table.value].clip(table.lower, table.upper)
        grouped = clamped.groupby([frame[k] for k in keys], observed=True).sum()
    if len(keys) == 1:
        grouped.index = pd.MultiIndex.from_arrays([grouped.index], names=keys)
    full = grouped.reindex(full_index(spec, keys), fill_value=0)
    return full.to_numpy(np.int64)


def statistic_column(table_plan: TablePlan) -> str:
    return table_plan.table.statistic  # the engines name the released column after it


def _quantile_values_pandas(frame: pd.DataFrame, table) -> pd.arrays.IntegerArray:
    """Grid positions of a quantile table's values (nullable: <NA> where not finite)."""

    if table.value not in frame:
        raise DPValueError(
            f"table {table.name!r}: column {table.value!r} is not in the input (which has "
            f"{len(frame.columns)} column(s), not named here: they can be data)"
        )
    series = frame[table.value]
    if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
        raise DPTypeError(
            f"table {table.name!r}: column {table.value!r} has dtype {series.dtype}; a "
            f"{table.statistic} needs a numeric column"
        )
    grid = GridPosition(table.value, (table.lower, table.upper), table.granularity)
    positions, finite = grid.positions(series.to_numpy(dtype=np.float64, na_value=np.nan))
    return pd.arrays.IntegerArray(positions, ~finite)


def pandas_tables(spec, plan, master, source, release_digest, with_truth, progress):

    timings = {}
    started = time.perf_counter()
    progress(f"pandas: reading {source.where}")
    frame, malformed = read_pandas_rows(spec, source)
    timings["read"] = time.perf_counter() - started
    # No row count here: progress lines are not a release, and carry no confidential figure.
    progress(f"pandas: read the input in {timings['read']:.1f} s")
    return numpy_tables(
        spec,
        plan,
        master,
        frame,
        release_digest,
        with_truth,
        progress,
        timings,
        "pandas",
        malformed_rows=malformed,
    )


def numpy_tables(
    spec,
    plan,
    master,
    frame,
    release_digest,
    with_truth,
    progress,
    timings,
    engine,
    *,
    malformed_rows: int = 0,
):
    """Every table of ``frame`` (a pandas DataFrame) by the pandas engine's numpy rules.

    ``malformed_rows``: CSV rows the reader skipped (counted in every table's
    diagnostics). Under ``on_invalid = "error"`` the release's noisy invalid-row count
    decides first, on the rows already in memory (`dp_pipeline.release.tables.invalid_rows`).
    """
    if plan.invalid_count is not None:
        exact = invalid_unit_count(frame, row_checks(spec), spec.privacy_unit, malformed_rows)
        decide(plan, master, release_digest, exact)
    results = {}
    found = {}
    started = time.perf_counter()
    for index, table_plan in enumerate(plan.tables, 1):
        table = table_plan.table
        if table.is_selection:
            if table.statistic != "top_k":
                frame[position_column(index - 1)] = _quantile_values_pandas(frame, table)
            counts_spec = aggregation_spec(spec, table_plan, master, index - 1, release_digest)
            (true,) = aggregate(frame, [counts_spec])
            found[table.name] = true.diagnostics
            results[table.name] = release_selection(
                spec,
                table_plan,
                master,
                counts_spec,
                true.count,
                true.diagnostics,
                with_truth=with_truth,
                release_digest=release_digest,
            )
            progress(f"{engine}: table {index}/{len(plan.tables)} {table.name} ({table.statistic})")
            continue
        if table.statistic in MOMENT_STATISTICS:
            released, found[table.name] = moment_table_pandas(
                spec, table_plan, master, frame, release_digest, with_truth
            )
        else:
            query = table_spec(spec, table, table_plan.mechanism, master, release_digest)
            released, found[table.name] = run_pandas(frame, query)
            released = released.rename(columns={statistic_column(table_plan): "value"})
            released = released[[*table_plan.table.keys, "value"]]
        if with_truth and with_truth_column(table):
            released["true_value"] = true_values_pandas(frame, spec, table_plan.table)
        results[table_plan.table.name] = released
        progress(
            f"{engine}: table {index}/{len(plan.tables)} {table_plan.table.name} "
            f"({len(released):,} cells)"
        )
    timings["aggregate_noise"] = time.perf_counter() - started
    if malformed_rows:
        found = {
            name: dataclasses.replace(found_, rows_malformed=malformed_rows)
            for name, found_ in found.items()
        }
    return results, timings, found
