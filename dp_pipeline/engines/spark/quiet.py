"""A Spark session started without the JVM's and Spark's start-up lines on the terminal.

A JVM writes to the standard error it inherits when it is launched: its own
warnings (incubator modules), then log4j's (default profile, loopback hostname,
native-hadoop). `jvm_output_to_file` points the process's file descriptor 2 at a
log file while the JVM is launched, so the JVM (and every Python worker it
starts) keeps writing there, and restores it for this process. Errors still reach
the caller: a failed Spark job raises in Python with the Java error attached.

The log file is the release's to clean up (`discard_log`): it is deleted when the
session stops after a run that went well, and kept, and named, after an error.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["discard_log", "jvm_output_to_file"]


@contextlib.contextmanager
def jvm_output_to_file() -> Iterator[str]:
    """Within the block, standard error (fd 2) is a fresh log file, whose path is yielded.

    Processes started in the block (the JVM of a new SparkSession) keep that file as
    their standard error; this process gets its own back when the block ends.
    """
    handle, path = tempfile.mkstemp(prefix="dp_pipeline-spark-", suffix=".log")
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
