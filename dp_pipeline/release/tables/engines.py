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

The pandas engine's half is `dp_pipeline.release.tables.on_pandas`; the Spark
engine's (its session, the small-input driver path) is
`dp_pipeline.release.tables.on_spark`, loaded only for a Spark release because
PySpark is an optional dependency.
"""

from __future__ import annotations

import importlib
import time

import pandas as pd
import pyarrow as pa

from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.release.plan.key_selections import selection_plans
from dp_pipeline.release.plan.release_plan import ReleasePlan
from dp_pipeline.release.sources.arrow_files import open_arrow_input
from dp_pipeline.release.sources.fingerprint import input_files, local_path
from dp_pipeline.release.sources.source import InputChangedError, OpenedInput
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError
from dp_pipeline.release.tables.on_pandas import (
    numpy_tables,
    pandas_tables,
    read_pandas_rows,
    true_values_pandas,
)
from dp_pipeline.release.tables.selected_keys import (
    empty_table,
    resolved_plans,
    selected_keys_pandas,
    selected_keys_spark,
)

__all__ = [
    "InputChangedError",
    "OpenedInput",
    "compute_release_tables",
    "compute_tables",
    "open_input",
    "true_values_pandas",
]


# Why pyarrow's discovery of a Parquet folder failed, without its message (see open_input).
DATASET_CONFLICT = (
    "its files and partition folders cannot be read as one dataset: a column has two "
    "types (a name=value folder whose values are not of one type, or a folder's column "
    "also stored in the files with another type); write the files with one schema and "
    "name each column in the folders or in the files, not both"
)


def _spark_half():
    # PySpark is optional: the Spark half is imported only by a Spark release.
    return importlib.import_module("dp_pipeline.release.tables.on_spark")


def open_input(
    spec: ReleaseSpec, path, input_format: str, progress, spark=None, *, verbose=False
) -> OpenedInput:
    """The `OpenedInput` of ``path`` for ``spec.engine`` (Spark: a session is started if none).

    ``path`` is a local path or a URI (None: the spec's catalog table, Spark only).
    The pandas engine reads local files (a path or a ``file:`` URI) and any URI
    ``pyarrow.fs`` opens (`open_arrow_input`). A session
    started here writes the JVM's and Spark's own lines to a log file (named in a
    progress line) unless ``verbose``.
    """
    if spec.engine == "pandas":
        local = local_path(str(path))
        if local is None:
            return open_arrow_input(spec, str(path), input_format)
        try:
            files = input_files(local, input_format)
        except pa.ArrowException:
            # pyarrow's text quotes the folders' values and the files' column names.
            raise SpecError([DATASET_CONFLICT], source=f"input {str(local)!r}") from None
        return OpenedInput(local, input_format, "pandas", files, location=str(local))
    return _spark_half().open_spark_input(
        spec, path, input_format, progress, spark, verbose=verbose
    )


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
    release's identity) labels every noise stream. Under ``on_invalid = "error"``
    the noisy invalid-row count decides first and may raise
    `dp_pipeline.release.tables.invalid_rows.InvalidRowsRefusedError`; a reader's failure on
    the data raises `dp_pipeline.release.sources.source.InputReadError`; call both only after
    the reservation (they are charged). Also returns the phase timings
    and each table's `Diagnostics` (rows read, dropped as invalid by reason, clamped,
    removed by bounding): exact counts of the private data, never published.
    """
    if source.engine == "pandas":
        return pandas_tables(spec, plan, master, source, release_digest, with_truth, progress)
    return _spark_half().spark_tables(
        spec, plan, master, source, release_digest, with_truth, progress
    )


def compute_release_tables(spec, plan, master, source, release_digest, *, with_truth, progress):
    """(the plan to publish, tables, timings, diagnostics): `compute_tables`, after the
    key selections of ``[domains] column = "from_data"`` when the plan has any
    (`dp_pipeline.release.tables.selected_keys`: the keys selected on this engine, then
    every table computed on exactly the released keys; its plan and spec carry them)."""
    if not plan.spec.key_selections:
        return (
            plan,
            *compute_tables(
                spec, plan, master, source, release_digest, with_truth=with_truth, progress=progress
            ),
        )
    started = time.perf_counter()
    if source.engine == "pandas":
        frame, malformed = read_pandas_rows(spec, source)
        released = selected_keys_pandas(spec, plan, master, frame, release_digest)
    else:
        spark_half = _spark_half()
        with spark_half.spark_read_errors(source.where, source.spark):
            frame = spark_half.spark_input_frame(spec, source)
            released = selected_keys_spark(spec, plan, master, frame, release_digest)
    seconds = time.perf_counter() - started
    for entry in selection_plans(plan):
        progress(
            f"{source.engine}: key selection of {entry.column!r} released "
            f"{len(released[entry.column]):,} key(s) (threshold {entry.selection.threshold})"
        )
    compute, publish = resolved_plans(plan, released)
    if not compute.tables:  # no key released: every table is empty, nothing to aggregate
        results, timings, found = {}, {"select_keys": seconds}, {}
    elif source.engine == "pandas":
        results, timings, found = numpy_tables(
            compute.spec,
            compute,
            master,
            frame,
            release_digest,
            with_truth,
            progress,
            {"read_select": seconds},
            "pandas",
            malformed_rows=malformed,
        )
    else:
        results, timings, found = compute_tables(
            compute.spec,
            compute,
            master,
            source,
            release_digest,
            with_truth=with_truth,
            progress=progress,
        )
        timings["select_keys"] = seconds
    for table_plan in publish.tables:
        name = table_plan.table.name
        if name not in results:
            results[name] = empty_table(publish.spec, table_plan.table, with_truth)
    return publish, {t.table.name: results[t.table.name] for t in publish.tables}, timings, found
