"""Input fingerprints: a keyed HMAC of exactly the files an engine reads, never the data.

The files are the engine's own list, not a folder walk of ours: pyarrow's
dataset discovery for the pandas engine (`input_files`), the DataFrame's
``inputFiles()`` for Spark (`dp_pipeline.release.sources.spark_files`), symlinks
followed as the engines follow them. A file the engine reads is therefore always
covered, whatever its name (``part-1.crc``, ``_x=1.parquet``, a file under a
linked folder), and the engines read the listed files themselves, so what was
fingerprinted is what was aggregated.

Each file has a content digest (`content_digest`): SHA-256 over the SHA-256s of
its consecutive ranges of `CHUNK_BYTES`, framed by the file's size. The ranges
are independent, so they are hashed where the bytes are and in parallel (Spark:
tasks of the executors, `dp_pipeline.release.sources.spark_files`; pandas:
threads of this process), each reading one range in blocks of 1 MiB
(`range_reader`): no task holds a file, and the driver streams no input larger
than one range. The digests are plain
SHA-256 (no key travels to an executor).

The fingerprint is HMAC-SHA256 under a subkey of the `MasterKey` (label
``input-fingerprint``) of a SHA-256 digest over the files in sorted order, each
framed by its name (relative to the input path; a catalog table's files by
their full URI, after the table's name and schema), size and content digest.
Without the key it reveals nothing about the data (HMAC is a PRF) and cannot be
used to test guesses of the input; a changed byte changes the file's content
digest, hence the fingerprint (SHA-256 is collision resistant).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from dp_pipeline.errors import DPFileNotFoundError, DPValueError
from dp_pipeline.randomness import MasterKey

__all__ = [
    "CHUNK_BYTES",
    "FileDigest",
    "FileRangeError",
    "chunk_ranges",
    "content_digest",
    "content_fingerprint",
    "digests_fingerprint",
    "file_name",
    "files_fingerprint",
    "grouped_digests",
    "input_files",
    "local_digests",
    "local_path",
    "range_digest",
    "range_reader",
]

_BLOCK = 1 << 20
# One range of a file per hashing task: large enough that a task's start-up is small
# against its reading, small enough that a multi-GB input makes many tasks.
CHUNK_BYTES = 64 * 2**20
_CONTENT_LABEL = b"dp_pipeline/content/v1"


class FileRangeError(DPValueError):
    """A file held fewer bytes than its listed size while one of its ranges was hashed."""


@dataclass(frozen=True)
class FileDigest:
    """One file of an input: its name in the fingerprint, its size (bytes), its content digest."""

    name: str
    size: int
    sha256: str  # `content_digest`, 64 hex digits


def _exists(root: Path) -> None:
    if not root.exists():
        raise DPFileNotFoundError(f"input path {str(root)!r} does not exist")


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
        raise DPFileNotFoundError(f"input path {str(root)!r} holds no data files")
    return files


def local_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI or a plain path; None for another scheme."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(uri)
    return None


def chunk_ranges(size: int) -> list[tuple[int, int]]:
    """The (offset, length) ranges of a file of ``size`` bytes (an empty file: one empty range)."""
    starts = range(0, size, CHUNK_BYTES)
    return [(offset, min(CHUNK_BYTES, size - offset)) for offset in starts] or [(0, 0)]


def range_reader(block: int = _BLOCK) -> Callable[[str, int, int], bytes | None]:
    """A function ``(path, offset, length) -> SHA-256`` of a file's range, read in ``block`` bytes.

    It returns None when the file is gone or ends before ``offset + length`` (it
    changed after it was listed). The function is a closure over the standard
    library only: pickled to a Spark Python worker it imports nothing of
    dp_pipeline there, so a hashing task starts without the package's import. It
    reads into one reused buffer (no allocation per block); hashlib releases the
    GIL while it hashes a block, so threads hash in parallel.
    """

    def digest(path: str, offset: int, length: int) -> bytes | None:
        view = memoryview(bytearray(max(1, min(block, length))))
        hasher = hashlib.sha256()
        try:
            with open(path, "rb", buffering=0) as handle:  # open() follows symlinks
                handle.seek(offset)
                left = length
                while left:
                    read = handle.readinto(view[: min(len(view), left)])
                    if not read:
                        return None
                    hasher.update(view[:read])
                    left -= read
        except OSError:
            return None
        return hasher.digest()

    return digest


def range_digest(handle, offset: int, length: int) -> bytes:
    """SHA-256 of ``length`` bytes of an open binary file from ``offset`` (read in 1 MiB blocks).

    For file objects of other file systems (`pyarrow.fs` input files); the same digest as
    `range_reader`'s for a local file. Raises `FileRangeError` when the file ends
    before: it changed after it was listed.
    """
    handle.seek(offset)
    digest = hashlib.sha256()
    left = length
    while left:
        block = handle.read(min(_BLOCK, left))
        if not block:
            raise FileRangeError("a file is shorter than its listed size (it changed meanwhile)")
        digest.update(block)
        left -= len(block)
    return digest.digest()


def content_digest(size: int, range_digests: Sequence[bytes]) -> str:
    """A file's content digest (hex): SHA-256 of its size, `CHUNK_BYTES`, its ranges' SHA-256s."""
    if len(range_digests) != len(chunk_ranges(size)):
        raise DPValueError(f"{len(range_digests)} range digests for a file of {size} bytes")
    digest = hashlib.sha256(_CONTENT_LABEL)
    digest.update(size.to_bytes(8, "big") + CHUNK_BYTES.to_bytes(8, "big"))
    for part in range_digests:
        digest.update(part)
    return digest.hexdigest()


def local_digests(
    files: Sequence[Path], names: Sequence[str], threads: int | None = None
) -> tuple[FileDigest, ...]:
    """The `FileDigest` of each local file, its ranges hashed by ``threads`` threads.

    hashlib releases the GIL while it hashes a block, so the threads hash in
    parallel; each reads one range at a time (bounded memory).
    """
    sizes = [Path(file).stat().st_size for file in files]
    tasks = [(i, o, n) for i, size in enumerate(sizes) for o, n in chunk_ranges(size)]
    workers = threads or min(4, os.cpu_count() or 1)
    read = range_reader()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(lambda t: read(str(files[t[0]]), t[1], t[2]), tasks))
    if None in parts:
        raise FileRangeError("a file vanished or is shorter than its listed size (it changed)")
    return grouped_digests(names, sizes, tasks, parts)


def grouped_digests(
    names: Sequence[str],
    sizes: Sequence[int],
    tasks: Sequence[tuple[int, int, int]],
    parts: Sequence[bytes],
) -> tuple[FileDigest, ...]:
    """Each file's `FileDigest` from its ranges' SHA-256s (``tasks``: (file, offset, length))."""
    by_file: list[list[bytes]] = [[] for _ in names]
    for (index, _, _), part in zip(tasks, parts, strict=True):
        by_file[index].append(part)
    return tuple(
        FileDigest(name, size, content_digest(size, found))
        for name, size, found in zip(names, sizes, by_file, strict=True)
    )


def digests_fingerprint(
    master: MasterKey, digests: Iterable[FileDigest], header: bytes = b""
) -> str:
    """The keyed fingerprint (64 hex digits) of the files' names, sizes and content digests.

    ``header`` is framed first when given (a catalog table's name and schema).
    """
    entries = sorted(digests, key=lambda d: d.name)
    digest = hashlib.sha256()
    if header:
        digest.update(b"header" + len(header).to_bytes(8, "big") + header)
    digest.update(len(entries).to_bytes(8, "big"))
    for entry in entries:
        name = entry.name.encode()
        digest.update(len(name).to_bytes(8, "big") + name)
        digest.update(entry.size.to_bytes(8, "big") + bytes.fromhex(entry.sha256))
    return master.hmac_sha256(b"input-fingerprint", digest.digest()).hex()


def content_fingerprint(master: MasterKey, digests: Iterable[FileDigest]) -> str:
    """The keyed digest (64 hex digits) of the files' contents alone, names excluded.

    The multiset of (size, content digest), sorted, under its own subkey (label
    ``input-content``): a byte-identical copy of an input under another name, or inside
    another folder, has the same one, so the ledger recognises it as the same people
    (`Ledger.reserve`'s input check). Keyed, so that the ledger does not hold plain
    content hashes of confidential files that could confirm a guess of their bytes.
    """
    entries = sorted((d.size, d.sha256) for d in digests)
    digest = hashlib.sha256(len(entries).to_bytes(8, "big"))
    for size, sha256 in entries:
        digest.update(size.to_bytes(8, "big") + bytes.fromhex(sha256))
    return master.hmac_sha256(b"input-content", digest.digest()).hex()


def _name(file: Path, root: Path) -> str:
    if root.is_file():
        return file.name
    for base in (root, root.resolve()):
        try:
            return file.relative_to(base).as_posix()
        except ValueError:
            continue
    return file.resolve().as_posix()


def file_name(uri: str, root: str) -> str:
    """The name of a listed file in the fingerprint: relative to the input's root.

    A local root: as before, relative to the root as written or resolved. A URI root:
    relative to the root's path when the file lies under it (its basename when the
    root is the file), else the whole URI (never less than the file's location).
    """
    local, base = local_path(uri), local_path(root)
    if local is not None and base is not None:
        return _name(local, base)
    parsed, parent = urlparse(uri), urlparse(root)
    if (parsed.scheme, parsed.netloc) == (parent.scheme, parent.netloc):
        path, top = unquote(parsed.path), unquote(parent.path).rstrip("/")
        if path == top:
            return path.rsplit("/", 1)[-1]
        if path.startswith(top + "/"):
            return path[len(top) + 1 :]
    return uri


def files_fingerprint(
    master: MasterKey, root: str | os.PathLike[str], files: Sequence[Path]
) -> str:
    """The keyed fingerprint (64 hex digits) of local ``files``, named relative to ``root``."""
    root = Path(root)
    names = [_name(Path(file), root) for file in files]
    return digests_fingerprint(master, local_digests(files, names))
