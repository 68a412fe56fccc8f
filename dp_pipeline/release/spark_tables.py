"""Every table of a release plan computed by the Spark engine, and the session it runs in.

A Spark input of at most `DRIVER_INPUT_BYTES` is read by Spark in one job and
aggregated on the driver by the numpy rules every engine path shares
(`dp_pipeline.release.pandas_tables.numpy_tables`); a larger one is read,
bounded and aggregated for all tables in one pass on the executors. Either way
the tables are bit-identical to the pandas engine's. PySpark is imported here,
so this module is loaded only for the Spark engine.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from dp_pipeline.engines.spark.aggregate import aggregate_queries
from dp_pipeline.engines.spark.noise import collect_noisy_cells, output_schema
from dp_pipeline.engines.spark.quiet import jvm_output_to_file
from dp_pipeline.engines.spark.runtime import ensure_java, local_session
from dp_pipeline.query.quantile_grid import GridPosition
from dp_pipeline.release.fingerprint import local_files, spark_input_files
from dp_pipeline.release.input_schema import arrow_frame, csv_columns, spark_csv_schema
from dp_pipeline.release.pandas_tables import numpy_tables, statistic_column
from dp_pipeline.release.queries import table_spec
from dp_pipeline.release.selections import (
    aggregation_spec,
    position_column,
    release_selection,
)
from dp_pipeline.release.source import OpenedInput
from dp_pipeline.release.spec_model import ReleaseSpec
from dp_pipeline.selection.spark import check_numeric_column
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN, released_table

__all__ = [
    "DRIVER_INPUT_BYTES",
    "driver_frame",
    "open_spark_input",
    "spark_session",
    "spark_tables",
]


def open_spark_input(
    spec: ReleaseSpec, path: Path, input_format: str, progress, spark=None, *, verbose=False
) -> OpenedInput:
    """The `OpenedInput` of ``path`` for the Spark engine (a session is started if none runs).

    A session started here writes the JVM's and Spark's own lines to a log file
    (named in a progress line) unless ``verbose``.
    """
    if spark is None:
        # A session already running in this process (a notebook's, a test's) is used and
        # left running; only a session this call starts is stopped at the end.
        spark = SparkSession.getActiveSession()
    own_session = spark is None
    if own_session:
        progress(f"spark: starting a session on {spec.master}")
        if verbose:
            spark = spark_session(spec.master)
        else:
            with jvm_output_to_file() as log:
                spark = spark_session(spec.master)
            progress(f"spark: the JVM's and Spark's own log lines go to {log} (see --verbose)")
    else:
        progress(f"spark: using the running session (master {spark.sparkContext.master})")
    try:
        files = spark_input_files(spark, path, input_format)
    except BaseException:
        if own_session:
            spark.stop()
        raise
    return OpenedInput(Path(path), input_format, "spark", files, spark, own_session)


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


def spark_tables(spec, plan, master, source, release_digest, with_truth, progress):
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
            return numpy_tables(
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
            released = released.rename(columns={statistic_column(table_plan): "value"})
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
    match = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master)
    if match:
        cores = match.group(1)
        return local_session(None if cores in (None, "*") else int(cores))
    ensure_java()
    # Executors start Python workers with the driver's PYSPARK_PYTHON: by default this
    # interpreter, which has dp_pipeline (right for workers on this machine or an image
    # with the same layout; set PYSPARK_PYTHON otherwise).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return SparkSession.builder.master(master).appName("dp_pipeline release").getOrCreate()
