"""What kind of session a Spark engine received: classic or Spark Connect, and its master.

A session is classic (a SparkContext in this process, py4j to the JVM) or Spark
Connect (a gRPC client of a Spark Connect server, local or remote: no JVM here,
no SparkContext, no RDDs). `is_connect` tells them apart without importing
PySpark; the engine takes the paths that need the SparkContext only on a classic
session.
"""

from __future__ import annotations

import re

__all__ = ["LOCAL_MASTER", "is_connect", "session_master"]

# ``local``, ``local[N]``, ``local[*]``: a master (or a Connect URL) run in this process.
LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)\])?")


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
