"""A Spark session started without the JVM's and Spark's start-up lines on the terminal.

A JVM writes to the standard error it inherits when it is launched: its own
warnings (incubator modules), then log4j's (default profile, loopback hostname,
native-hadoop). `jvm_output_to_file` points the process's file descriptor 2 at a
log file while the JVM is launched, so the JVM (and every Python worker it
starts) keeps writing there, and restores it for this process. Errors still reach
the caller: a failed Spark job raises in Python with the Java error attached.

The log file is the release's to clean up (`discard_log`): it is deleted when the
session stops after a run that went well, and kept, and named, after an error.
Kept logs are in one place, `log_folder` (``dp_pipeline-spark-logs-<uid>`` in the
temporary folder, owner-only), which holds the newest `KEPT_LOGS` of them: older
ones are removed when a new session starts, so failed runs never pile logs up.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["KEPT_LOGS", "discard_log", "jvm_output_to_file", "log_folder"]

KEPT_LOGS = 20  # the newest logs kept in `log_folder`, that of a session starting included
_LOG_PREFIX = "dp_pipeline-spark-"


def log_folder() -> Path | None:
    """The folder JVM logs are written to: ``<temp>/dp_pipeline-spark-logs-<uid>`` (0700).

    None when it cannot be made, or is not this user's private folder (a link, or
    another user's made first in a shared temporary folder): logs then go to the
    temporary folder itself, as one file each.
    """
    folder = Path(tempfile.gettempdir()) / f"{_LOG_PREFIX}logs-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError:
        return None
    private = info.st_uid == os.getuid() and not info.st_mode & 0o077
    return folder if stat.S_ISDIR(info.st_mode) and private else None


def _prune(folder: Path, keep: int) -> None:
    """Remove all but the newest ``keep`` logs of ``folder`` (oldest first)."""
    logs = []
    for path in folder.glob(f"{_LOG_PREFIX}*.log"):
        with contextlib.suppress(FileNotFoundError):  # another run removed it meanwhile
            logs.append((path.stat().st_mtime_ns, path.name, path))
    for *_, path in sorted(logs)[: max(0, len(logs) - keep)]:
        discard_log(str(path))


@contextlib.contextmanager
def jvm_output_to_file() -> Iterator[str]:
    """Within the block, standard error (fd 2) is a fresh log file, whose path is yielded.

    Processes started in the block (the JVM of a new SparkSession) keep that file as
    their standard error; this process gets its own back when the block ends.
    """
    folder = log_folder()
    if folder is not None:
        _prune(folder, KEPT_LOGS - 1)  # room for this one
    handle, path = tempfile.mkstemp(prefix=_LOG_PREFIX, suffix=".log", dir=folder)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(handle, 2)
        yield path
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(handle)


def discard_log(path: str | None) -> None:
    """Delete a log file of `jvm_output_to_file` (nothing to do for None or a missing file).

    A JVM still running keeps writing to the open file after it is unlinked; the
    folder no longer lists it.
    """
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
