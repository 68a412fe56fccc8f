"""The Spark session a release runs in: its own (started, quiet, checked) or the running one.

The release is the job that owns a session: it starts one when none runs
(`dp_pipeline.engines.spark.session.start.release_session`, its JVM's lines in a
log file), or sets its settings on the running one for the run; either way it
checks that the executors import this dp_pipeline before anything is reserved
(`executors_problem`). The engines below receive the session.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession

from dp_pipeline.engines.spark.session.executors import check_executors as check_workers
from dp_pipeline.engines.spark.session.failures import quiet_lost_accumulators
from dp_pipeline.engines.spark.session.kinds import session_master
from dp_pipeline.engines.spark.session.quiet import jvm_output_to_file
from dp_pipeline.engines.spark.session.start import release_session
from dp_pipeline.release.sources.source import kept_log
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError
from dp_pipeline.version import __version__

__all__ = ["ReleaseSession", "check_executors", "open_release_session", "running_session_settings"]


@dataclass
class ReleaseSession:
    """A release's session: ``own`` (started here, stopped when the input closes), the JVM
    ``log`` of a session started quietly, and ``restore`` (undoes settings set on a
    running session, or None)."""

    spark: object
    own: bool
    log: str | None = None
    restore: Callable[[], None] | None = None


def open_release_session(
    spec: ReleaseSpec, spark, progress, *, verbose: bool = False
) -> ReleaseSession:
    """``spark``, or the running session, or a session started with the spec's settings.

    A session already running in this process (a notebook's, a test's) is used and
    left running, with the spec's settings (``run.spark_conf`` and ``--conf``) it
    can take set for the run; only a session started here is the release's to stop.
    A session started here writes the JVM's and Spark's own lines to a log file
    (named in a progress line) unless ``verbose``. Then `check_executors`: a
    `SparkExecutorsError` (nothing reserved) when the executors cannot run this dp_pipeline.
    """
    spark = spark if spark is not None else SparkSession.getActiveSession()
    conf = spec.spark_conf
    if spark is not None:
        progress(f"spark: using the running session (master {session_master(spark)})")
        restore = running_session_settings(spark, conf, progress)
        session = ReleaseSession(spark, False, None, restore)
    else:
        settings = f" with settings {conf.described()}" if conf else ""
        remote = os.environ.get("SPARK_REMOTE")
        if remote:
            progress(f"spark: starting a Spark Connect session on {_shown_url(remote)}{settings}")
        else:
            progress(f"spark: starting a session on {spec.master}{settings}")
        if verbose:
            session = ReleaseSession(release_session(spec.master, conf.as_dict()), True)
        else:
            with jvm_output_to_file() as log:
                try:
                    started = release_session(spec.master, conf.as_dict())
                except BaseException as error:
                    kept_log(error, log)  # why the JVM did not start is in its log
                    raise
            progress(f"spark: the JVM's and Spark's own log lines go to {log} (see --verbose)")
            session = ReleaseSession(started, True, log)
        # The executors check runs a Python task; if the JVM then dies, the run's own line
        # says so, without PySpark's accumulator server's traceback.
        quiet_lost_accumulators(session.spark)
    return session


def check_executors(spark, progress) -> None:
    """Raise a one-line `SparkExecutorsError` unless the executors' Pythons import this
    dp_pipeline (exit 2, nothing reserved).

    One job of a few tasks (no data read), answered before the reservation: a worker
    Python without the package, or with another version, is named with the fix.
    """
    check_workers(spark, __version__)
    progress(f"spark: the executors run dp_pipeline {__version__}")


def running_session_settings(spark, conf, progress):
    """Set ``conf`` on a running session for the run; return what undoes it (or None).

    A running session's Hadoop configuration takes the session's settings without
    their ``spark.hadoop.`` prefix, so ``spark.hadoop.K`` is set as ``K``. A setting
    Spark fixes at start-up (``spark.executor.memory``) is refused unless the session
    already has that value: it needs a session started with it.
    """
    if not conf:
        return None
    previous = {}
    refused = []
    for key, value in conf.pairs:
        name = key.removeprefix("spark.hadoop.")
        if name == key and not spark.conf.isModifiable(key):
            if spark.conf.get(key, None) != value:
                refused.append(key)
            continue
        previous[name] = spark.conf.get(name, None)
        spark.conf.set(name, value)

    def restore() -> None:
        for name, value in previous.items():
            if value is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, value)

    if refused:
        restore()
        raise SpecError(
            [
                f"run.spark_conf (or --conf) {key!r}: Spark fixes it when a session starts, "
                "and the running session has another value; run the release in a new "
                "process (dp-release run), or start the session with it"
                for key in refused
            ],
            source="spark session",
        )
    progress(f"spark: settings {conf.described()} set on the running session for this run")
    return restore


def _shown_url(remote: str) -> str:
    """A Spark Connect URL without its parameters (a ``token=`` is a secret)."""
    return remote.split(";", 1)[0].rstrip("/")
