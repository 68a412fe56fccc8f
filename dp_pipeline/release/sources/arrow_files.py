"""A pandas input on a ``pyarrow.fs`` file system: listed, hashed and checked before reading.

The pandas engine reads local files directly; any other URI ``pyarrow.fs`` opens
(``s3://``, ``gs://``, ``abfs://``, ``hdfs://`` with libhdfs; a ``file://`` URI is a
local path) is read through that file system (`open_arrow_input`), under the same
rules as a local input:

- Listing: a CSV input is one file; a Parquet input is a file or a folder, its
  files found by pyarrow's dataset discovery (``name=value`` folders as columns;
  names starting with ``_`` or ``.`` are not read) exactly as for a local folder.
- Fingerprint: each file's ranges of `CHUNK_BYTES` are read from the store by
  threads of this process and combined into its content digest; files are named
  relative to the input's path (a file input: its base name), so the same bytes
  under the same names have the fingerprint of a local copy.
- Schema: every CSV header and Parquet footer is read and checked before the
  reservation (`check_csv_headers`, `check_parquet_footers`): no row is read.

Errors: pyarrow's messages quote bucket and key names and the store's answers, and
a URI can carry credentials, so none is shown. A failure before reading is a
one-line `SpecError` naming the input (its credentials removed), the kind of
failure and the fix (`dp_pipeline.release.sources.failures`), raised before
anything is reserved.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath
from urllib.parse import urlparse

import pyarrow as pa

from dp_pipeline.errors import ProblemListError
from dp_pipeline.release.sources.failures import failure_rule
from dp_pipeline.release.sources.fingerprint import (
    FileDigest,
    chunk_ranges,
    grouped_digests,
    range_digest,
)
from dp_pipeline.release.sources.schema import check_csv_headers, check_parquet_footers, csv_header
from dp_pipeline.release.sources.source import OpenedInput, shown_location
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError

__all__ = ["arrow_errors", "open_arrow_input"]

_SPARK_FIX = (
    'or read it with the spark engine (engine = "spark" under [run], or --engine spark), '
    "whose Hadoop file systems the session configures"
)


def _rule(error: BaseException, scheme: str) -> str:
    text = f"{type(error).__name__} {error}"
    if "libhdfs" in text or "libjvm" in text:
        return (
            f"pyarrow reads {scheme}:// through libhdfs and a JVM, which it cannot load here "
            f"(set JAVA_HOME, CLASSPATH and ARROW_LIBHDFS_DIR), {_SPARK_FIX}"
        )
    if "Unrecognized filesystem type" in text or "Unsupported" in text:
        return f"pyarrow has no file system for {scheme}://; give a URI it opens, {_SPARK_FIX}"
    known = failure_rule(text, scheme)
    if known is not None:
        return known
    return (
        "pyarrow could not list or read it (its message is not shown: it can quote "
        "credentials or the store's internal names); check the URI, its store's settings "
        "and credentials"
    )


@contextlib.contextmanager
def arrow_errors(location: str) -> Iterator[None]:
    """pyarrow's errors on ``location`` as one `SpecError` line (the module's rules)."""
    try:
        yield
    except ProblemListError:
        raise  # already one line naming the input and the rule (a spec's or a read's)
    except (OSError, pa.ArrowException, ValueError) as error:
        rule = _rule(error, urlparse(location).scheme)
        raise SpecError([rule], source=f"input {shown_location(location)!r}") from None


def _names(paths: Sequence[str], base: str, is_file: bool) -> list[str]:
    """Each file's name in the fingerprint: relative to the input's path (a file: its name)."""
    if is_file:
        return [posixpath.basename(path) for path in paths]
    top = base.rstrip("/")
    return [path[len(top) + 1 :] if path.startswith(top + "/") else path for path in paths]


def _list(filesystem, base: str, input_format: str, where: str) -> tuple[tuple[str, ...], bool]:
    """The files the pandas engine reads (sorted paths on ``filesystem``), and if base is a file."""
    import pyarrow.dataset as ds
    from pyarrow import fs as arrow_fs

    info = filesystem.get_file_info(base)
    if info.type == arrow_fs.FileType.NotFound:
        raise SpecError(
            [
                "no such file or folder on its file system; give the path of the input "
                "(input.path or --input)"
            ],
            source=f"input {where!r}",
        )
    if info.type == arrow_fs.FileType.File:
        return (base,), True
    if info.type != arrow_fs.FileType.Directory:
        # A device, FIFO or socket (pyarrow's Unknown): reading it could block or never end.
        raise SpecError(
            [
                "it is neither a regular file nor a folder (a device, a FIFO or a socket); "
                "give the path of the data file or folder (input.path or --input)"
            ],
            source=f"input {where!r}",
        )
    if input_format == "csv":
        raise SpecError(
            [
                "it is a folder; the pandas engine reads one CSV file (use the spark engine "
                "for a folder of CSV files)"
            ],
            source=f"input {where!r}",
        )
    dataset = ds.dataset(base, filesystem=filesystem, format="parquet", partitioning="hive")
    files = tuple(sorted(dataset.files))
    if not files:
        raise SpecError(
            ["it holds no data files; give a file or a folder of data files"],
            source=f"input {where!r}",
        )
    return files, False


def _range(filesystem, path: str, offset: int, length: int) -> bytes:
    with filesystem.open_input_file(path) as handle:
        return range_digest(handle, offset, length)


def _digests(
    filesystem, paths: Sequence[str], names: Sequence[str], where: str
) -> tuple[FileDigest, ...]:
    """Each file's `FileDigest`, its ranges read from the store by threads (bounded memory)."""
    from pyarrow import fs as arrow_fs

    infos = filesystem.get_file_info(list(paths))
    if any(info.type != arrow_fs.FileType.File for info in infos):
        raise SpecError(
            ["a listed file vanished; run again on an input that is not being written to"],
            source=f"input {where!r}",
        )
    sizes = [info.size for info in infos]
    tasks = [(i, o, n) for i, size in enumerate(sizes) for o, n in chunk_ranges(size)]
    workers = min(8, 2 * (os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(lambda t: _range(filesystem, paths[t[0]], t[1], t[2]), tasks))
    return grouped_digests(names, sizes, tasks, parts)


def open_arrow_input(spec: ReleaseSpec, location: str, input_format: str) -> OpenedInput:
    """The `OpenedInput` of a URI that ``pyarrow.fs`` opens, for the pandas engine.

    Lists the files, reads every CSV header or Parquet footer and checks them against
    the spec; reads no row. Raises a one-line `SpecError` (the input without its
    credentials, the failure's kind, the fix) when the store cannot be opened, reached
    or listed, refuses the credentials, or holds files that do not fit the spec.
    """
    from pyarrow import fs as arrow_fs

    where = shown_location(location)
    with arrow_errors(location):
        filesystem, base = arrow_fs.FileSystem.from_uri(location)
        paths, is_file = _list(filesystem, base, input_format, where)
        if input_format == "csv":
            header = csv_header(paths[0], filesystem)
            check_csv_headers(spec, [(f"{where}", header)])
        else:
            root = PurePosixPath(posixpath.dirname(base) if is_file else base)
            check_parquet_footers(spec, root, [PurePosixPath(p) for p in paths], filesystem)
        total = sum(info.size for info in filesystem.get_file_info(list(paths)))

    def lister() -> tuple[str, ...]:
        with arrow_errors(location):
            return _list(filesystem, base, input_format, where)[0]

    def hasher(listed: tuple[str, ...]) -> tuple[FileDigest, ...]:
        with arrow_errors(location):
            return _digests(filesystem, listed, _names(listed, base, is_file), where)

    return OpenedInput(
        PurePosixPath(base),  # the input's path on its store (``filesystem``), not a local one
        input_format,
        "pandas",
        (),
        location=location,
        uris=paths,
        lister=lister,
        hasher=hasher,
        total_bytes=total,
        filesystem=filesystem,
        base_is_file=is_file,
    )
