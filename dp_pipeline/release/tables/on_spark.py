"""Every table of a release plan computed by the Spark engine, and the session it runs in.

A Spark input of at most `DRIVER_INPUT_BYTES` is read by Spark in one job and
aggregated on the driver by the numpy rules every engine path shares
(`dp_pipeline.release.tables.on_pandas.numpy_tables`); a larger one is read,
bounded and aggregated for all tables in one pass on the executors. Either way
the tables are bit-identical to the pandas engine's. PySpark is imported here,
so this module is loaded only for the Spark engine.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    FloatType,
    IntegralType,
    MapType,
    StringType,
    StructType,
)

from dp_pipeline.engines.backend import noisy_cells
from dp_pipeline.engines.spark.invalid_rows import invalid_unit_count
from dp_pipeline.engines.spark.noise import output_schema
from dp_pipeline.engines.spark.session.failures import session_failure
from dp_pipeline.errors import DPValueError
from dp_pipeline.query.quantile_grid import GridPosition
from dp_pipeline.release.plan.postprocess import postprocess_on_spark
from dp_pipeline.release.plan.selections import (
    aggregation_spec,
    position_column,
    release_selection,
)
from dp_pipeline.release.sources.csv_text import REPLACEMENT
from dp_pipeline.release.sources.fingerprint import file_name, local_path
from dp_pipeline.release.sources.schema import (
    DECIMAL_PATTERN,
    INTEGER_KEY,
    INTEGER_PATTERN,
    MALFORMED_COLUMN,
    NUMBER,
    arrow_frame,
    check_column_families,
    check_csv_headers,
    csv_columns,
    csv_header_of,
    csv_schema_of_header,
    first_csv_file,
    spark_csv_schema,
)
from dp_pipeline.release.sources.source import (
    InputReadError,
    OpenedInput,
    check_hadoop_kinds,
    kept_log,
    shown_location,
)
from dp_pipeline.release.sources.spark_files import executor_digests, file_sizes
from dp_pipeline.release.sources.spark_listing import (
    first_lines,
    listed_frame,
    listed_input,
    listing_errors,
    source_label,
)
from dp_pipeline.release.spec.model import ReleaseSpec
from dp_pipeline.release.tables import moments
from dp_pipeline.release.tables.invalid_rows import decide, row_checks
from dp_pipeline.release.tables.on_pandas import numpy_tables, statistic_column
from dp_pipeline.release.tables.spark_session import check_executors, open_release_session
from dp_pipeline.release.tables.streamed import OnSpark, SparkNoisyTables
from dp_pipeline.selection.spark import check_numeric_column

__all__ = [
    "DRIVER_INPUT_BYTES",
    "driver_frame",
    "open_spark_input",
    "spark_input_frame",
    "spark_input_frames",
    "spark_read_errors",
    "spark_tables",
    "spark_typed_columns",
]


def open_spark_input(
    spec: ReleaseSpec, path, input_format: str, progress, spark=None, *, verbose=False
) -> OpenedInput:
    """The `OpenedInput` of ``path`` (None: ``spec.input_table``) for the Spark engine.

    A session is started if none runs, with the spec's Spark settings
    (``run.spark_conf`` and ``--conf``); a running session gets those it can
    change, until the input is closed. A session started here writes the JVM's and
    Spark's own lines to a log file (named in a progress line) unless ``verbose``.
    Spark lists the files (`listed_files`); nothing is read but their names and
    sizes (and a table's schema, a CSV file's header line). A source that cannot be
    listed raises a one-line `SpecError` before anything is reserved.
    """
    session = open_release_session(spec, spark, progress, verbose=verbose)
    table = spec.input_table if path is None else None
    location = "" if table is not None else str(path)
    opened = OpenedInput(
        Path(location or "."),
        input_format,
        "spark",
        (),
        session.spark,
        session.own,
        session.log,
        location=location or None,
        table=table,
        restore=session.restore,
    )
    try:
        check_executors(session.spark, progress)
        _list_input(spec, opened)
    except BaseException as error:
        kept_log(error, opened.close(failed=True))
        raise
    return opened


def _list_input(spec: ReleaseSpec, opened: OpenedInput) -> None:
    """Fill ``opened`` with Spark's file list, sizes, listing and hashing (see open_spark_input)."""
    spark, table, location = opened.spark, opened.table, opened.location or ""
    source = source_label(location, table)
    # A Parquet input off the local disk is read here, once: its file index is the list
    # fingerprinted and the one its rows are read from, its schema the one checked.
    uris, frame, index = listed_input(spark, location, opened.format, table)
    local = [local_path(uri) for uri in uris]
    if all(file is not None for file in local):
        opened.files = tuple(local)
    opened.uris = uris
    check_hadoop_kinds(spec.key_file, opened, spec.ledger_path)  # before a file is read
    opened.frame = frame
    sizes = None
    # The DataFrame whose file index listed the files last: their sizes without a job
    # (`file_sizes`), at the setup and again after the mid-run check's listing.
    listing = {"index": index}
    if opened.files or opened.format == "csv":
        # Local files: stat. Other files are sized when they are hashed (`file_sizes`
        # first: the heap-bounded groups of `executor_digests` need their sizes).
        sizes = file_sizes(spark, uris, source, index)
        opened.total_bytes = sum(sizes.values())

    def name(uri: str) -> str:
        # A table's files by their whole URI: its location is the catalog's, not the spec's.
        return uri if table is not None else file_name(uri, location)

    def hasher(listed: tuple[str, ...]):
        # Sizes taken now, with the bytes: a file that grew is hashed whole.
        names = [name(u) for u in listed]
        found = executor_digests(spark, listed, names, None, source, listing["index"])
        opened.total_bytes = sum(digest.size for digest in found)
        return found

    def lister() -> tuple[str, ...]:
        uris, listing["index"] = listed_frame(spark, location, opened.format, table)
        return uris

    opened.hasher = hasher
    opened.lister = lister
    with listing_errors(source):
        if table is not None:
            schema = spark.table(table).schema
            opened.header = f"table {table}\n{schema.simpleString()}".encode()
            _check_spark_columns(spec, schema, source)
        elif not opened.files and opened.format == "parquet":
            read = frame if frame is not None else spark.read.parquet(location)
            _check_spark_columns(spec, read.schema, source)
    if sizes is not None and not opened.files and table is None and opened.format == "csv":
        # Every file's header against the spec and the first's, before the reservation
        # (a local folder's are checked by `check_input_columns`); empty files hold none.
        read = [uri for uri in uris if sizes[uri] > 0] or list(uris[:1])
        lines = first_lines(spark, read, source)
        opened.csv_header = check_csv_headers(
            spec, [(shown_location(uri), csv_header_of(lines[uri] or "")) for uri in read]
        )


def _check_spark_columns(spec: ReleaseSpec, schema, source: str) -> None:
    """The spec's columns against a Spark schema (a table's, a remote Parquet input's)."""
    families = {}
    for column in schema.fields:
        kind = column.dataType
        if isinstance(kind, IntegralType):
            families[column.name] = "integer"
        elif isinstance(kind, FloatType | DoubleType):
            families[column.name] = "floating"
        elif isinstance(kind, StringType):
            families[column.name] = "string"
        else:
            # A nested type's simpleString spells its fields' names (the input's text).
            families[column.name] = kind.typeName() if _nested(kind) else kind.simpleString()
    check_column_families(spec, families, source)


def _nested(kind) -> bool:
    return isinstance(kind, StructType | ArrayType | MapType)


# Inputs up to this size (bytes on disk) are aggregated on the driver after Spark reads them.
# Below the README's 1-million-person demo input (about 13 MB), which the Parquet pass
# aggregates faster on the executors.
DRIVER_INPUT_BYTES = 8 * 2**20


def driver_frame(frame, spec: ReleaseSpec) -> pd.DataFrame:
    """The columns the release uses of a Spark DataFrame, collected (one job) as pandas."""
    return _driver_rows(frame, spec, None)[0]


def _driver_rows(frame, spec: ReleaseSpec, flag: str | None) -> tuple[pd.DataFrame, int]:
    """`driver_frame` of the rows not flagged in column ``flag``, and how many were (one job)."""
    needed = list(csv_columns(spec))
    missing = [name for name in needed if name not in frame.columns]
    if missing:
        raise DPValueError(
            f"column(s) {missing} used by the spec are not in the input (which has "
            f"{len(frame.columns)} column(s), not named here: they can be data)"
        )
    if flag is None:
        return arrow_frame(frame.select(*needed).toArrow()), 0
    table = frame.select(*needed, flag).toArrow()
    flagged = table.column(flag).to_numpy(zero_copy_only=False).astype(bool)
    rows = table.drop_columns([flag])
    if flagged.any():
        rows = rows.filter(pa.array(~flagged))
    return arrow_frame(rows), int(flagged.sum())


def spark_typed_columns(spec: ReleaseSpec) -> list:
    """The spec's CSV columns parsed from text as `read_csv_rows` parses them (Spark SQL).

    Integer keys: ``Long.parseLong``'s ASCII form (`INTEGER_PATTERN`, then a cast that
    is null on overflow); numbers: the decimal form `DECIMAL_PATTERN` captures, cast
    as ``Double.parseDouble`` casts it; other columns stay text. Anchors are ``\\z``
    (Java's ``$`` would also match before a final line terminator).
    """
    columns = []
    for name, kind in csv_columns(spec).items():
        text = sf.col(name)
        if kind == INTEGER_KEY:
            value = sf.when(text.rlike(f"^{INTEGER_PATTERN}\\z"), text.try_cast("bigint"))
        elif kind == NUMBER:
            number = sf.regexp_extract(text, f"^{DECIMAL_PATTERN}\\z", 1)
            value = sf.when(number != "", number.try_cast("double"))
        else:
            value = text
        columns.append(value.alias(name))
    return columns


def spark_input_frames(spec: ReleaseSpec, source: OpenedInput):
    """The release's input as Spark DataFrames: (the rows the engine reads, flagged or None).

    CSV is read as text by header name (`spark_csv_schema`: every file has the first
    file's header, checked before the reservation) and typed by `spark_typed_columns`;
    the second frame is every row with `MALFORMED_COLUMN` true where the row's field
    count differs from the header; the first is the others. Parquet: the files as
    they are, and None.
    """
    reader = source.spark.read
    if source.table is not None:
        return source.spark.table(source.table), None
    if source.frame is not None:  # read when it was listed: the files fingerprinted
        return source.frame, None
    location = source.location or str(source.path)
    if source.format != "csv":
        return reader.parquet(location), None
    if source.files:
        schema = spark_csv_schema(spec, first_csv_file(source.files))
    else:
        schema = csv_schema_of_header(spec, source.csv_header, location)
    raw = (
        reader.schema(schema)
        .option("header", True)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", MALFORMED_COLUMN)
        # A pruned read tokenizes only the selected fields and then flags no ragged row.
        .option("columnPruning", False)
        .csv(location)
    )
    # A used field Spark decoded with U+FFFD (bytes that are not UTF-8) makes the row
    # malformed, as the pandas engine's reader flags it (`sources.csv_text`).
    undecodable = [sf.col(name).contains(REPLACEMENT) for name in csv_columns(spec)]
    malformed = sf.col(MALFORMED_COLUMN).isNotNull()
    for text in undecodable:
        malformed = malformed | sf.coalesce(text, sf.lit(False))
    flagged = raw.select(*spark_typed_columns(spec), malformed.alias(MALFORMED_COLUMN))
    return flagged.where(~sf.col(MALFORMED_COLUMN)).drop(MALFORMED_COLUMN), flagged


def spark_input_frame(spec: ReleaseSpec, source: OpenedInput):
    """The rows of the release's input the engine reads (`spark_input_frames`' first)."""
    return spark_input_frames(spec, source)[0]


@contextlib.contextmanager
def spark_read_errors(path, spark=None) -> Iterator[None]:
    """Spark's and Arrow's errors on the input's contents as `InputReadError` (no data quoted).

    Not when ``spark``'s session stopped under the error (`session_failure`: its JVM
    killed or out of memory): that is no fault of the input, and the run names it.
    """
    try:
        yield
    except (PySparkException, Py4JJavaError, pa.ArrowException) as error:
        if session_failure(spark, error) is not None:
            raise
        raise InputReadError(
            path,
            "Spark failed on its contents (a corrupt or truncated file, or a value its "
            "reader refuses); the JVM's log of the run has the details",
        ) from None


def spark_tables(spec, plan, master, source, release_digest, with_truth, progress):
    """`compute_tables` on the Spark engine: the small-input driver path, or one Spark pass.

    A larger input is bounded and aggregated for every table in one pass
    (`dp_pipeline.engines.backend.noisy_cells`); the noised tables are collected in
    one noise step, the selections' bounded counts selected on the driver. When
    the combined tables are post-processed on Spark (`postprocess_on_spark`) they
    are not collected: they are noised by the Spark noise job (the same draws) and
    returned as `dp_pipeline.release.tables.streamed.OnSpark` entries, the aggregates
    persisted until the release closes them.
    """
    with spark_read_errors(source.where, source.spark):
        return _spark_tables(spec, plan, master, source, release_digest, with_truth, progress)


def _spark_tables(spec, plan, master, source, release_digest, with_truth, progress):
    timings = {}
    started = time.perf_counter()
    frame, flagged = spark_input_frames(spec, source)
    # The DataFrame's own file index must be the one fingerprinted.
    source.check_unchanged(tuple(sorted(frame.inputFiles())), spec.release_id)
    size = source.total_bytes
    if size <= DRIVER_INPUT_BYTES:
        # A small input: Spark reads it (its readers, the schema above) in one job and
        # the driver aggregates it with the numpy rules every engine path shares
        # (tests/contract/test_engine_contract.py), which gives the same tables bit for bit,
        # without the dozens of small jobs the Spark SQL path costs on a few MB.
        if flagged is None:
            local, malformed = _driver_rows(frame, spec, None)
        else:
            local, malformed = _driver_rows(flagged, spec, MALFORMED_COLUMN)
        timings["read"] = time.perf_counter() - started
        progress(
            f"spark: read the input ({size / 2**20:.1f} MiB) in {timings['read']:.1f} s; "
            f"a small input is aggregated on the driver"
        )
        return numpy_tables(
            spec,
            plan,
            master,
            local,
            release_digest,
            with_truth,
            progress,
            timings,
            "spark",
            malformed_rows=malformed,
        )
    malformed = None
    if plan.invalid_count is not None:
        # The decision's count: one job over the rows (malformed ones flagged), before
        # the tables' pass, so a refused release runs no table job.
        exact, malformed = invalid_unit_count(
            frame if flagged is None else flagged,
            row_checks(spec),
            spec.privacy_unit,
            None if flagged is None else MALFORMED_COLUMN,
        )
        decide(plan, master, release_digest, exact)
    timings["read"] = time.perf_counter() - started
    started = time.perf_counter()
    variances = [p for p in plan.tables if p.table.statistic in moments.VARIANCES]  # own job
    noised = [p for p in plan.tables if not p.table.is_selection and p not in variances]
    selections = [(i, p) for i, p in enumerate(plan.tables) if p.table.is_selection]
    # Quantile tables group by the grid position of their value, a key both
    # aggregation paths derive from the input (the Parquet pass included).
    derived = {
        position_column(index): _grid_position(frame, table_plan.table)
        for index, table_plan in selections
        if table_plan.table.statistic != "top_k"
    }
    # Noised tables first: they are the first queries of the one noise step.
    specs = [moments.noised_spec(spec, p, master, release_digest) for p in noised]
    specs += [aggregation_spec(spec, p, master, index, release_digest) for index, p in selections]
    # Combined tables post-processed on Spark stay there: noised by the Spark noise
    # job, their cells never collected (`dp_pipeline.release.tables.streamed`).
    on_spark = postprocess_on_spark(spec)
    combined = list(spec.postprocess.tables) if on_spark else []
    # One pass over the input for all tables: read, code, bound, aggregate.
    cells = noisy_cells(frame, specs, collect=not on_spark, derived=derived)
    try:
        timings["aggregate"] = time.perf_counter() - started
        progress(
            f"spark: read, bounded and aggregated the input for {len(specs)} tables "
            f"in {timings['aggregate']:.1f} s"
        )
        started = time.perf_counter()
        in_order = [*noised, *(table_plan for _, table_plan in selections)]
        found = {p.table.name: d for p, d in zip(in_order, cells.diagnostics, strict=True)}
        position = {p.table.name: index for index, p in enumerate(noised)}
        results = {}
        if combined:
            results.update(
                _kept_on_spark(cells, [position[n] for n in combined], combined, frame, with_truth)
            )
            progress(
                f"spark: {len(combined)} combined table(s) noised on the executors, "
                f"kept there for post-processing"
            )
        collected = [p for p in noised if p.table.name not in results]
        # The driver adds the other noised tables' noise (a Spark job does for very large
        # releases), decodes the keys and orders the cells.
        released_cells = cells.collect_released(
            [position[p.table.name] for p in collected], truth=with_truth
        )
        for table_plan, released in zip(collected, released_cells, strict=True):
            table = released.table.rename(columns={statistic_column(table_plan): "value"})
            table = table[[*table_plan.table.keys, "value"]]
            if with_truth:  # non-private values (synthetic data only)
                moments.add_spark_truth(table, table_plan, released, cells, position)
            results[table_plan.table.name] = table
            progress(f"spark: table {table_plan.table.name} ({len(table):,} cells)")
        # The selections' bounded counts are small (groups x grid, or the candidates):
        # collected with the noised tables' cells, selected on the driver.
        for offset, (_, table_plan) in enumerate(selections):
            index = len(noised) + offset
            counts = cells.true_aggregates(index)
            results[table_plan.table.name] = release_selection(
                spec,
                table_plan,
                master,
                specs[index],
                counts.count,
                counts.diagnostics,
                with_truth=with_truth,
                release_digest=release_digest,
            )
            progress(f"spark: table {table_plan.table.name} ({table_plan.table.statistic})")
        moments.spark_variances(
            spec, variances, master, frame, release_digest, results, found, with_truth
        )
        timings["noise"] = time.perf_counter() - started
    except BaseException:
        cells.close()
        raise
    if not combined:
        cells.close()
    if malformed:
        found = {name: replace(f, rows_malformed=malformed) for name, f in found.items()}
    return {p.table.name: results[p.table.name] for p in plan.tables}, timings, found


def _kept_on_spark(cells, indices, names, frame, with_truth) -> dict[str, OnSpark]:
    """The combined tables as `OnSpark` entries over one lazy noisy-cells DataFrame.

    The aggregates stay persisted until the release closes its tables
    (`dp_pipeline.release.tables.streamed.close_tables`).
    """
    closed = []

    def close() -> None:
        if not closed:
            closed.append(True)
            cells.close()

    queries = [cells.queries[i] for i in indices]
    tables = SparkNoisyTables(
        tuple(names),
        cells.spark_noisy_cells(indices, truth=with_truth),
        queries,
        [output_schema(frame, query)[1] for query in queries],
        with_truth,
        close,
    )
    return {name: OnSpark(tables, position) for position, name in enumerate(names)}


def _grid_position(frame, table):
    """The grid-position key of a quantile table, after checking its column is numeric."""
    check_numeric_column(frame, table.value, f"table {table.name!r}: column")
    return GridPosition(table.value, (table.lower, table.upper), table.granularity)
