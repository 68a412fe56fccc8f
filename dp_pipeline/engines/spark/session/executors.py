"""Do the session's executors import this dp_pipeline? One tiny Spark job asks them.

The noise, the bounding and the fingerprints run in Python workers on the
executors (or on a Spark Connect server's executors), which import dp_pipeline to
run them. A worker Python without it (a virtual environment not activated, a
``PYSPARK_PYTHON`` pointing elsewhere, a Connect server started from another
environment) would fail every job with a worker traceback, after the release was
reserved; a worker with another version could compute other bytes. `executors_problem`
asks first: one job of a few tasks, each reporting its Python's ``sys.executable``
and the dp_pipeline version it imports, or the class of its import error. No data
is read, and nothing in the answer depends on data: a release asks before it
reserves anything.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from dp_pipeline.engines.spark.session.kinds import is_connect
from dp_pipeline.errors import SparkExecutorsError

__all__ = ["WorkerPython", "check_executors", "executor_pythons", "executors_problem", "probe"]

# The fix, for a classic session and for a Spark Connect server.
_CLASSIC_FIX = (
    "install dp_pipeline {version} in that Python, or set PYSPARK_PYTHON (or "
    "spark.pyspark.python) to a Python that has it, on every executor host"
)
_CONNECT_FIX = (
    "install dp_pipeline {version} in the Spark Connect server's environment (the Python "
    "its executors run: PYSPARK_PYTHON where the server starts) and restart the server"
)
# Tasks of the job on a Spark Connect session, whose default parallelism is the server's.
_CONNECT_TASKS = 2
# Classic applications whose executors answered with the version asked: a SparkContext's
# worker Python is fixed when it starts, so one answer holds for the application's life.
_CONFIRMED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class WorkerPython:
    """What one executor's Python answered: its executable and dp_pipeline version, or
    the class (and missing module's name) of the error importing dp_pipeline raised."""

    executable: str
    version: str | None
    error: str | None = None


def probe(_rows) -> list[tuple[str, str, str]]:
    """The task: (executable, dp_pipeline version or "", import error or ""), run on a worker.

    Never imports dp_pipeline at unpickling (it is sent by value, see
    `executor_pythons`): a worker without the package answers instead of failing.
    """
    try:
        # Imported in the worker on purpose: whether it can be is the question asked
        # (importing the version module runs the package's own __init__ first).
        from dp_pipeline.version import __version__
    except Exception as error:
        # The class and the missing module's name only: never the message's text.
        missing = getattr(error, "name", None)
        named = type(error).__name__ + (f": no module {missing!r}" if missing else "")
        return [(sys.executable, "", named)]
    return [(sys.executable, str(__version__), "")]


# The probe travels by value: cloudpickle sends a function whose module it cannot find in
# sys.modules with its code, not as "import this module" (which fails without the package).
probe.__module__ = "dp_pipeline_executor_probe"


def executor_pythons(spark) -> set[WorkerPython]:
    """Each distinct answer of the executors' Pythons to `probe`: one job, a task per core
    (Spark Connect: a few), reading no data."""
    if is_connect(spark):
        # Spark Connect's own UDF class (no RDDs there); imported only on that path, as
        # its client needs grpc, which a classic install may lack.
        from pyspark.sql.connect.functions import udf

        # Not Arrow-optimized: a worker Python with PySpark but no pyarrow still answers.
        answer = udf(lambda row: "\t".join(probe([row])[0]), "string", useArrow=False)
        rows = spark.range(0, _CONNECT_TASKS, 1, _CONNECT_TASKS).select(answer("id")).collect()
        answers = [tuple(row[0].split("\t")) for row in rows]
    else:
        context = spark.sparkContext
        tasks = max(1, context.defaultParallelism)
        answers = context.parallelize(range(tasks), tasks).mapPartitions(probe).collect()
    return {
        WorkerPython(executable, version or None, error or None)
        for executable, version, error in answers
    }


def executors_problem(spark, version: str) -> str | None:
    """None when every executor Python asked imports dp_pipeline ``version``; else one line
    naming the first that does not (its executable, what it lacks or has) and the fix."""
    connect = is_connect(spark)
    fix = (_CONNECT_FIX if connect else _CLASSIC_FIX).format(version=version)
    # Whose Python it is: a Connect client's executors are its server's.
    whose = "the Spark Connect server's executors'" if connect else "the Spark executors'"
    try:
        workers = executor_pythons(spark)
    except (Py4JJavaError, PySparkException) as error:
        # The worker Python did not run the task at all (missing, another Python version
        # than the driver's, no PySpark): Spark's message is the worker's traceback, so
        # only its class is named. A JVM that died (py4j's network error) is not caught.
        return (
            f"the Spark executors could not run a Python task ({type(error).__name__}) with "
            f"the worker Python {_configured_python(spark)}; it must be Python "
            f"{sys.version_info.major}.{sys.version_info.minor} with PySpark: {fix}"
        )
    for worker in sorted(workers, key=lambda w: (w.executable, str(w.version))):
        if worker.version is None:
            return (
                f"{whose} Python {worker.executable} cannot import dp_pipeline "
                f"({worker.error}): {fix}"
            )
        if worker.version != version:
            return (
                f"{whose} Python {worker.executable} has dp_pipeline "
                f"{worker.version}, this driver {version}: {fix}"
            )
    return None


def check_executors(spark, version: str) -> None:
    """Raise a one-line `SparkExecutorsError` unless the executors' Pythons import
    dp_pipeline ``version`` (`executors_problem`); one job, no data read, asked once per
    classic application (a Spark Connect server's answer is not kept: it may restart)."""
    application = None if is_connect(spark) else (spark.sparkContext.applicationId, version)
    if application in _CONFIRMED:
        return
    problem = executors_problem(spark, version)
    if problem is not None:
        raise SparkExecutorsError(problem)
    if application is not None:
        _CONFIRMED.add(application)


def _configured_python(spark) -> str:
    """The worker Python the session was told to use, as far as the driver knows it."""
    if is_connect(spark):
        return "of the Spark Connect server"
    configured = spark.sparkContext.getConf().get("spark.pyspark.python")
    return configured or os.environ.get("PYSPARK_PYTHON") or "python3 (the default)"
