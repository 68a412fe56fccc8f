"""Sessions started for dp_pipeline: local mode, a cluster master, Spark Connect.

Only the job layer calls these (a release's own session, `release_session`; the
notebook helper `dp_pipeline.spark.local_session`); the engines receive the
session. Java comes from `dp_pipeline.platform.java` (the bundled JDK when the
machine has none). PySpark is imported here.
"""

from __future__ import annotations

import os
import secrets
import sys

from pyspark.sql import SparkSession

from dp_pipeline.engines.spark.session.kinds import LOCAL_MASTER
from dp_pipeline.errors import DPRuntimeError, DPValueError
from dp_pipeline.platform.class_archive import OPTION, driver_java_options
from dp_pipeline.platform.java import ensure_java

__all__ = [
    "connect_session",
    "local_session",
    "release_session",
    "with_class_archive",
]


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
    java_home = ensure_java()
    cores = cores or os.cpu_count() or 1
    if cores < 1 or max_task_failures < 1:
        raise DPValueError(
            f"cores and max_task_failures must be >= 1, got {cores}, {max_task_failures}"
        )
    master = f"local[{cores}]" if max_task_failures == 1 else f"local[{cores},{max_task_failures}]"
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = _local_settings(cores, shuffle_partitions, max_task_failures, driver_memory)
    for name, value in with_class_archive({**settings, **(conf or {})}, java_home).items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def with_class_archive(settings: dict[str, str], java_home: str) -> dict[str, str]:
    """``settings`` with the driver JVM started from Spark's class archive when it is
    switched on (``DP_PIPELINE_CLASS_ARCHIVE=1``, `dp_pipeline.platform.class_archive`):
    start-up time only, no other effect; ``settings`` unchanged otherwise."""
    options = driver_java_options(settings, java_home)
    return settings if options is None else {**settings, OPTION: options}


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
    (`local_connect_session`: on a port of its own, with a token of its own),
    stopped with the session. Needs PySpark's Connect client (``pyspark[connect]``:
    grpcio, protobuf, zstandard). ``conf``: Spark settings given to the builder.
    """
    match = LOCAL_MASTER.fullmatch(remote)
    if match:
        cores = match.group(1)
        cores = (os.cpu_count() or 1) if cores in (None, "*") else int(cores)
        return local_connect_session(cores, app_name=app_name, conf=conf)
    builder = SparkSession.builder.remote(remote).appName(app_name)
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    return builder.getOrCreate()


# Settings PySpark gives the in-process server of ``remote("local")``.
_CONNECT_SERVER = {
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    "spark.sql.artifact.isolation.enabled": "true",
    "spark.sql.artifact.isolation.alwaysApplyClassloader": "true",
}
_TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


def local_connect_session(
    cores: int, *, app_name: str = "dp_pipeline", conf: dict[str, str] | None = None
):
    """A Spark Connect session on a server this process starts: local[``cores``], loopback only.

    PySpark's ``remote("local[N]")`` binds its server to the fixed port 15002 and
    connects to ``localhost:15002`` whatever answers there: a second job on the host
    then reaches the first job's server, and any local process that holds the port
    receives the job's plans (and the functions they ship, keyed noise included).
    Here the server binds 127.0.0.1 on a port the system assigns, requires a fresh
    random token (or ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` if set), and the client
    connects to that port, read back from the server itself. `local_session`'s
    settings, then ``conf``; stopping the session stops the server.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    java_home = ensure_java()
    if SparkContext._active_spark_context is not None:
        raise DPRuntimeError(
            "a local Spark Connect server needs a process without a Spark session: "
            "this one has one; stop it first, or connect to a running server (sc://host:port)"
        )
    os.environ.setdefault(_TOKEN_VARIABLE, secrets.token_urlsafe(32))
    settings = {
        **_local_settings(cores, None, 1, "2g"),
        **(conf or {}),
        **_CONNECT_SERVER,
        "spark.master": f"local[{cores}]",
        "spark.app.name": app_name,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": "0",
    }
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):  # a classic JVM first
        os.environ.pop(name, None)
    settings = with_class_archive(settings, java_home)
    context = SparkContext.getOrCreate(SparkConf(loadDefaults=True).setAll(settings.items()))
    SparkSession(context)  # the server's root session, as PySpark's launcher makes it
    context.setLogLevel("ERROR")
    service = getattr(context._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
    port = int(getattr(service, "MODULE$").localPort())
    # Connect sessions stop their local server when this is set (PySpark's own rule).
    os.environ["SPARK_LOCAL_REMOTE"] = "1"
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    return ConnectSession.builder.remote(f"sc://localhost:{port}").getOrCreate()


def release_session(master: str, conf: dict[str, str] | None = None):
    """A release's own session: Spark Connect if ``SPARK_REMOTE`` is set, else on ``master``.

    ``SPARK_REMOTE`` (``dp-release run --remote URL`` sets it, as ``pyspark --remote``
    does): a Spark Connect session on that URL (`connect_session`; ``local[N]`` starts
    a local Connect server). Otherwise ``local_session`` for ``local[N]`` / ``local[*]``
    masters, else a classic session on ``master``. ``conf``: Spark settings given to
    the session's builder (``spark-submit --conf``'s).
    """
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        return connect_session(remote, app_name="dp_pipeline release", conf=conf)
    match = LOCAL_MASTER.fullmatch(master)
    if match:
        cores = match.group(1)
        return local_session(None if cores in (None, "*") else int(cores), conf=conf)
    java_home = ensure_java()
    # Executors start Python workers with the driver's PYSPARK_PYTHON: by default this
    # interpreter, which has dp_pipeline (right for workers on this machine or an image
    # with the same layout; set PYSPARK_PYTHON otherwise). `check_executors` confirms it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("dp_pipeline release")
    for key, value in with_class_archive(dict(conf or {}), java_home).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
