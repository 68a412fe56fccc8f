"""Benchmark: a local Spark session's start with the driver's class archive against without.

    PYTHONPATH=. python bench/bench_spark_start.py --rounds 5

Each round starts two fresh Python processes, one after the other, alternating which
goes first: `local_session(2)` and a first job (``spark.range(1000).count()``), with
the opt-in class-data-sharing archive (`dp_pipeline.platform.class_archive`,
``DP_PIPELINE_CLASS_ARCHIVE=1``) and without it (the default). The archive is
written first (one process, then waiting for the JVM to finish writing it as it
exits; not timed) in a cache folder of its own. Prints each round, the medians and
their ratio (the time to the session, and to the first job's answer; the process's
own import of PySpark and dp_pipeline included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dp_pipeline.platform.class_archive import MAGIC  # noqa: E402

CHILD = """
import time
started = time.perf_counter()
from dp_pipeline.spark import local_session
spark = local_session(2, driver_memory="2g")
session = time.perf_counter() - started
spark.range(1000).count()
print(session, time.perf_counter() - started)
"""


def run(environment: dict[str, str]) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=environment, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    session, first_job = map(float, done.stdout.split()[-2:])
    return session, first_job


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        off = {**os.environ, "XDG_CACHE_HOME": cache, "PYTHONPATH": str(ROOT)}
        off.pop("DP_PIPELINE_CLASS_ARCHIVE", None)  # the default: no archive
        on = {**off, "DP_PIPELINE_CLASS_ARCHIVE": "1"}
        run(on)  # writes the archive as its JVM exits
        deadline = time.monotonic() + 300
        archives: list[Path] = []
        while time.monotonic() < deadline:
            archives = list(Path(cache, "dp_pipeline").glob("*.jsa"))
            if archives and archives[0].read_bytes()[:4] == MAGIC:
                break
            time.sleep(1)
        else:
            raise SystemExit("no class archive was written (a runtime without class sharing?)")
        print(f"archive: {archives[0].stat().st_size / 2**20:.0f} MiB")
        print(f"load average at start: {os.getloadavg()[0]:.1f}\n")
        print("| round | with archive: session, first job (s) | without (s) |")
        print("|---|---|---|")
        with_archive, without = [], []
        for index in range(arguments.rounds):
            order = [(on, with_archive), (off, without)]
            for environment, figures in order if index % 2 == 0 else order[::-1]:
                figures.append(run(environment))
            a, b = with_archive[-1], without[-1]
            print(f"| {index + 1} | {a[0]:.2f}, {a[1]:.2f} | {b[0]:.2f}, {b[1]:.2f} |", flush=True)
        for position, name in ((0, "session"), (1, "first job")):
            mine = statistics.median(f[position] for f in with_archive)
            theirs = statistics.median(f[position] for f in without)
            print(
                f"median to the {name}: {mine:.2f} s with, {theirs:.2f} s without "
                f"(ratio {mine / theirs:.2f})"
            )
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
