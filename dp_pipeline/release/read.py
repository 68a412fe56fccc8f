"""Reading a published release back: only a complete one, every table checked against its
manifest's SHA-256."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_pipeline.errors import DPValueError
from dp_pipeline.release.publish.filesystems import is_uri, open_filesystem, split_uri
from dp_pipeline.release.publish.manifest import MANIFEST_NAME, read_manifest
from dp_pipeline.release.publish.remote import verified_files

__all__ = ["read_release"]


def read_release(folder: str | os.PathLike[str], spark=None) -> dict[str, pd.DataFrame]:
    """The released tables of a release folder, by table name.

    Only a complete release is read: the folder must hold a manifest naming
    exactly its files, and every table must have the manifest's SHA-256
    (each file is read once, hashed and parsed from the same bytes). A URI
    (``viewfs://.../<release id>``) is read through ``spark``'s Hadoop file
    system, or ``pyarrow.fs`` without a classic session.
    """
    if is_uri(str(folder)):
        root, name = split_uri(str(folder))
        filesystem = open_filesystem(root, spark)
        try:
            files = verified_files(filesystem, name, ".parquet")
        finally:
            filesystem.close()
        return {
            key.removesuffix(".parquet"): pq.read_table(pa.BufferReader(data)).to_pandas()
            for key, data in files.items()
        }
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        raise DPValueError(
            f"{str(folder)!r} is not a complete release: it has no {MANIFEST_NAME} naming "
            "exactly its files (a folder written by an interrupted run, or not a release)"
        )
    tables = {}
    for name, entry in sorted(manifest["files"].items()):
        if not name.endswith(".parquet"):
            continue
        data = (folder / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise DPValueError(
                f"{str(folder / name)!r} differs from the release's {MANIFEST_NAME}: the "
                "file was changed after publication; read the release from a trusted copy"
            )
        tables[name.removesuffix(".parquet")] = pq.read_table(pa.BufferReader(data)).to_pandas()
    return tables
