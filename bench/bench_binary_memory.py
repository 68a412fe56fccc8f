"""Benchmark: the fingerprint of files outside the local file system at a given heap.

    PYTHONPATH=. python bench/bench_binary_memory.py --folder /dev/shm/dp_binary \
        --files 10 --file-mb 124 --master 'local[2]' --driver-memory 2g

Writes ``--files`` files of ``--file-mb`` MB of random bytes under ``--folder`` (once;
not timed: Spark's ``binaryFile`` reader holds a file by its size, whatever its
bytes), mounts the folder at ``viewfs://dpbinary/data`` and, in a session of its own
with ``spark.driver.memory`` = ``--driver-memory``, lists the files' sizes
(`file_sizes`: a file too large for the heap is refused there) and hashes them
through ``binaryFile`` (`executor_digests`). Prints the outcome, the hashing time
and the JVM's peak resident memory (``VmHWM``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dp_pipeline.engines.spark.session.failures import session_failure
from dp_pipeline.engines.spark.session.start import local_session
from dp_pipeline.release.sources.spark_files import executor_digests, file_sizes, listed_files
from dp_pipeline.release.spec.model import SpecError


def write_input(folder: Path, files: int, file_mb: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        path = folder / f"part-{index:05d}.bin"
        if not path.exists() or path.stat().st_size != file_mb * 10**6:
            path.write_bytes(os.urandom(file_mb * 10**6))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--file-mb", type=int, default=124)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    arguments = parser.parse_args(argv)
    write_input(arguments.folder, arguments.files, arguments.file_mb)
    cores = arguments.master.removeprefix("local[").rstrip("]")
    spark = local_session(
        int(cores) if cores.isdigit() else None,
        driver_memory=arguments.driver_memory,
        conf={
            "spark.hadoop.fs.viewfs.mounttable.dpbinary.link./data": f"file://{arguments.folder}"
        },
    )
    uris = listed_files(spark, "viewfs://dpbinary/data", "binaryFile", None)
    started = time.perf_counter()
    try:
        sizes = file_sizes(spark, uris, "bench")
        executor_digests(spark, uris, [u.rsplit("/", 1)[1] for u in uris], sizes, "bench")
        outcome = "hashed"
    except SpecError as error:
        outcome = f"refused: {error.problems[0]}"
    except Exception as error:  # the JVM died or ran out of memory: say which
        failure = session_failure(spark, error)
        outcome = f"failed: {failure.what if failure else type(error).__name__}"
    seconds = time.perf_counter() - started
    process = spark.sparkContext._gateway.proc
    peak = "-"
    if process.poll() is None:
        status = Path(f"/proc/{process.pid}/status")
        if status.exists():
            peak = next(line.split()[1] for line in status.open() if line.startswith("VmHWM"))
            peak = f"{int(peak) / 1024:.0f} MiB"
    print(
        f"{len(uris)} files of {arguments.file_mb} MB, {arguments.master}, "
        f"spark.driver.memory {arguments.driver_memory}: {outcome}; {seconds:.2f} s; "
        f"JVM peak RSS {peak}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
