"""Atomic release outputs: everything is written to a hidden, owner-only folder, then renamed.

This is the protocol of a local output folder; an output URI, where no atomic
rename exists, is published by `dp_pipeline.release.publish.remote`.

``out/<release id>/`` either does not exist or holds a complete release:
tables, ``privacy_report.json``, ``report.html`` and, last, ``manifest.json``
(`dp_pipeline.release.publish.manifest`) are written into
``out/.<release id>.tmp-<pid>-<token>/``, created 0700 so that no one else
can read a release that was not published, and that folder is made readable
as a plain new folder would be and renamed into place (``os.replace`` of a
directory is atomic on one file system). Only an earlier copy of the same
release (same manifest) is replaced: it is first renamed aside and removed
after the swap; anything else at ``out/<release id>`` is refused, never
deleted. Leftovers of a killed job (``.tmp-`` / ``.old-`` folders of exactly
that release id) are removed by the next run of that release id, which holds
the release id's lease (no run that wrote them is alive).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dp_pipeline.errors import DPValueError
from dp_pipeline.release.publish.manifest import check_replaceable, hidden_folders, hidden_name

__all__ = [
    "ROW_GROUP_ROWS",
    "AtomicReleaseDirectory",
    "clean_stale",
    "write_batches",
    "write_json",
    "write_table",
]

# The rows of one Parquet row group: `pq.write_table`'s own cut (pyarrow's default),
# which `write_batches` must repeat for the files to be the same bytes.
ROW_GROUP_ROWS = 1024 * 1024


def clean_stale(final: Path) -> list[Path]:
    """Remove the hidden folders a killed run of exactly ``final`` left behind; return them.

    Call it only while holding the release id's lease: no live run owns them then.
    """
    removed = hidden_folders(final)
    for leftover in removed:
        shutil.rmtree(leftover, ignore_errors=True)
    return removed


def _plain_folder_mode() -> int:
    """The mode ``mkdir`` gives a new folder under the current umask."""
    umask = os.umask(0o077)
    os.umask(umask)
    return 0o777 & ~umask


class AtomicReleaseDirectory:
    """``with AtomicReleaseDirectory(final, id, digest) as folder:`` ..., ``.publish(manifest)``.

    Leaving the ``with`` block without `publish` (an exception) deletes the
    temporary folder: nothing half-written is ever visible at ``final``.
    """

    def __init__(self, final: str | os.PathLike[str], release_id: str, digest: str) -> None:
        self.final = Path(final)
        self.release_id = release_id
        self.digest = digest
        self.temporary = self.final.parent / hidden_name(
            self.final.name, "tmp", os.getpid(), secrets.token_hex(4)
        )
        self.published = False

    def __enter__(self) -> Path:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.temporary.mkdir(mode=0o700)
        os.chmod(self.temporary, 0o700)  # the mode argument is filtered by the umask
        return self.temporary

    def check_replaceable(self, files: dict | None = None) -> None:
        """Refuse (`PublicationError`) if ``final`` holds anything but this release's copy."""
        check_replaceable(self.final, self.release_id, self.digest, files)

    def publish(self, manifest: dict) -> Path:
        """Rename the finished folder into place (replacing an earlier copy of the same bytes).

        The files were flushed to disk when ``manifest`` was written.
        """
        self.check_replaceable(manifest["files"])
        os.chmod(self.temporary, _plain_folder_mode())
        old = None
        if self.final.exists():
            old = self.final.parent / hidden_name(
                self.final.name, "old", os.getpid(), secrets.token_hex(4)
            )
            os.replace(self.final, old)
        os.replace(self.temporary, self.final)
        self.published = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.final

    def __exit__(self, kind, value, traceback) -> None:
        if not self.published:
            shutil.rmtree(self.temporary, ignore_errors=True)


_OPTIONS = {"compression": "zstd", "write_statistics": True}


def write_table(table: pa.Table, path: Path) -> None:
    """One Parquet file, deterministic bytes for the same table (no timestamps)."""
    pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS, **_OPTIONS)


def write_batches(batches: Iterable[pa.Table], path: Path) -> int:
    """The Parquet file `write_table` writes for the concatenation of ``batches``; its rows.

    Every batch but the last must have exactly `ROW_GROUP_ROWS` rows: each becomes
    one row group, where `write_table` cuts them, so the bytes are the same while
    only one batch is in memory at a time. A failure leaves a partial file, which
    lives in the release's hidden temporary folder only.
    """
    writer = None
    rows = 0
    short = False
    try:
        for batch in batches:
            if short or batch.num_rows > ROW_GROUP_ROWS:
                raise DPValueError(
                    f"{path.name}: batches must have {ROW_GROUP_ROWS} rows, all but the last"
                )
            short = batch.num_rows < ROW_GROUP_ROWS
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema, **_OPTIONS)
            writer.write_table(batch, row_group_size=ROW_GROUP_ROWS)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        raise DPValueError(f"{path.name}: no batch to write")
    return rows


def write_json(data: dict, path: Path) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
