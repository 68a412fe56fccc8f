"""Atomic release outputs: everything is written to a hidden sibling folder, then renamed.

``out/<release id>/`` either does not exist or holds a complete release:
tables, ``privacy_report.json`` and ``report.html`` are written into
``out/.<release id>.tmp-<pid>-<token>/`` and that folder is renamed into place
(``os.replace`` of a directory is atomic on one file system). A previous
complete output of the same release id (a re-emission) is first renamed aside
and removed after the swap. Leftovers of a killed job (``.tmp-`` / ``.old-``
folders) are removed by the next run of that release id.
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
    """Remove temporary folders a killed run of ``final`` left behind; return them."""
    removed = []
    if final.parent.exists():
        for leftover in final.parent.glob(f".{final.name}.*-*"):
            if leftover.is_dir() and (".tmp-" in leftover.name or ".old-" in leftover.name):
                shutil.rmtree(leftover, ignore_errors=True)
                removed.append(leftover)
    return removed


class AtomicReleaseDirectory:
    """``with AtomicReleaseDirectory(final) as folder: ...`` then ``.publish()``.

    Leaving the ``with`` block without `publish` (an exception) deletes the
    temporary folder: nothing half-written is ever visible at ``final``.
    """

    def __init__(self, final: str | os.PathLike[str]) -> None:
        self.final = Path(final)
        token = secrets.token_hex(4)
        self.temporary = self.final.parent / f".{self.final.name}.tmp-{os.getpid()}-{token}"
        self.published = False

    def __enter__(self) -> Path:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.temporary.mkdir()
        return self.temporary

    def publish(self) -> Path:
        """Rename the finished folder into place (replacing an earlier copy)."""
        for path in self.temporary.rglob("*"):
            if path.is_file():
                with path.open("rb") as handle:
                    os.fsync(handle.fileno())
        old = None
        if self.final.exists():
            old = self.final.parent / f".{self.final.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
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
                raise ValueError(
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
        raise ValueError(f"{path.name}: no batch to write")
    return rows


def write_json(data: dict, path: Path) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
