"""Input fingerprints: a keyed HMAC of exactly the files an engine reads, never the data.

The files are the engine's own list, not a folder walk of ours: pyarrow's
dataset discovery for the pandas engine (`input_files`), the DataFrame's
``inputFiles()`` for Spark (`spark_input_files`), symlinks followed as the
engines follow them. A file the engine reads is therefore always covered,
whatever its name (``part-1.crc``, ``_x=1.parquet``, a file under a linked
folder), and the engines read the listed files themselves, so what was
fingerprinted is what was aggregated.

The fingerprint is HMAC-SHA256 under a subkey of the `MasterKey` (label
``input-fingerprint``) of a SHA-256 digest over the files in sorted order,
each framed by its name (relative to the input path) and length. Without the
key it reveals nothing about the data (HMAC is a PRF) and cannot be used to
test guesses of the input.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from dp_pipeline.errors import DPValueError
from dp_pipeline.randomness import MasterKey

__all__ = ["files_fingerprint", "input_files", "local_files", "spark_input_files"]

_BLOCK = 1 << 20


def _exists(root: Path) -> None:
    if not root.exists():
        raise FileNotFoundError(f"input path {str(root)!r} does not exist")


def input_files(path: str | os.PathLike[str], input_format: str) -> tuple[Path, ...]:
    """The files the pandas engine reads for ``path`` (pyarrow's dataset discovery)."""
    import pyarrow.dataset as ds

    root = Path(path)
    _exists(root)
    if input_format == "csv":
        if root.is_dir():
            raise DPValueError(
                f"input path {str(root)!r} is a folder; the pandas engine reads one CSV "
                "file (use the spark engine for a folder of CSV files)"
            )
        return (root,)
    dataset = ds.dataset(str(root), format="parquet", partitioning="hive")
    files = tuple(sorted(Path(name) for name in dataset.files))
    if not files:
        raise FileNotFoundError(f"input path {str(root)!r} holds no data files")
    return files


def spark_input_files(spark, path: str | os.PathLike[str], input_format: str) -> tuple[Path, ...]:
    """The files Spark reads for ``path`` (``DataFrame.inputFiles()``), as local paths.

    The listing uses a placeholder schema, so no file is opened: only the
    file index that the release's DataFrame will use is built.
    """
    root = Path(path)
    _exists(root)
    reader = spark.read.schema("_dp_listing string")
    frame = reader.csv(str(root)) if input_format == "csv" else reader.parquet(str(root))
    return local_files(frame.inputFiles(), root)


def local_files(uris: Sequence[str], root: Path) -> tuple[Path, ...]:
    """Spark's input file URIs as local paths (refused when not on the local file system)."""
    files = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            raise DPValueError(
                f"input file {uri!r} is not on the local file system; releases fingerprint "
                "the bytes they read and support local paths only"
            )
        files.append(Path(unquote(parsed.path)))
    if not files:
        raise FileNotFoundError(f"input path {str(root)!r} holds no data files")
    return tuple(sorted(files))


def _name(file: Path, root: Path) -> str:
    if root.is_file():
        return file.name
    for base in (root, root.resolve()):
        try:
            return file.relative_to(base).as_posix()
        except ValueError:
            continue
    return file.resolve().as_posix()


def files_fingerprint(
    master: MasterKey, root: str | os.PathLike[str], files: Sequence[Path]
) -> str:
    """The keyed fingerprint (64 hex digits) of ``files``, named relative to ``root``."""
    root = Path(root)
    digest = hashlib.sha256()
    named = sorted((_name(Path(file), root), Path(file)) for file in files)
    digest.update(len(named).to_bytes(8, "big"))
    for name, file in named:
        digest.update(len(name).to_bytes(8, "big") + name.encode())
        with file.open("rb") as handle:  # open() follows symlinks, as the engines do
            digest.update(os.fstat(handle.fileno()).st_size.to_bytes(8, "big"))
            size = 0
            while block := handle.read(_BLOCK):
                digest.update(block)
                size += len(block)
        digest.update(size.to_bytes(8, "big"))
    return master.hmac_sha256(b"input-fingerprint", digest.digest()).hex()
