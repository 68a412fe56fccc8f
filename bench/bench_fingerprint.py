"""Benchmark: an input's fingerprint hashed by the executors against one driver thread.

    PYTHONPATH=. python bench/bench_fingerprint.py --folder /dev/shm/dp_fingerprint \
        --gigabytes 2.5 --master 'local[2]' --rounds 3

Writes ``--gigabytes`` of random bytes as files of ``--file-mb`` MB under
``--folder`` (once; not timed), then alternates, ``--rounds`` times after a
warm-up: the content digests of every file by one thread of this process
(`local_digests` with one thread: what the driver did before) and by the
executors (`executor_digests`: 64 MiB ranges dealt to the tasks, local[2] = 2 executor
cores). Prints each round and the ratio of the fastest rounds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dp_pipeline.engines.spark.session.start import release_session as spark_session
from dp_pipeline.release.sources.fingerprint import local_digests
from dp_pipeline.release.sources.spark_files import executor_digests, file_sizes


def write_input(folder: Path, gigabytes: float, file_mb: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    size = file_mb * 2**20
    count = max(1, round(gigabytes * 2**30 / size))
    files = []
    for index in range(count):
        path = folder / f"part-{index:04d}.bin"
        if not path.exists() or path.stat().st_size != size:
            with path.open("wb") as handle:
                for _ in range(file_mb):
                    handle.write(os.urandom(2**20))
        files.append(path)
    return files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--gigabytes", type=float, default=2.5)
    parser.add_argument("--file-mb", type=int, default=256)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    files = write_input(arguments.folder, arguments.gigabytes, arguments.file_mb)
    total = sum(p.stat().st_size for p in files) / 2**30
    print(f"{len(files)} files, {total:.2f} GiB in {arguments.folder}")
    spark = spark_session(arguments.master)
    uris = tuple(f"file:{p}" for p in files)
    names = [p.name for p in files]
    driver, executors = [], []
    for round_ in range(arguments.rounds + 1):
        started = time.perf_counter()
        one = local_digests(files, names, threads=1)
        middle = time.perf_counter()
        two = executor_digests(spark, uris, names, file_sizes(spark, uris, "bench"), "bench")
        ended = time.perf_counter()
        if one != two:
            raise SystemExit("the executors' digests differ from the driver's")
        label = "warm-up" if round_ == 0 else f"round {round_}"
        print(f"{label}: driver thread {middle - started:.2f} s, executors {ended - middle:.2f} s")
        if round_:
            driver.append(middle - started)
            executors.append(ended - middle)
    print(
        f"fastest: driver thread {min(driver):.2f} s ({total / min(driver):.2f} GiB/s), "
        f"executors {min(executors):.2f} s ({total / min(executors):.2f} GiB/s), "
        f"speed-up {min(driver) / min(executors):.2f}x; load average {os.getloadavg()}"
    )
    spark.stop()


if __name__ == "__main__":
    main()
