"""Every table of a release plan computed by the pandas engine's numpy rules.

The pandas engine reads the input from exactly the files the release
fingerprinted; the same `numpy_tables` also serves a Spark release of a small
input, collected to the driver (`dp_pipeline.release.spark_tables`), so both
give the same tables bit for bit. True (non-private) cell values are computed
only for synthetic input, for the report's accuracy section.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.query.quantile_grid import GridPosition
from dp_pipeline.release.input_schema import arrow_frame, read_csv_pandas
from dp_pipeline.release.plan import TablePlan
from dp_pipeline.release.queries import table_spec
from dp_pipeline.release.selections import (
    aggregation_spec,
    position_column,
    release_selection,
)
from dp_pipeline.release.source import OpenedInput
from dp_pipeline.release.spec_model import ReleaseSpec, TableSpec

__all__ = [
    "full_index",
    "numpy_tables",
    "pandas_tables",
    "read_pandas",
    "statistic_column",
    "true_values_pandas",
]


def read_pandas(spec: ReleaseSpec, source: OpenedInput) -> pd.DataFrame:
    """The input read from exactly the listed files (CSV: typed from the spec)."""
    import pyarrow.dataset as ds

    if source.format == "csv":
        return read_csv_pandas(spec, source.files[0])
    options = {}
    if source.path.is_dir():
        options = {"partitioning": "hive", "partition_base_dir": str(source.path)}
    dataset = ds.dataset([str(f) for f in source.files], format="parquet", **options)
    return arrow_frame(dataset.to_table())


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
        raise ValueError(
            f"table {table.name!r}: column {table.value!r} is not in the input; its columns "
            f"are {list(frame.columns)}"
        )
    series = frame[table.value]
    if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
        raise TypeError(
            f"table {table.name!r}: column {table.value!r} has dtype {series.dtype}; a "
            f"{table.statistic} needs a numeric column"
        )
    grid = GridPosition(table.value, (table.lower, table.upper), table.granularity)
    positions, finite = grid.positions(series.to_numpy(dtype=np.float64, na_value=np.nan))
    return pd.arrays.IntegerArray(positions, ~finite)


def pandas_tables(spec, plan, master, source, release_digest, with_truth, progress):

    timings = {}
    started = time.perf_counter()
    progress(f"pandas: reading {source.path}")
    frame = read_pandas(spec, source)
    timings["read"] = time.perf_counter() - started
    # No row count here: progress lines are not a release, and carry no confidential figure.
    progress(f"pandas: read the input in {timings['read']:.1f} s")
    return numpy_tables(
        spec, plan, master, frame, release_digest, with_truth, progress, timings, "pandas"
    )


def numpy_tables(spec, plan, master, frame, release_digest, with_truth, progress, timings, engine):
    """Every table of ``frame`` (a pandas DataFrame) by the pandas engine's numpy rules."""
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
        query = table_spec(spec, table, table_plan.mechanism, master, release_digest)
        released, found[table.name] = run_pandas(frame, query)
        released = released.rename(columns={statistic_column(table_plan): "value"})
        released = released[[*table_plan.table.keys, "value"]]
        if with_truth:
            released["true_value"] = true_values_pandas(frame, spec, table_plan.table)
        results[table_plan.table.name] = released
        progress(
            f"{engine}: table {index}/{len(plan.tables)} {table_plan.table.name} "
            f"({len(released):,} cells)"
        )
    timings["aggregate_noise"] = time.perf_counter() - started
    return results, timings, found
