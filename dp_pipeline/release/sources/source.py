"""An input as one engine will read it: its location, format and the files the engine listed.

The release fingerprints exactly these files before any data is read
(`dp_pipeline.release.sources.fingerprint`: each engine hashes them where the bytes
are, `OpenedInput.digests`) and, at the end of the run, lists them again and hashes
them again: a change in between publishes nothing (`InputChangedError`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

from dp_pipeline.engines.spark.session.failures import session_failure, stop_session
from dp_pipeline.engines.spark.session.quiet import discard_log
from dp_pipeline.errors import EngineStoppedError, InputChangedError, InputReadError
from dp_pipeline.release.input_kinds import special_inputs_problem
from dp_pipeline.release.sources.fingerprint import (
    FileDigest,
    content_fingerprint,
    digests_fingerprint,
    file_name,
    input_files,
    local_digests,
)
from dp_pipeline.release.spec.model import SpecError

__all__ = [
    "EngineStoppedError",
    "InputChangedError",
    "InputReadError",
    "OpenedInput",
    "check_hadoop_kinds",
    "check_listed_kinds",
    "kept_log",
    "shown_location",
]


def shown_location(location: str) -> str:
    """``location`` as messages may show it: a URI's user info and query removed.

    Both can carry credentials (``s3a://key:secret@bucket/x``; pyarrow's
    ``?access_key=…&secret_key=…``, a shared-access signature's ``?sig=…``), so
    neither is ever shown; a local path is shown as written.
    """
    if "://" not in location:
        return location
    parsed = urlparse(location)
    if parsed.netloc and "@" in parsed.netloc:
        parsed = parsed._replace(netloc="<credentials>@" + parsed.netloc.rsplit("@", 1)[1])
    if parsed.query or parsed.params or parsed.fragment:
        parsed = parsed._replace(query="<query>" if parsed.query else "", params="", fragment="")
    return urlunparse(parsed)


@dataclass
class OpenedInput:
    """An input as one engine will read it: the location, its format, and the files listed.

    ``path`` is the input as a local path (pandas, and a local Spark input);
    ``location`` the input as written (a path or a URI; None: ``str(path)``) and
    ``table`` a catalog table the Spark engine reads instead. ``files`` are the
    listed files when they are local (empty otherwise); ``uris`` the engine's own
    list as it names the files (None: ``files``). ``lister`` lists them again
    and ``hasher`` returns the `FileDigest` of the given list (the engine's way:
    pandas threads, Spark executors); None: the local ones. ``header`` is framed
    first in the fingerprint (a table's name and schema). ``spark`` is the session
    of the Spark engine (``own_session``: started here, stopped by `close`); None
    for pandas.
    """

    path: Path
    format: str
    engine: str
    files: tuple[Path, ...]
    spark: Any = None
    own_session: bool = False
    jvm_log: str | None = None  # the session's JVM log file (not --verbose)
    location: str | None = None
    table: str | None = None
    uris: tuple[str, ...] | None = None
    lister: Callable[[], tuple[str, ...]] | None = None
    hasher: Callable[[tuple[str, ...]], tuple[FileDigest, ...]] | None = None
    header: bytes = b""
    # The listed files' sizes (Spark: which aggregation path); for files off the local
    # disk known once they are fingerprinted (they are sized when they are hashed).
    total_bytes: int = 0
    # The DataFrame the Spark engine reads, when the listing read it (a Parquet input off
    # the local disk: its file index is the list fingerprinted); None: read by location.
    frame: Any = None
    csv_header: list[str] | None = None  # a CSV input outside the local file system
    # The pandas engine's input on a pyarrow file system: ``uris`` are paths on it, and
    # ``path`` the input's path there (a file when ``base_is_file``).
    filesystem: Any = None
    base_is_file: bool = False
    # Undoes the session settings a run set on a running session (see `close`).
    restore: Callable[[], None] | None = None
    # The session stopped under the run (`stopped`): closing it asks nothing of it.
    unreachable: bool = False

    @property
    def where(self) -> str:
        """The input as messages name it: the table, or the location as written."""
        if self.table:
            return f"table {self.table}"
        return shown_location(self.location or str(self.path))

    def listed(self) -> tuple[str, ...]:
        """The engine's list of files as fingerprinted (URIs or local paths)."""
        if self.uris is not None:
            return self.uris
        return tuple(str(file) for file in self.files)

    def list_files(self) -> tuple[str, ...]:
        """The engine's file list now (compared with `listed` by the mid-run check)."""
        if self.lister is not None:
            return self.lister()
        return tuple(str(file) for file in input_files(self.path, self.format))

    def digests(self) -> tuple[FileDigest, ...]:
        """The `FileDigest` of every listed file, hashed by the engine where the bytes are."""
        listed = self.listed()
        if self.hasher is not None:
            return self.hasher(listed)
        root = self.location or str(self.path)
        return local_digests([Path(f) for f in listed], [file_name(f, root) for f in listed])

    def fingerprint(self, master) -> str:
        """The keyed fingerprint of the listed files' bytes (`digests_fingerprint`)."""
        return digests_fingerprint(master, self.digests(), self.header)

    def fingerprints(self, master) -> tuple[str, str]:
        """The keyed fingerprint and the keyed content digest, names excluded
        (`content_fingerprint`), from one hashing of the files."""
        digests = self.digests()
        return (
            digests_fingerprint(master, digests, self.header),
            content_fingerprint(master, digests),
        )

    def check_unchanged(self, files: tuple[str, ...], release_id: str) -> None:
        if tuple(files) != self.listed():
            raise InputChangedError(
                f"input {self.where!r} changed while release {release_id!r} was running "
                f"(the engine's list of files differs from the one fingerprinted before "
                f"reading); nothing was published; run again on an input that is not being "
                f"written to"
            )

    def stopped(self, error: BaseException, reserved: bool) -> EngineStoppedError | None:
        """The `EngineStoppedError` to raise for ``error`` when the Spark session stopped
        under it (`session_failure`: its JVM exited or was lost), else None.

        ``reserved``: the ledger holds the release's reservation (it stays spent).
        """
        failure = session_failure(self.spark, error)
        if failure is None:
            return None
        self.unreachable = True
        after = (
            "the budget stays reserved and the same release id resumes the run with the "
            "same noise, no new spend"
            if reserved
            else "nothing was reserved"
        )
        return EngineStoppedError(
            f"the Spark engine stopped while the release ran: {failure.what}; {failure.fix}; "
            f"then run the same command again: {after}"
        )

    def close(self, failed: bool = False) -> str | None:
        """Stop a session started here; delete its JVM log unless ``failed`` (returned then).

        A session whose JVM is gone is forgotten (`stop_session`), not an error here.
        """
        if self.restore is not None:
            restore, self.restore = self.restore, None
            if not self.unreachable and session_failure(self.spark, RuntimeError()) is None:
                restore()  # settings of a session that no longer runs need no restoring
        if self.own_session and self.spark is not None:
            spark, self.spark = self.spark, None
            stop_session(spark, unreachable=self.unreachable)
        if failed:
            return self.jvm_log
        if self.jvm_log is not None:
            discard_log(self.jvm_log)
            self.jvm_log = None
        return None


def check_listed_kinds(
    key_file: str | None, source: OpenedInput, ledger_file: str | None = None
) -> None:
    """Refuse, before the reservation, an input whose listed local files are not all
    regular data files (`dp_pipeline.release.input_kinds`: a folder holding a FIFO, a
    device, or a link to the master key, a file of the dp_pipeline home or of /proc).

    ``key_file``: the run's master key file. Only the files' metadata is looked at.
    Raises `SpecError` naming the input, the file and the rule.
    """
    problem = special_inputs_problem(source.files, key_file, ledger_file)
    if problem is not None:
        raise SpecError([problem], source=f"input {source.where!r}")


def check_hadoop_kinds(
    key_file: str | None, source: OpenedInput, ledger_file: str | None = None
) -> None:
    """Refuse an input whose files on a Hadoop file system (listed by the Spark engine,
    before any is read) are symbolic links, no files, or map onto a local file that is
    no input (`dp_pipeline.release.sources.hadoop_kinds`). Raises `SpecError` naming the
    input, the file and the rule; a status Hadoop cannot give is one line too."""
    if source.spark is None or not source.uris:
        return
    from dp_pipeline.release.sources.hadoop_kinds import hadoop_kinds_problem
    from dp_pipeline.release.sources.spark_listing import listing_errors

    where = f"input {source.where!r}"
    location = source.location or str(source.path)
    with listing_errors(where, urlparse(location).scheme, source.spark):
        found = hadoop_kinds_problem(source.spark, source.uris, key_file, ledger_file)
    if found is not None:
        raise SpecError([f"its file {shown_location(found[0])!r}: {found[1]}"], source=where)


def kept_log(error: BaseException, log: str | None) -> None:
    """Name the JVM log kept after ``error`` in the error's message (CLI and tracebacks)."""
    if log is not None:
        error.add_note(f"the JVM's and Spark's own log lines of this run are kept in {log}")
