"""The ``dp-release`` process ends with its documented exit code, whatever teardown does.

A command's outcome is decided, printed and recorded before it returns its code
(`dp_pipeline.release.outcome`). What an interpreter does after that, while it tears
itself down, is not the command's: native libraries can abort it there (PyArrow's
thread pools still running when the C++ runtime's destructors run, apache/arrow#34314:
SIGABRT, "terminate called without an active exception"), and the process would exit
134 instead of the code a scheduler acts on. `end_process` does what the teardown
must do for a run, explicitly, then ends the process at once with the code:

- **Spark**: a session still active in this process is stopped (a run stops the
  session it started itself; this covers one left by a failure before that), so a
  Spark Connect client releases its server session and a classic JVM is asked to
  stop; a JVM gateway child also ends when this process's pipes close.
- **Logs and output**: every logging handler is flushed and closed
  (`logging.shutdown`), then stdout and stderr are flushed; the JSON result line and
  the error line were printed before.
- **Nothing else is pending**: the run's lease, its ledger connections, its JVM log
  file and temporary folders are released or removed by the run itself (context
  managers) before its code is returned; what is left to the operating system at
  exit (open files, a server connection's socket, a lease's lock file descriptor)
  is released by it alike, and a PostgreSQL server ends a closed connection's
  advisory locks.

Then `os._exit`: no further Python or native teardown runs, so none can change the code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

__all__ = ["end_process", "exit_status", "stop_spark_sessions"]


def stop_spark_sessions() -> None:
    """Stop the active Spark session of this process (classic or Spark Connect), if PySpark
    was imported at all; a session that fails to stop is left to the operating system."""
    if "pyspark" not in sys.modules:
        return  # no Spark in this process: nothing to import or stop
    kinds = ["pyspark.sql.session"]
    if "pyspark.sql.connect.session" in sys.modules:
        kinds.append("pyspark.sql.connect.session")
    for module in kinds:
        try:
            session = sys.modules[module].SparkSession.getActiveSession()
            if session is not None:
                session.stop()
        except Exception:  # a JVM or server already gone: nothing left to stop
            continue


def _flush(stream) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # closed, or reader gone
        stream.flush()


def exit_status(value: object) -> int:
    """The status Python gives ``SystemExit(value)``: None 0, an int itself, anything else
    printed on stderr and 1."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def end_process(code: int) -> NoReturn:
    """End this process with exit status ``code`` after the teardown a run needs
    (see the module docstring): Spark stopped, logs and standard streams flushed."""
    stop_spark_sessions()
    logging.shutdown()
    _flush(sys.stdout)
    _flush(sys.stderr)
    os._exit(code)
