"""A Spark input's files: listed by Spark, hashed on the executors, errors named before reading.

Listing (`dp_pipeline.release.sources.spark_listing`):
the DataFrame's own ``inputFiles()`` over the input (a path or URI on any Hadoop file
system the session is configured for, or a catalog table), read with a placeholder
schema, so no data file is opened.

Hashing (`executor_digests`): each file's ranges of `CHUNK_BYTES` are hashed on
the executors, in parallel, and only their SHA-256s come back to the driver,
which combines them into each file's content digest
(`dp_pipeline.release.sources.fingerprint.content_digest`) and HMACs the list under
the key; no key leaves the driver, and outside local mode (whose executors are the
driver's own threads and cores) the driver never reads the input.

- Files on the local file system (``file:``, what Spark's local file system reads
  with the operating system's own calls): the ranges are dealt round-robin to as
  many tasks as the session runs at once, each range read in 1 MiB blocks
  (`range_reader`), so memory stays bounded whatever the file size.
  The tasks are a ``spark.range`` with ``mapInArrow``: no RDD or SparkContext, so
  the same code runs on a Spark Connect session.
  The function shipped to the workers imports nothing of dp_pipeline there
  (`range_reader`), so a task starts without the package's import. On a classic
  session a local input of at most `DRIVER_BYTES` (in local mode `LOCAL_MODE_FACTOR`
  times that: the executors are then the driver's own cores) is hashed by the
  driver's threads instead: a Spark job costs more than hashing one range. A Spark
  Connect client never hashes: the path it would open need not be the server's file.
- Files on any other file system, on a classic session in local mode (whose executors
  are the driver JVM's own threads): those threads stream each range through the
  session's Hadoop file system (the one the release reads through) into Java's
  ``MessageDigest``, as many threads as the master runs tasks (`_stream_digests`): no
  Spark job, no byte in Python, and no file held in the heap.
- Files on any other file system otherwise: Spark's ``binaryFile`` reader opens them through
  the session's Hadoop file system (the one the release reads through) and Spark's
  ``sha2`` hashes each range of the content in the JVM: only the digests leave the
  executors, no byte goes to a Python worker. That reader holds a whole file in a
  JVM's heap and takes at most `BINARY_FILE_BYTES` per file: the files are hashed
  in groups one heap holds, and a file too large for the heap or that reader is
  refused before the reservation, naming the file and the fix
  (`dp_pipeline.release.sources.binary_memory`). An empty file (no row in that reader, listed by
  its file index) is fingerprinted by its name and size.

Listing (`spark_listing.listed_input`): a Parquet input outside the local file system is read once,
``spark.read.parquet``: its file index is the list fingerprinted and the DataFrame the
tables read, its schema the one checked (one listing and one schema inference).

Sizes (`file_sizes`): on a classic session the listing's own file index gives each
file's size (`index_sizes`: the driver's listing, no Spark job); otherwise, and when
that index does not list exactly the files, a ``binaryFile`` metadata job does.

Errors (`listing_errors`): Spark's and Hadoop's messages can quote credentials
(a URI's user info, a signed request) and internal addresses, so none is shown.
The failure is classified (no such path or table, no file system for the scheme,
unreachable store, refused credentials) into one line naming the source and the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql import functions as sf

from dp_pipeline.engines.spark.session.kinds import is_connect
from dp_pipeline.release.sources import fingerprint
from dp_pipeline.release.sources.binary_memory import (
    BINARY_FILE_BYTES,
    file_groups,
    hashing_budget,
    heap_setting,
    memory_bytes,
    task_slots,
    too_large_problem,
)
from dp_pipeline.release.sources.failures import error_text
from dp_pipeline.release.sources.fingerprint import (
    CHUNK_BYTES,
    FileDigest,
    FileRangeError,
    chunk_ranges,
    content_digest,
    local_digests,
    local_path,
    range_reader,
)
from dp_pipeline.release.sources.source import shown_location
from dp_pipeline.release.sources.spark_listing import (
    JAVA_CAUSES,
    PY4J_ERRORS,
    SPARK_ERRORS,
    listing_errors,
)
from dp_pipeline.release.spec.model import SpecError

# What reading a DataFrame's file index through the JVM can raise (`index_sizes`).
_INDEX_ERRORS: tuple[type[BaseException], ...] = (AttributeError, *SPARK_ERRORS, *PY4J_ERRORS)

__all__ = [
    "BINARY_FILE_BYTES",
    "DRIVER_BYTES",
    "MAX_HASH_TASKS",
    "executor_digests",
    "file_sizes",
    "index_sizes",
]

# Spark's binaryFile reader refuses a file longer than Integer.MAX_VALUE bytes.
# Local inputs of at most one range are hashed by the driver: a Spark job costs about
# 0.3 s (an empty four-task job on local[2]), one thread hashes 64 MiB in 0.05 s.
DRIVER_BYTES = CHUNK_BYTES
# In local mode the executors are the driver's own machine and cores, so the driver's
# threads hash as many bytes in parallel as the tasks would, without the job's round
# trip: up to this many times `DRIVER_BYTES` (a 10 M-person census file, 0.12 GiB, in
# about 0.1 s against 0.3-0.5 s for the job).
LOCAL_MODE_FACTOR = 4
# Hashing tasks of one job when the session does not say its parallelism. A task costs
# a scheduling round trip (about 0.5 s on a loaded two-core machine), so the ranges are
# dealt round-robin to as many tasks as the session runs at once (its default
# parallelism), not one task per range.
MAX_HASH_TASKS = 64


def _hash_tasks(spark) -> int:
    try:
        parallelism = int(spark.conf.get("spark.default.parallelism", "0") or 0)
    except (ValueError, *SPARK_ERRORS):
        parallelism = 0
    return parallelism if parallelism > 0 else MAX_HASH_TASKS


def index_sizes(spark: Any, index: Any, uris: Sequence[str]) -> dict[str, int] | None:
    """Each of ``uris``' size in bytes as the file index of the DataFrame ``index`` listed it.

    The driver's listing already holds each file's status, so no Spark job runs and no
    file is opened. None when it cannot be read so (a Spark Connect session, whose
    client has no JVM; a DataFrame that is not a scan of files) or does not list
    exactly ``uris``.
    """
    if index is None or is_connect(spark):
        return None
    sizes: dict[str, int] = {}
    try:
        statuses = index._jdf.queryExecution().analyzed().relation().location().allFiles()
        found = statuses.iterator()
        while found.hasNext():
            status = found.next()
            sizes[str(status.getPath().toString())] = int(status.getLen())
    except _INDEX_ERRORS:
        return None
    if set(sizes) != set(uris):
        return None
    return {uri: sizes[uri] for uri in uris}


def file_sizes(spark, uris: Sequence[str], source: str, index=None) -> dict[str, int]:
    """Each listed file's size in bytes (local files: stat; others: the file index of
    the DataFrame ``index`` that listed them (`index_sizes`), else binaryFile's metadata).

    Only metadata: binaryFile opens no file when its content column is not selected.
    Raises `SpecError` before anything is hashed for a file the hashing cannot hold.
    """
    local = [local_path(uri) for uri in uris]
    if all(path is not None for path in local):
        try:
            return {uri: path.stat().st_size for uri, path in zip(uris, local, strict=True)}
        except OSError:
            raise SpecError(
                [
                    "a listed file vanished or cannot be read; run again on an input that is "
                    "not being written to, and check the files' permissions"
                ],
                source=source,
            ) from None
    indexed = index_sizes(spark, index, uris)
    if indexed is not None:
        return _holdable(spark, uris, indexed, source)
    with listing_errors(source, urlparse(uris[0]).scheme):
        files = spark.read.format("binaryFile").load(list(uris))
        sizes = {
            row["path"]: int(row["length"]) for row in files.select("path", "length").collect()
        }
        # Spark's scans skip empty files (no rows, no bytes read), binaryFile's too; its
        # file index still lists them, so a listed file without a row is empty (only when
        # the rows name files as the list does: never a file taken as empty by its name).
        named_alike = set(sizes) <= set(uris)
        listed = set(files.inputFiles()) if named_alike and len(sizes) < len(uris) else set()
    sizes.update((uri, 0) for uri in uris if uri not in sizes and uri in listed)
    missing = [uri for uri in uris if uri not in sizes]
    if missing:
        raise SpecError(
            [
                f"{len(missing)} file(s) that Spark reads are missing from its binaryFile "
                "listing (an empty file, or a name starting with '_' or '.'), so they cannot "
                "be fingerprinted; remove the empty files, rename the others"
            ],
            source=source,
        )
    return _holdable(spark, uris, sizes, source)


def _holdable(
    spark: Any, uris: Sequence[str], sizes: dict[str, int], source: str
) -> dict[str, int]:
    # Refused before the reservation: a file binaryFile cannot hold, or not in this heap.
    shown = [(shown_location(uri), uri, sizes[uri]) for uri in uris]
    problem = too_large_problem(shown, *_task_heap(spark))
    if problem is not None:
        raise SpecError([problem], source=source)
    return {uri: sizes[uri] for uri in uris}


def _task_slots(spark) -> int | None:
    """How many hashing tasks one JVM runs at once (`task_slots`; None: not known)."""
    try:
        conf = spark.conf
        master = conf.get("spark.master", "") or ""
        return task_slots(
            master, conf.get("spark.executor.cores", None), conf.get("spark.task.cpus", None)
        )
    except SPARK_ERRORS:
        return None


def _task_heap(spark) -> tuple[str, int | None]:
    """The setting sizing the heap hashing tasks run in (`heap_setting`) and its bytes
    (None: not known, e.g. a server that does not say)."""
    try:
        setting = heap_setting(spark.conf.get("spark.master", "") or "")
        return setting, memory_bytes(spark.conf.get(setting, "1g") or "1g")
    except SPARK_ERRORS:
        return "spark.driver.memory", None


def _local_range_hasher(tasks: list[tuple[str, int, int]], groups: int):
    """The mapInArrow function hashing, for each id ``g``, the ranges ``tasks[g::groups]``.

    A closure over `range_reader`'s closure, pyarrow and the task list only: its
    worker imports no dp_pipeline module. A range that could not be read (the
    file vanished or shrank) comes back as null.
    """
    read = range_reader()

    def hash_ranges(batches):
        for batch in batches:
            indices, found = [], []
            for group in batch.column(0).to_pylist():
                for index in range(group, len(tasks), groups):
                    indices.append(index)
                    found.append(read(*tasks[index]))
            yield pa.RecordBatch.from_arrays(
                [pa.array(indices, pa.int64()), pa.array(found, pa.binary())], ["id", "sha256"]
            )

    return hash_ranges


def _driver_bytes(spark) -> int:
    """The most bytes of local files the driver hashes itself (more: the executors)."""
    if is_connect(spark):
        # The client is not where the server reads: a path it opens may be another file.
        return 0
    master = spark.sparkContext.master
    local_mode = master == "local" or master.startswith("local[")
    return DRIVER_BYTES * (LOCAL_MODE_FACTOR if local_mode else 1)


def executor_digests(
    spark,
    uris: Sequence[str],
    names: Sequence[str],
    sizes: dict[str, int] | None,
    source: str,
    index=None,
) -> tuple[FileDigest, ...]:
    """Each file's `FileDigest`, its bytes hashed on the executors (see the module doc).

    ``sizes`` None: the files' sizes now (`file_sizes`, from the file index of the
    DataFrame ``index`` that listed them when it can; it refuses a file the hashing
    cannot hold before anything is hashed). The digest binds each file's whole
    content as read, whatever size was listed.
    """
    local = [local_path(uri) for uri in uris]
    sizes = file_sizes(spark, uris, source, index) if sizes is None else sizes
    digests: dict[str, str] = {}
    if all(path is not None for path in local) and sum(sizes.values()) <= _driver_bytes(spark):
        with contextlib.suppress(FileRangeError, OSError):  # vanished or shrank: below
            found = local_digests([str(path) for path in local], names)
            digests = {uri: digest.sha256 for uri, digest in zip(uris, found, strict=True)}
    else:
        with listing_errors(source, urlparse(uris[0]).scheme, spark):
            if all(path is not None for path in local):
                digests = _local_digests(spark, uris, sizes)
            elif _streams_in_driver(spark):
                digests = _stream_digests(spark, uris, sizes)
            else:
                # An empty file has no bytes to read (and no row in binaryFile's scan).
                empty = content_digest(0, [hashlib.sha256(b"").digest()])
                read = [uri for uri in uris if sizes[uri] > 0]
                digests = _binary_file_digests(spark, read, sizes) if read else {}
                digests.update((uri, empty) for uri in uris if sizes[uri] == 0)
    if any(uri not in digests for uri in uris):
        raise SpecError(
            [
                "a listed file could not be hashed (it vanished); run again on an input that "
                "is not being written to"
            ],
            source=source,
        )
    return tuple(
        FileDigest(name, sizes[uri], digests[uri]) for uri, name in zip(uris, names, strict=True)
    )


def _local_digests(spark, uris: Sequence[str], sizes: dict[str, int]) -> dict[str, str]:
    tasks = [
        (str(local_path(uri)), offset, length)
        for uri in uris
        for offset, length in chunk_ranges(sizes[uri])
    ]
    groups = min(len(tasks), _hash_tasks(spark))
    jobs = spark.range(0, groups, 1, groups)
    rows = jobs.mapInArrow(_local_range_hasher(tasks, groups), "id long, sha256 binary").toArrow()
    found = dict(zip(rows.column("id").to_pylist(), rows.column("sha256").to_pylist(), strict=True))
    digests, first = {}, 0
    for uri in uris:
        count = len(chunk_ranges(sizes[uri]))
        parts = [found.get(index) for index in range(first, first + count)]
        first += count
        if None not in parts:
            digests[uri] = content_digest(sizes[uri], parts)
    return digests


def _binary_file_digests(spark, uris: Sequence[str], sizes: dict[str, int]) -> dict[str, str]:
    # One job per group of files one heap holds at once (`file_groups`: binaryFile holds
    # whole files, one per task), however many tasks the session runs at once.
    _, heap = _task_heap(spark)
    listed = [(uri, sizes[uri]) for uri in uris]
    slots = _task_slots(spark)
    groups = [list(uris)] if heap is None else file_groups(listed, hashing_budget(heap), slots)
    digests: dict[str, str] = {}
    for group in groups:
        digests.update(_binary_group_digests(spark, group))
    return digests


def _binary_group_digests(spark, uris: Sequence[str]) -> dict[str, str]:
    # Hashed in the JVM by Spark's own sha2 over each range of the content binaryFile
    # read: only the digests leave the executors (no file's bytes go through Arrow
    # to a Python worker, and no Python worker is needed).
    chunk = fingerprint.CHUNK_BYTES
    ranges = (
        f"transform(sequence(0, greatest(cast(ceil(size / {chunk}) AS INT) - 1, 0)), "
        f"i -> sha2(substring(content, i * {chunk} + 1, {chunk}), 256))"
    )
    frame = spark.read.format("binaryFile").load(list(uris))
    frame = frame.select("path", "content", sf.length("content").alias("size"))
    rows = frame.select("path", "size", sf.expr(ranges).alias("ranges")).collect()
    return {
        row["path"]: content_digest(row["size"], [bytes.fromhex(part) for part in row["ranges"]])
        for row in rows
    }


def _streams_in_driver(spark) -> bool:
    """Whether files off the local file system are hashed by the driver JVM's threads
    (`_stream_digests`): a classic session in local mode, whose executors are those
    threads; not a Spark Connect client (no JVM), not a cluster's executors."""
    if is_connect(spark):
        return False
    master = spark.sparkContext.master
    return master == "local" or master.startswith("local[")


# A file that vanished or shrank after it was sized, as Hadoop's streams say it.
_CHANGED_FILE = re.compile(r"FileNotFoundException|EOFException")


def _stream_digests(spark, uris: Sequence[str], sizes: dict[str, int]) -> dict[str, str]:
    """Each file's content digest, its ranges streamed through the session's Hadoop file
    system in the driver JVM and hashed there by ``MessageDigest``, one range per thread
    (as many threads as the local master runs tasks).

    Only the ranges' SHA-256s come to Python (no byte of the files); each range is read
    through a 1 KiB buffer (commons-codec's ``DigestUtils``), so the JVM holds no file and
    no range: no heap the size of the files, as `_binary_file_digests`'s whole-file rows
    need. A file that ends before its listed size or goes on after it is left out (the
    caller names it).
    """
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    tasks = [(uri, offset, length) for uri in uris for offset, length in chunk_ranges(sizes[uri])]

    def hash_range(task: tuple[str, int, int]) -> bytes | None:
        uri, offset, length = task
        try:
            return read_range(uri, offset, length)
        except SPARK_ERRORS as error:
            if _CHANGED_FILE.search(error_text(error, JAVA_CAUSES)):
                return None  # vanished or shrank since it was sized
            raise

    def read_range(uri: str, offset: int, length: int) -> bytes | None:
        path = jvm.org.apache.hadoop.fs.Path(uri)
        stream = path.getFileSystem(conf).open(path)
        try:
            if offset:
                stream.seek(offset)
            digest = jvm.java.security.MessageDigest.getInstance("SHA-256")
            bounded = jvm.org.apache.commons.io.input.BoundedInputStream(stream, length)
            jvm.org.apache.commons.codec.digest.DigestUtils.updateDigest(digest, bounded)
            if bounded.getCount() != length:
                return None  # shrank since it was sized
            if offset + length == sizes[uri] and stream.read() != -1:
                return None  # grew since it was sized
            return bytes(digest.digest())
        finally:
            stream.close()

    threads = max(1, min(len(tasks), _task_slots(spark) or 1))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        parts = list(pool.map(hash_range, tasks))
    digests, first = {}, 0
    for uri in uris:
        count = len(chunk_ranges(sizes[uri]))
        found = parts[first : first + count]
        first += count
        if None not in found:
            digests[uri] = content_digest(sizes[uri], [part for part in found if part is not None])
    return digests
