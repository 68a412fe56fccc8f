"""spark-submit entry point of a release; same arguments as ``dp-release``.

    spark-submit --master spark://host:7077 jobs/census_release.py run conf/census_demo.toml \\
        --input hdfs:///census/persons.parquet --output /releases
    python jobs/census_release.py conf/census_demo.toml        # 'run' is the default command

Under spark-submit the session that spark-submit configured is used (its
master wins over the spec's ``run.master``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dp_pipeline.release.cli import main

COMMANDS = ("plan", "run", "ledger")


def job_arguments(argv: list[str]) -> list[str]:
    """``run`` unless a command is named; the spark-submit master unless --master is given."""
    if not argv or (argv[0] not in COMMANDS and not argv[0].startswith("-")):
        argv = ["run", *argv]
    submitted_master = os.environ.get("MASTER") or _spark_submit_master()
    if argv[0] == "run" and submitted_master and "--master" not in argv:
        argv = [*argv, "--master", submitted_master]
    return argv


def _spark_submit_master() -> str | None:
    """The ``--master`` given to spark-submit, when this script runs under it.

    spark-submit starts the JVM first and hands the Python driver its gateway
    (``PYSPARK_GATEWAY_PORT``); its ``--master`` is then the JVM's
    ``spark.master`` property, which a `SparkConf` reads back.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf

    return SparkConf().get("spark.master", None)


if __name__ == "__main__":
    sys.exit(main(job_arguments(sys.argv[1:])))
