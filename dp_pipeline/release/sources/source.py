"""An input as one engine will read it: its path, format and the files the engine listed.

The release fingerprints exactly these files before any data is read
(`dp_pipeline.release.sources.fingerprint`) and lists them again at the end of the run:
a change in between publishes nothing (`InputChangedError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dp_pipeline.engines.spark.quiet import discard_log
from dp_pipeline.errors import DPError
from dp_pipeline.release.sources.fingerprint import input_files, spark_input_files
from dp_pipeline.release.spec.model import SpecError

__all__ = ["InputChangedError", "InputReadError", "OpenedInput", "kept_log"]


class InputChangedError(DPError, RuntimeError):
    """The input's files or bytes changed between the start and the end of a run."""


class InputReadError(SpecError):
    """A reader or engine failed on the input's contents: the file and the rule, nothing more.

    The readers' own errors quote the data (a ragged CSV row's whole record, the value
    a cast refused, line numbers); they are replaced by this one-line message and
    raised ``from None``, so neither the message nor the traceback the command line
    prints carries any of it. Raised after the reservation, the run stays charged.
    """

    def __init__(self, path, rule: str) -> None:
        super().__init__(
            [
                f"{rule}; the reader's own message is not shown because it can quote the "
                f"data; check the file with a tool the data's owner may use"
            ],
            source=f"input {str(path)!r}",
        )


@dataclass
class OpenedInput:
    """An input as one engine will read it: the path, its format, and the files listed.

    ``spark`` is the session of the Spark engine (``own_session``: started here,
    stopped by `close`); None for pandas.
    """

    path: Path
    format: str
    engine: str
    files: tuple[Path, ...]
    spark: Any = None
    own_session: bool = False
    jvm_log: str | None = None  # the session's JVM log file (not --verbose)

    def list_files(self) -> tuple[Path, ...]:
        """The engine's file list now (compared with `files` by the mid-run check)."""
        if self.engine == "spark":
            return spark_input_files(self.spark, self.path, self.format)
        return input_files(self.path, self.format)

    def check_unchanged(self, files: tuple[Path, ...], release_id: str) -> None:
        if files != self.files:
            raise InputChangedError(
                f"input {str(self.path)!r} changed while release {release_id!r} was running "
                f"(the engine's list of files differs from the one fingerprinted before "
                f"reading); nothing was published; run again on an input that is not being "
                f"written to"
            )

    def close(self, failed: bool = False) -> str | None:
        """Stop a session started here; delete its JVM log unless ``failed`` (returned then)."""
        if self.own_session and self.spark is not None:
            self.spark.stop()
            self.spark = None
        if failed:
            return self.jvm_log
        if self.jvm_log is not None:
            discard_log(self.jvm_log)
            self.jvm_log = None
        return None


def kept_log(error: BaseException, log: str | None) -> None:
    """Name the JVM log kept after ``error`` in the error's message (CLI and tracebacks)."""
    if log is not None:
        error.add_note(f"the JVM's and Spark's own log lines of this run are kept in {log}")
