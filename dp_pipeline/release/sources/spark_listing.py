"""A Spark input listed by Spark: its files as Spark names them, a table's files, the first
line of each file, and Spark's errors while listing named in one line.

Listing: the DataFrame's own ``inputFiles()`` over the input (a path or URI on any
Hadoop file system the session is configured for, or a catalog table), read with a
placeholder schema, so no data file is opened; a view is refused (its query, not its
files, decides its rows). Errors (`listing_errors`): Spark's and Hadoop's messages can
quote credentials (a URI's user info, a signed request) and internal addresses, so
none is shown; the failure is classified (no such path or table, no file system for
the scheme, unreachable store, refused credentials) into one line naming the source
and the fix. The hashing of the listed files is `dp_pipeline.release.sources.spark_files`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlparse

from pyspark.errors import PySparkException
from pyspark.sql import functions as sf

from dp_pipeline.engines.spark.session.failures import java_out_of_memory, session_failure
from dp_pipeline.release.sources.failures import error_text, failure_rule
from dp_pipeline.release.sources.fingerprint import local_path
from dp_pipeline.release.sources.source import shown_location
from dp_pipeline.release.spec.model import SpecError

try:  # a classic session's errors; a Spark Connect client has no py4j
    from py4j.protocol import Py4JError, Py4JJavaError

    SPARK_ERRORS: tuple[type[BaseException], ...] = (PySparkException, Py4JJavaError)
    # A JVM method a Spark version does not have, too.
    PY4J_ERRORS: tuple[type[BaseException], ...] = (Py4JError,)
except ImportError:  # pragma: no cover - Spark Connect only
    SPARK_ERRORS = (PySparkException,)
    PY4J_ERRORS = ()

__all__ = [
    "JAVA_CAUSES",
    "PY4J_ERRORS",
    "SPARK_ERRORS",
    "first_lines",
    "listed_files",
    "listed_frame",
    "listed_input",
    "listing_errors",
    "listing_frame",
    "source_label",
]


# How deep a failure's Java causes are read for its kind (`java_causes`).
JAVA_CAUSES = 8


def _classified(error: BaseException, scheme: str) -> str | None:
    return failure_rule(error_text(error, JAVA_CAUSES), scheme)


@contextlib.contextmanager
def listing_errors(source: str, scheme: str = "", spark=None) -> Iterator[None]:
    """Spark's errors while listing or hashing ``source`` as one `SpecError` line (see module).

    Not an error of the session itself (``spark``'s JVM out of memory or gone,
    `session_failure`): no fault of the source, the run names it.
    """
    try:
        yield
    except SPARK_ERRORS as error:
        if java_out_of_memory(error) or session_failure(spark, error) is not None:
            raise
        rule = _classified(error, scheme) or (
            "Spark could not list or read it; the JVM's log of the run has the details "
            "(its message is not shown: it can quote credentials)"
        )
        raise SpecError([rule], source=source) from None


def source_label(location: str, table: str | None) -> str:
    """How errors name an input: ``input.table 'db.t'`` or ``input 'uri'`` (no credentials)."""
    if table is not None:
        return f"input.table {table!r}"
    return f"input {shown_location(location)!r}"


def listing_frame(spark, location: str, input_format: str, table: str | None):
    """The DataFrame whose file index the release reads (a placeholder schema: no file opened)."""
    if table is not None:
        return spark.table(table)
    reader = spark.read.schema("_dp_listing string")
    return reader.csv(location) if input_format == "csv" else reader.parquet(location)


# The catalog's types of a table stored in files (not a view, not a temporary view).
_STORED_TABLE_TYPES = ("MANAGED", "EXTERNAL")


def _check_stored_table(spark, table: str, source: str) -> None:
    """Refuse a view: its files are not what it returns (its query filters or joins them).

    The release's identity is the files a table reads; a view (persistent, temporary
    or global temporary) over files returns rows its query chooses, so two different
    inputs would have one fingerprint.
    """
    entry = spark.catalog.getTable(table)
    if entry.isTemporary or entry.tableType not in _STORED_TABLE_TYPES:
        kind = "a temporary view" if entry.isTemporary else f"of type {entry.tableType}"
        raise SpecError(
            [
                f"it is {kind}, not a table stored in files: "
                "a release is bound to the files it reads, and a view's query decides which "
                "of its files' rows it returns; write the view's rows to a table "
                "(CREATE TABLE ... AS SELECT) and release that table"
            ],
            source=source,
        )


def listed_files(spark, location: str, input_format: str, table: str | None) -> tuple[str, ...]:
    """The files Spark reads for the input, as Spark names them (sorted URIs).

    Raises `SpecError` (one line, no Spark message) when it cannot be listed or
    holds no file.
    """
    return listed_frame(spark, location, input_format, table)[0]


def listed_frame(
    spark: Any, location: str, input_format: str, table: str | None
) -> tuple[tuple[str, ...], Any]:
    """`listed_files`, and the DataFrame whose file index listed them (`listing_frame`:
    no file opened), whose sizes `index_sizes` reads."""
    source = source_label(location, table)
    with listing_errors(source, urlparse(location).scheme):
        if table is not None:
            _check_stored_table(spark, table, source)
        frame = listing_frame(spark, location, input_format, table)
        uris = frame.inputFiles()
    if not uris:
        what = (
            "the table has no files Spark can list (an empty table, or a view or table "
            "that is not stored in files); a release reads a table stored in files"
            if table is not None
            else "it holds no data files; give a file or a folder of data files"
        )
        raise SpecError([what], source=source)
    return tuple(sorted(uris)), frame


def listed_input(
    spark, location: str, input_format: str, table: str | None
) -> tuple[tuple[str, ...], object | None, object]:
    """`listed_files`, for a Parquet input outside the local file system its DataFrame,
    and the DataFrame whose file index listed the files (`index_sizes`).

    Such an input is read once, ``spark.read.parquet(location)``: one listing of its
    files (the DataFrame's file index, which its reads use) and one schema inference
    (a footer, as Spark infers it), instead of a listing for the fingerprint, another
    read for the schema check and a third for the tables. The DataFrame (second item)
    reads exactly the listed files; None for other inputs (listed with a placeholder
    schema, no file opened, the third item). A read that fails leaves the reasons to
    `listed_files` (no such path, no data files) and to the schema check.
    """
    if table is None and input_format == "parquet" and local_path(location) is None:
        frame = None
        try:
            frame = spark.read.parquet(location)
            uris = tuple(sorted(frame.inputFiles()))
        except SPARK_ERRORS:
            frame = None  # named below, outside this block (no chained Spark message)
        if frame is not None and uris:
            return uris, frame, frame
    uris, index = listed_frame(spark, location, input_format, table)
    return uris, None, index


# Files whose first line one Spark job reads (a union of one-row reads per file).
HEADER_FILES_PER_JOB = 64


def first_lines(spark, uris: Sequence[str], source: str) -> dict[str, str | None]:
    """The first line of each file in ``uris``, read by Spark (None: the file has no line).

    Each file is read through the session's file system as text with a limit of one
    row, so only the start of each file is read (a header, never a data row's use
    before the reservation); one job reads up to `HEADER_FILES_PER_JOB` files.
    """
    lines: dict[str, str | None] = dict.fromkeys(uris)
    with listing_errors(source, urlparse(uris[0]).scheme if uris else ""):
        for start in range(0, len(uris), HEADER_FILES_PER_JOB):
            batch = list(uris[start : start + HEADER_FILES_PER_JOB])
            frames = [
                spark.read.text(uri).limit(1).select(sf.lit(index).alias("i"), "value")
                for index, uri in enumerate(batch)
            ]
            union = frames[0]
            for frame in frames[1:]:
                union = union.unionAll(frame)
            for row in union.collect():
                lines[batch[row["i"]]] = row["value"]
    return lines
