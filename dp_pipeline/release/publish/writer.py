"""Writing a release's folder: its tables, reports and manifest, then its publication.

Every table goes into the hidden, owner-only folder of its `ReleaseDirectory`; a table
kept on Spark is written one row group at a time (`write_streamed`, the same bytes as
the driver's one-call write); ``manifest.json``, with every file's SHA-256, is written
last. A release id publishes the bytes recorded at its first publication or nothing:
the manifest is checked against the ledger's before the ledger records publication
(`Ledger.mark_publishing`), and only then is the folder moved into place.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from dp_pipeline.release import protocol
from dp_pipeline.release.protocol import Checkpoint
from dp_pipeline.release.publish.manifest import check_same_bytes, write_manifest
from dp_pipeline.release.publish.outputs import (
    ROW_GROUP_ROWS,
    write_batches,
    write_json,
    write_table,
)
from dp_pipeline.release.publish.remote import RemoteReleaseDirectory
from dp_pipeline.release.report.accuracy import (
    TableAccuracy,
    accuracy_summary,
    table_accuracies,
)
from dp_pipeline.release.report.key_selections import key_selection_rows
from dp_pipeline.release.report.postprocess import with_widened
from dp_pipeline.release.report.writer import html_report, privacy_report
from dp_pipeline.release.sources.schema import published_table, table_schema
from dp_pipeline.release.tables.streamed import StreamedTable

__all__ = ["write_outputs", "write_streamed"]


def write_outputs(
    directory,
    plan,
    results: dict,
    postprocessing: dict | None,
    *,
    ledger,
    reservation,
    key_fingerprint: str,
    input_fingerprint: str,
    identity,
    made: dict[str, str | None],
    progress,
) -> dict:
    """Write ``results`` (tables, or `StreamedTable`s kept on Spark) into ``directory``'s
    hidden folder with the reports and ``manifest.json`` last, record publication in the
    ledger for ``reservation`` (not for a re-emission of a committed release), then
    publish the folder; returns the privacy report. ``made``: the engine and versions,
    recorded with the bytes (a recompute must match them)."""
    spec = plan.spec
    files = {}
    seen = dict(results)  # what the accuracy summary and the report read: tables or tallies
    with directory as folder:
        for table in plan.tables:
            name = table.table.name
            path = folder / f"{name}.parquet"
            if isinstance(results[name], StreamedTable):
                rows, columns, seen[name] = write_streamed(plan, table, results[name], path)
            else:
                arrow = published_table(spec, table.table, results[name])
                rows, columns = arrow.num_rows, arrow.schema.names
                write_table(arrow, path)
            files[f"{name}.parquet"] = {"rows": rows, "columns": columns}
            progress(f"wrote {name}.parquet ({rows:,} rows)")
        report = privacy_report(plan, reservation, key_fingerprint, files)
        report["input_fingerprint"] = input_fingerprint
        report["release_digest"] = identity.digest
        if postprocessing:
            report["postprocessing"] = postprocessing
        write_json(report, folder / "privacy_report.json")
        accuracies = table_accuracies(plan, seen)
        accuracy = with_widened(accuracy_summary(plan, accuracies), postprocessing)
        if accuracy:
            report_accuracy = {"accuracy_vs_truth": accuracy}
            if plan.spec.key_selections:  # which keys a table may lack: threshold, keys kept
                report_accuracy["key_selections"] = key_selection_rows(plan)
            write_json(report_accuracy, folder / "accuracy.json")
        (folder / "report.html").write_text(html_report(plan, report, accuracies, accuracy))
        manifest = write_manifest(folder, spec.release_id, identity.digest, made)  # last
        protocol.checkpoint(Checkpoint.BEFORE_PUBLISH)
        # A release id publishes the bytes recorded at its first publication or nothing;
        # a failed check leaves this folder to be removed, never published.
        check_same_bytes(
            spec.release_id, reservation.manifest, manifest, reservation.engine, spec.engine
        )
        directory.check_replaceable(manifest["files"])
        if reservation.outcome != "already_committed":
            ledger.mark_publishing(reservation, manifest, spec.engine)
        if isinstance(directory, RemoteReleaseDirectory):
            directory.publish(manifest, protocol.checkpoint)  # manifest last: what readers trust
        else:
            directory.publish(manifest)
    return report


def write_streamed(plan, table, streamed: StreamedTable, path: Path):
    """Write a table kept on Spark one row group at a time.

    Each batch becomes the Arrow table `published_table` makes of the same rows
    (`table_schema`, no metadata), so the file is the driver path's bytes, and is
    tallied by the table's `TableAccuracy` (which keeps exact tallies, never the
    rows; on real input, without the truth, it has no summary). Returns (rows,
    column names, the `TableAccuracy`).
    """
    schema = table_schema(plan.spec, table.table, raw=True)
    accuracy = TableAccuracy(plan, table, value_margin=streamed.value_margin)

    def published():
        for batch in streamed.batches(ROW_GROUP_ROWS):
            arrow = pa.Table.from_arrays([batch.column(n) for n in schema.names], schema.names)
            if streamed.truth:  # synthetic input: the batch's rows against the truth
                accuracy.add(batch.to_pandas())
            yield arrow.cast(schema)
            protocol.checkpoint(Checkpoint.MID_TABLE)  # a row group is in the hidden folder's file

    rows = write_batches(published(), path)
    return rows, schema.names, accuracy
