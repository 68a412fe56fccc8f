"""A classic Spark session that stopped under a run: what happened, named without its messages.

A classic session's JVM is a process of its own (PySpark launches it as a child
of the driver's Python process and talks to it through py4j). It can die under
a run: Spark's handler exits it with status 52 (`SPARK_OOM_EXIT`) when a task of
a local session throws ``java.lang.OutOfMemoryError``; the system's
out-of-memory killer or an operator kills it with a signal. The driver then sees
a py4j connection error from whatever call came next, and its traceback names
py4j's internals, not what happened.

A Spark Connect server can stop too (or its network): the client retries, then
raises an error carrying the gRPC status ``UNAVAILABLE`` and the server's or the
channel's text; `connect_server_lost` reads the status only.

`session_failure` says what happened, from facts that do not depend on the data:
the JVM process's exit status (when this process launched it), the classes of
the errors (a lost py4j connection; ``java.lang.OutOfMemoryError`` in the chain
of a Java exception's causes) and whether the SparkContext was stopped; never an
error's message. `stop_session` stops a session whose JVM may be gone, and lets
the next session of this process start a JVM of its own.

PySpark is not imported here (py4j only, when installed): `release.sources.source`
closes every engine's input through it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
from collections.abc import Iterator

from dp_pipeline.errors import DPError

try:
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
except ImportError:  # pragma: no cover - without PySpark there is no session to fail

    class Py4JError(DPError):  # type: ignore[no-redef]
        """Stands for py4j's errors where py4j is not installed (never raised, so no
        ``except`` clause naming it catches anything)."""

    Py4JJavaError = Py4JNetworkError = Py4JError  # type: ignore[misc]

__all__ = [
    "JVM_EXIT_SECONDS",
    "SPARK_OOM_EXIT",
    "SessionFailure",
    "connect_server_lost",
    "java_causes",
    "java_out_of_memory",
    "lost_jvm_unlogged",
    "quiet_lost_accumulators",
    "session_failure",
    "stop_session",
]

# org.apache.spark.util.SparkExitCode.OOM: a JVM whose thread threw OutOfMemoryError.
SPARK_OOM_EXIT = 52
# How long a JVM whose connection was lost, or whose context stopped, is given to exit
# (its shutdown hooks run first).
JVM_EXIT_SECONDS = 15
# How far a Java exception's causes are followed.
_CAUSES = 32

_MEMORY_FIX = (
    "raise spark.driver.memory (the JVM's heap in local mode, 2g unless set: --conf "
    "spark.driver.memory=8g or [run.spark_conf]; on a cluster spark.executor.memory), or "
    "read the input in smaller files"
)
_KILLED_FIX = (
    "keep spark.driver.memory (the JVM's heap in local mode, 2g unless set) within the "
    "memory the machine has free, or run on a larger machine or a cluster"
)


class SessionFailure:
    """What stopped a session (``what``) and the fix (``fix``): two phrases for a message."""

    def __init__(self, what: str, fix: str) -> None:
        self.what = what
        self.fix = fix

    def __repr__(self) -> str:
        return f"SessionFailure({self.what!r}, {self.fix!r})"


def _chain(error: BaseException | None):
    """``error`` and the errors it was raised from or during (Python's ``__cause__``/context)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _is_connect(spark) -> bool:
    # A Spark Connect session's class (pyspark.sql.connect), without importing PySpark.
    return type(spark).__module__.startswith("pyspark.sql.connect")


# The gRPC status of a call to a server that cannot be reached (grpc.StatusCode's name).
_UNREACHABLE = "UNAVAILABLE"


def connect_server_lost(error: BaseException) -> bool:
    """Whether a Spark Connect call failed under ``error`` because its server is unreachable.

    By the gRPC status codes in the error's chain only (PySpark's
    ``getGrpcStatusCode()``, a gRPC error's ``code()``): ``UNAVAILABLE``, which the
    client gives after its retries when the server stopped or cannot be connected to.
    Never the message, which is the server's text.
    """
    for found in _chain(error):
        status = getattr(found, "getGrpcStatusCode", None)
        if status is None and _grpc_error(found):
            status = getattr(found, "code", None)
        if callable(status):
            with contextlib.suppress(Exception):
                if getattr(status(), "name", None) == _UNREACHABLE:
                    return True
    return False


def _grpc_error(error: BaseException) -> bool:
    try:
        import grpc
    except ImportError:  # pragma: no cover - no Spark Connect client without grpc
        return False
    return isinstance(error, grpc.RpcError)


def _connection_lost(error: BaseException) -> bool:
    """Whether py4j lost its connection to the JVM under ``error`` (by the errors' classes)."""
    return any(isinstance(e, Py4JNetworkError | ConnectionError) for e in _chain(error))


def java_causes(error: BaseException, depth: int = _CAUSES) -> Iterator:
    """``error``'s Java exception (py4j's ``java_exception``) and its causes, at most ``depth``.

    Hadoop wraps a store's own failure (a refused login, a lost connection, an
    ``OutOfMemoryError``) in its file system's or Spark's exception, so a kind is
    read along the chain. A JVM that no longer answers ends the chain early.
    """
    java = getattr(error, "java_exception", None)
    with contextlib.suppress(Py4JError, ConnectionError, AttributeError):
        for _ in range(depth):
            if java is None:
                return
            yield java
            java = java.getCause()


def java_out_of_memory(error: BaseException) -> bool:
    """Whether a Java exception under ``error`` is or was caused by ``java.lang.OutOfMemoryError``.

    Only classes are compared (``getClass().getName()``), never messages. A JVM
    that no longer answers has no causes to show: False.
    """
    return any(
        java.getClass().getName() == "java.lang.OutOfMemoryError"
        for raised in _chain(error)
        if isinstance(raised, Py4JJavaError)
        for java in java_causes(raised)
    )


def _jvm_process(spark) -> subprocess.Popen | None:
    """The JVM's process when this Python process launched it (PySpark's gateway), else None."""
    context = getattr(spark, "_sc", None)
    gateway = getattr(context, "_gateway", None)
    process = getattr(gateway, "proc", None)
    return process if isinstance(process, subprocess.Popen) else None


def _exit_status(process: subprocess.Popen | None, wait: bool) -> int | None:
    if process is None:
        return None
    if wait:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return process.wait(timeout=JVM_EXIT_SECONDS)
    return process.poll()


def _exited(status: int) -> SessionFailure:
    if status == SPARK_OOM_EXIT:
        return SessionFailure(
            f"the Spark JVM ran out of memory (java.lang.OutOfMemoryError) and exited "
            f"(status {SPARK_OOM_EXIT})",
            _MEMORY_FIX,
        )
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return SessionFailure(
            f"the Spark JVM was killed ({name}; the system's out-of-memory killer sends "
            "SIGKILL when the machine runs short of memory)",
            _KILLED_FIX,
        )
    return SessionFailure(
        f"the Spark JVM exited (status {status})",
        "the JVM's log of the run says why; " + _MEMORY_FIX,
    )


def _context_stopped(spark) -> bool:
    context = getattr(spark, "_sc", None)
    java = getattr(context, "_jsc", None)
    if java is None:
        return context is not None
    try:
        return bool(java.sc().isStopped())
    except (Py4JError, ConnectionError):
        return True


def session_failure(spark, error: BaseException) -> SessionFailure | None:
    """What stopped the session ``spark`` under ``error``, or None if it did not stop.

    In order: the JVM process (launched by this process) exited: its status says
    how (`SPARK_OOM_EXIT`: out of memory; a signal: killed); py4j lost the JVM
    (one launched elsewhere, ``spark-submit``'s): it stopped answering; a Java
    exception caused by ``java.lang.OutOfMemoryError`` (the JVM still runs); the
    SparkContext was stopped. A Spark Connect session (no JVM here): its server
    unreachable (`connect_server_lost`), else None; no session: None. Messages are
    never read, so the answer does not depend on the data.
    """
    if spark is not None and _is_connect(spark):
        if connect_server_lost(error):
            return SessionFailure(
                "the Spark Connect server is unreachable (it stopped, or the connection "
                "to it was lost)",
                "check that the server runs and that this machine reaches it",
            )
        return None
    if spark is None or getattr(spark, "_sc", None) is None:
        return None
    lost = _connection_lost(error)
    status = _exit_status(_jvm_process(spark), wait=lost)
    if status is not None:
        return _exited(status)
    if lost:
        return SessionFailure(
            "the Spark JVM stopped answering (it was killed or ran out of memory)",
            "the JVM's log of the run says why; " + _MEMORY_FIX,
        )
    if java_out_of_memory(error):
        return SessionFailure("Spark ran out of memory (java.lang.OutOfMemoryError)", _MEMORY_FIX)
    if _context_stopped(spark):
        # Spark stops the context first when its JVM exits (out of memory: status 52), so
        # a JVM this process launched is given the time to exit and say how.
        status = _exit_status(_jvm_process(spark), wait=True)
        if status is not None:
            return _exited(status)
        return SessionFailure(
            "the Spark session was stopped during the run (its SparkContext is stopped)",
            "run it where nothing else stops the session",
        )
    return None


def stop_session(spark, unreachable: bool = False) -> None:
    """Stop ``spark``; if its JVM is gone, forget it, so this process's next session starts one.

    PySpark keeps the JVM's gateway for the life of the process: after its JVM
    died, every new session would be built on the dead gateway. When the JVM
    process (launched here) has exited, the gateway is closed and forgotten.
    A Spark Connect session whose server is ``unreachable`` only closes its channel:
    releasing it on the server would be retried for minutes, then logged with the
    channel's text.
    """
    if _is_connect(spark):
        if unreachable:
            spark.release_session_on_close = False
        spark.stop()
        return
    process = _jvm_process(spark)
    dead = process is not None and process.poll() is not None
    try:
        spark.stop()
    except (Py4JError, ConnectionError):
        if not dead and process is not None:
            raise
        dead = True
    if dead and getattr(spark, "_sc", None) is not None:
        _forget_jvm(type(spark), type(spark._sc))


def _forget_jvm(session, context) -> None:
    """Drop PySpark's references to a dead JVM (its gateway, context and sessions)."""
    gateway = context._gateway
    if gateway is not None:
        with contextlib.suppress(Exception):  # sockets to a dead process: nothing to report
            gateway.shutdown()
    context._gateway = None
    context._jvm = None
    context._active_spark_context = None
    session._instantiatedSession = None
    session._activeSession = None


class _LostJvmRecords(logging.Filter):
    """Drops py4j's own record of a lost connection (logged on the root logger with its
    traceback, "Exception while sending command."): the run names what happened."""

    def filter(self, record: logging.LogRecord) -> bool:
        lost = record.exc_info is not None and isinstance(
            record.exc_info[1], Py4JNetworkError | ConnectionError
        )
        return not (lost and record.name == "root" and "py4j" in record.pathname)


@contextlib.contextmanager
def lost_jvm_unlogged() -> Iterator[None]:
    """Within the block, py4j's traceback of a lost JVM connection is not logged."""
    root = logging.getLogger()
    records = _LostJvmRecords()
    root.addFilter(records)
    try:
        yield
    finally:
        root.removeFilter(records)


def quiet_lost_accumulators(spark) -> None:
    """A classic session's accumulator server stays quiet when its JVM goes away.

    PySpark's driver keeps a socket server for the executors' accumulator updates; the
    JVM connects to it at its first Python task. When the JVM dies, the server's handler
    reads the end of that socket and ``socketserver`` prints a traceback on standard
    error, beside the run's one-line message (`session_failure` names what happened).
    Only that end of the socket (``EOFError``, a reset connection) is kept quiet; any
    other error of the server is printed as before.
    """
    if _is_connect(spark):
        return
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None:
        return
    printed = server.handle_error

    def handle_error(request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], EOFError | OSError):
            printed(request, client_address)

    server.handle_error = handle_error
