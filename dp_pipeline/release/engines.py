"""The thin bridge from a release plan to the engines (`dp_pipeline.engines.pandas`, `.spark`).

The release layer adds nothing to the noise: each table is one engine query
with the plan's mechanism, the spec's domains and contribution bounds, and
the stream labels (master key, release id, table name, the release's digest,
noise partitions), so both engines release bit-identical tables. The input is
opened first (`open_input`: the engine's own list of the files it will read,
which the release fingerprints before any data is read), then read from
exactly those files. True (non-private) cell values are computed only for
synthetic input, for the report's accuracy section; they are never written
to a released table.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.quantile_grid import GridPosition
from dp_pipeline.release.fingerprint import input_files, local_files, spark_input_files
from dp_pipeline.release.input_schema import (
    arrow_frame,
    csv_columns,
    read_csv_pandas,
    spark_csv_schema,
)
from dp_pipeline.release.plan import ReleasePlan, TablePlan
from dp_pipeline.release.queries import table_spec
from dp_pipeline.release.selections import (
    aggregation_spec,
    position_column,
    release_selection,
)
from dp_pipeline.release.spec_model import ReleaseSpec, TableSpec
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN, released_table

__all__ = [
    "InputChangedError",
    "OpenedInput",
    "compute_tables",
    "open_input",
    "true_values_pandas",
]


class InputChangedError(RuntimeError):
    """The input's files or bytes changed between the start and the end of a run."""


@dataclass
class OpenedInput:
    """An input as one engine will read it: the path, its format, and the files listed.

    ``spark`` is the session of the Spark engine (``own_session``: started here,
    stopped by `close`); None for pandas.
    """

    path: Path
    format: str
    engine: str
    files: tuple[Path, ...]
    spark: Any = None
    own_session: bool = False
    jvm_log: str | None = None  # the session's JVM log file (not --verbose)

    def list_files(self) -> tuple[Path, ...]:
        """The engine's file list now (compared with `files` by the mid-run check)."""
        if self.engine == "spark":
            return spark_input_files(self.spark, self.path, self.format)
        return input_files(self.path, self.format)

    def check_unchanged(self, files: tuple[Path, ...], release_id: str) -> None:
        if files != self.files:
            raise InputChangedError(
                f"input {str(self.path)!r} changed while release {release_id!r} was running "
                f"(the engine's list of files differs from the one fingerprinted before "
                f"reading); nothing was published; run again on an input that is not being "
                f"written to"
            )

    def close(self, failed: bool = False) -> str | None:
        """Stop a session started here; delete its JVM log unless ``failed`` (returned then)."""
        if self.own_session and self.spark is not None:
            self.spark.stop()
            self.spark = None
        if failed:
            return self.jvm_log
        from dp_pipeline.engines.spark.quiet import discard_log

        discard_log(self.jvm_log)
        self.jvm_log = None
        return None


def open_input(
    spec: ReleaseSpec, path: Path, input_format: str, progress, spark=None, *, verbose=False
):
    """The `OpenedInput` of ``path`` for ``spec.engine`` (Spark: a session is started if none).

    A session started here writes the JVM's and Spark's own lines to a log file
    (named in a progress line) unless ``verbose``.
    """
    if spec.engine == "pandas":
        return OpenedInput(Path(path), input_format, "pandas", input_files(path, input_format))
    from pyspark.sql import SparkSession

    if spark is None:
        # A session already running in this process (a notebook's, a test's) is used and
        # left running; only a session this call starts is stopped at the end.
        spark = SparkSession.getActiveSession()
    own_session = spark is None
    log = None
    if own_session:
        progress(f"spark: starting a session on {spec.master}")
        if verbose:
            spark = spark_session(spec.master)
        else:
            from dp_pipeline.engines.spark.quiet import jvm_output_to_file

            with jvm_output_to_file() as log:
                try:
                    spark = spark_session(spec.master)
                except BaseException as error:
                    kept_log(error, log)  # why the JVM did not start is in its log
                    raise
            progress(f"spark: the JVM's and Spark's own log lines go to {log} (see --verbose)")
    else:
        progress(f"spark: using the running session (master {spark.sparkContext.master})")
    opened = OpenedInput(Path(path), input_format, "spark", (), spark, own_session, log)
    try:
        opened.files = spark_input_files(spark, path, input_format)
    except BaseException as error:
        kept_log(error, opened.close(failed=True))
        raise
    return opened


def kept_log(error: BaseException, log: str | None) -> None:
    """Name the JVM log kept after ``error`` in the error's message (CLI and tracebacks)."""
    if log is not None:
        error.add_note(f"the JVM's and Spark's own log lines of this run are kept in {log}")


# Inputs up to this size (bytes on disk) are aggregated on the driver after Spark reads them.
# Below the README's 1-million-person demo input (about 13 MB), which the Parquet pass
# aggregates faster on the executors.
DRIVER_INPUT_BYTES = 8 * 2**20


def driver_frame(frame, spec: ReleaseSpec) -> pd.DataFrame:
    """The columns the release uses of a Spark DataFrame, collected (one job) as pandas."""
    needed = list(csv_columns(spec))
    missing = [name for name in needed if name not in frame.columns]
    if missing:
        raise ValueError(
            f"column(s) {missing} used by the spec are not in the input; its columns are "
            f"{frame.columns}"
        )
    return arrow_frame(frame.select(*needed).toArrow())


def _read_pandas(spec: ReleaseSpec, source: OpenedInput) -> pd.DataFrame:
    """The input read from exactly the listed files (CSV: typed from the spec)."""
    import pyarrow.dataset as ds

    if source.format == "csv":
        return read_csv_pandas(spec, source.files[0])
    options = {}
    if source.path.is_dir():
        options = {"partitioning": "hive", "partition_base_dir": str(source.path)}
    dataset = ds.dataset([str(f) for f in source.files], format="parquet", **options)
    return arrow_frame(dataset.to_table())


def _full_index(spec: ReleaseSpec, keys) -> pd.MultiIndex:
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
    full = grouped.reindex(_full_index(spec, keys), fill_value=0)
    return full.to_numpy(np.int64)


def compute_tables(
    spec: ReleaseSpec,
    plan: ReleasePlan,
    master,
    source: OpenedInput,
    release_digest: str,
    *,
    with_truth: bool,
    progress,
) -> tuple[dict[str, pd.DataFrame], dict[str, float], dict[str, Diagnostics]]:
    """Every table of the plan as a pandas DataFrame (keys, ``value``[, ``true_value``]).

    ``source`` is read from exactly its listed files; ``release_digest`` (the
    release's identity) labels every noise stream. Also returns the phase timings
    and each table's `Diagnostics` (rows read, dropped as invalid by reason, clamped,
    removed by bounding): exact counts of the private data, never published.
    """
    if source.engine == "pandas":
        return _pandas(spec, plan, master, source, release_digest, with_truth, progress)
    return _spark(spec, plan, master, source, release_digest, with_truth, progress)


def _statistic_column(table_plan: TablePlan) -> str:
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


def _pandas(spec, plan, master, source, release_digest, with_truth, progress):

    timings = {}
    started = time.perf_counter()
    progress(f"pandas: reading {source.path}")
    frame = _read_pandas(spec, source)
    timings["read"] = time.perf_counter() - started
    # No row count here: progress lines are not a release, and carry no confidential figure.
    progress(f"pandas: read the input in {timings['read']:.1f} s")
    return _numpy_tables(
        spec, plan, master, frame, release_digest, with_truth, progress, timings, "pandas"
    )


def _numpy_tables(spec, plan, master, frame, release_digest, with_truth, progress, timings, engine):
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
        released = released.rename(columns={_statistic_column(table_plan): "value"})
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


def _spark(spec, plan, master, source, release_digest, with_truth, progress):
    from dp_pipeline.engines.spark.aggregate import TABLE_COLUMN, aggregate_queries
    from dp_pipeline.engines.spark.noise import collect_noisy_cells, output_schema

    timings = {}
    spark = source.spark
    aggregates = None
    try:
        started = time.perf_counter()
        reader = spark.read
        if source.format == "csv":
            # An explicit schema from the spec: no inference pass over the file, and the
            # same column types as the pandas engine's CSV reader.
            schema = spark_csv_schema(spec, source.files[0])
            frame = reader.schema(schema).option("header", True).csv(str(source.path))
        else:
            frame = reader.parquet(str(source.path))
        # The DataFrame's own file index must be the one fingerprinted.
        source.check_unchanged(local_files(frame.inputFiles(), source.path), spec.release_id)
        size = sum(path.stat().st_size for path in source.files)
        if size <= DRIVER_INPUT_BYTES:
            # A small input: Spark reads it (its readers, the schema above) in one job and
            # the driver aggregates it with the numpy rules every engine path shares
            # (tests/test_engine_contract.py), which gives the same tables bit for bit,
            # without the dozens of small jobs the Spark SQL path costs on a few MB.
            local = driver_frame(frame, spec)
            timings["read"] = time.perf_counter() - started
            progress(
                f"spark: read the input ({size / 2**20:.1f} MiB) in {timings['read']:.1f} s; "
                f"a small input is aggregated on the driver"
            )
            return _numpy_tables(
                spec, plan, master, local, release_digest, with_truth, progress, timings, "spark"
            )
        timings["read"] = time.perf_counter() - started
        started = time.perf_counter()
        noised = [p for p in plan.tables if not p.table.is_selection]
        selections = [(i, p) for i, p in enumerate(plan.tables) if p.table.is_selection]
        # Quantile tables group by the grid position of their value, a key both
        # aggregation paths derive from the input (the Parquet pass included).
        derived = {
            position_column(index): _grid_position(frame, table_plan.table)
            for index, table_plan in selections
            if table_plan.table.statistic != "top_k"
        }
        # Noised tables first: their indices into `specs` are the noise job's table indices.
        specs = [
            table_spec(spec, plan_.table, plan_.mechanism, master, release_digest)
            for plan_ in noised
        ] + [
            aggregation_spec(spec, plan_, master, index, release_digest)
            for index, plan_ in selections
        ]
        # One pass over the input for all tables: read, code, bound, aggregate.
        aggregates, diagnostics = aggregate_queries(frame, specs, collect=True, derived=derived)
        timings["aggregate"] = time.perf_counter() - started
        progress(
            f"spark: read, bounded and aggregated the input for {len(specs)} tables "
            f"in {timings['aggregate']:.1f} s"
        )
        started = time.perf_counter()
        if not isinstance(aggregates, pa.Table):  # the Spark SQL path: one collect
            persisted = aggregates
            columns = [TABLE_COLUMN, CELL_COLUMN, "n", "s", "true_n", "true_s"]
            aggregates = persisted.select(*columns).toArrow()
            persisted.unpersist()
        tables = aggregates.column(TABLE_COLUMN)
        results = {}
        in_order = [*noised, *(table_plan for _, table_plan in selections)]
        found = {p.table.name: d for p, d in zip(in_order, diagnostics, strict=True)}
        noisy = truth = None
        if noised:
            # Noised tables come first in `specs`. The driver adds their noise (a Spark job
            # does for very large releases), decodes the keys and orders the cells.
            noisy, truth = collect_noisy_cells(
                aggregates.filter(pc.less(tables, len(noised))),
                specs[: len(noised)],
                spark,
                truth=with_truth,
            )
        for index, (table_plan, query) in enumerate(zip(noised, specs[: len(noised)], strict=True)):
            released = _released_frame(noisy, index, query, output_schema(frame, query)[1])
            released = released.rename(columns={_statistic_column(table_plan): "value"})
            released = released[[*table_plan.table.keys, "value"]]
            if truth is not None:
                # Non-private values before bounding (synthetic data only).
                column = "true_n" if table_plan.table.statistic == "count" else "true_s"
                released["true_value"] = _dense(truth, index, query, column)
            results[table_plan.table.name] = released
            progress(
                f"spark: table {index + 1}/{len(plan.tables)} {table_plan.table.name} "
                f"({len(released):,} cells)"
            )
        if selections:
            # The selections' bounded counts are small (groups x grid, or the candidates):
            # collected once, selected on the driver.
            counted = aggregates.filter(
                pc.and_(
                    pc.greater_equal(aggregates.column(CELL_COLUMN), 0),
                    pc.greater_equal(tables, len(noised)),
                )
            )
            for offset, (_, table_plan) in enumerate(selections):
                index = len(noised) + offset
                results[table_plan.table.name] = release_selection(
                    spec,
                    table_plan,
                    master,
                    specs[index],
                    _dense(counted, index, specs[index], "n"),
                    diagnostics[index],
                    with_truth=with_truth,
                    release_digest=release_digest,
                )
                progress(f"spark: table {table_plan.table.name} ({table_plan.table.statistic})")
        timings["noise"] = time.perf_counter() - started
    finally:
        if aggregates is not None and hasattr(aggregates, "unpersist"):  # not an Arrow table
            aggregates.unpersist()
    return results, timings, found


def _grid_position(frame, table):
    """The grid-position key of a quantile table, after checking its column is numeric."""
    from dp_pipeline.selection.spark import check_numeric_column

    check_numeric_column(frame, table.value, f"table {table.name!r}: column")
    return GridPosition(table.value, (table.lower, table.upper), table.granularity)


def _rows_of(table, index: int):

    return table.filter(pc.equal(table.column(TABLE_COLUMN), index))


def _released_frame(noisy, index: int, query, key_types) -> pd.DataFrame:
    """Query ``index``'s released table from the collected noisy cells, in cell order."""

    rows = _rows_of(noisy, index)
    cells = rows.column(CELL_COLUMN).to_numpy()
    order = np.argsort(cells, kind="stable")
    if not np.array_equal(cells[order], np.arange(query.cells.total)):
        raise RuntimeError(
            f"table {query.table!r}: the Spark engine did not return exactly the declared cells"
        )
    measures = {name: rows.column(name).to_numpy()[order] for name, _, _ in query.measures()}
    return released_table(query, cells[order], measures, key_types).to_pandas()


def _dense(collected, index: int, query, column: str) -> np.ndarray:
    """``column`` of query ``index``'s collected non-empty cells, dense by cell (0 elsewhere)."""

    rows = _rows_of(collected, index)
    dense = np.zeros(query.cells.total, dtype=np.int64)
    dense[rows.column(CELL_COLUMN).to_numpy()] = rows.column(column).to_numpy()
    return dense


def spark_session(master: str):
    """``local_session`` for ``local[N]`` / ``local[*]`` masters, else a session on ``master``."""
    from dp_pipeline.engines.spark.runtime import local_session

    match = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master)
    if match:
        cores = match.group(1)
        return local_session(None if cores in (None, "*") else int(cores))
    from pyspark.sql import SparkSession

    from dp_pipeline.engines.spark.runtime import ensure_java

    ensure_java()
    # Executors start Python workers with the driver's PYSPARK_PYTHON: by default this
    # interpreter, which has dp_pipeline (right for workers on this machine or an image
    # with the same layout; set PYSPARK_PYTHON otherwise).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return SparkSession.builder.master(master).appName("dp_pipeline release").getOrCreate()
