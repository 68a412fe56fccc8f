"""Benchmark: the demo release at scale through ``viewfs://`` against a plain PySpark pipeline.

    PYTHONPATH=. python bench/bench_scale.py --persons 100000000 --data /dev/shm/dp_scale \
        --master 'local[2]' --driver-memory 8g

Synthetic census persons (`census_chunk`, the rows of `write_census_sample` in the
same order) are written once into a folder of Parquet files of ``--part-persons``
persons each under ``--data`` (not timed). The folder is mounted at
``viewfs://benchscale/census`` by Spark settings (``spark.hadoop.fs.viewfs.mounttable
...``, as ``[run.spark_conf]`` or ``dp-release run --conf`` give them), so both
pipelines read it through Hadoop's view file system: the release takes the path of
every non-local input (executors fingerprint the files, the Arrow pass aggregates
over Spark's reader).

Each run is its own process, starting its own Spark session with the same settings
(``spark.driver.memory`` = ``--driver-memory``), so its peak memory is that run's:
the Python driver's ``getrusage(RUSAGE_SELF).ru_maxrss`` and the driver JVM's
``VmHWM`` (a child process of the Python driver, read from ``/proc`` before the
process ends; the Python workers the JVM starts are not counted). The runs:

- ``private``: `run_release` of conf/census_demo.toml (plan, key, session start,
  listing, fingerprint, identity, ledger reservation, read, aggregate and noise,
  post-processing, the mid-run input check, atomic write);
- ``plain``: the same six tables without privacy (`bench_release.plain_pipeline`:
  group by the same keys, complete the declared domain, write Parquet), each table
  a scan of the Parquet files (``--plain-cache``: the input cached in Spark first).

``--local`` reads the folder by its local path instead (the release then takes the
Parquet pass of bare local scans); ``--conf KEY=VALUE`` adds a Spark setting to both.
Rounds alternate the two; the table shows each run's phases, the setup share of the
release and the ratio private / plain, with and without the session's start (both
pipelines pay one).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "benchscale"
MOUNT = "census"
SEED = 2026


def sample_folder(data: Path, persons: int, part_persons: int, progress) -> Path:
    """The folder of Parquet parts holding ``persons`` synthetic persons, written on first use.

    Part ``i`` holds chunks ``i * k .. (i + 1) * k - 1`` of `census_chunk` (``k`` chunks of
    `CHUNK_ROWS` persons a part): the parts read in name order are the rows of
    ``write_census_sample(path, persons)``, one chunk in memory at a time.
    """
    import pyarrow.parquet as pq

    from dp_pipeline.datasets.synthetic import CHUNK_ROWS, GENERATOR_VERSION, census_chunk

    if part_persons % CHUNK_ROWS:
        raise SystemExit(f"--part-persons must be a multiple of {CHUNK_ROWS:,}")
    folder = data / f"census_v{GENERATOR_VERSION}_{persons}_{SEED}_parts_{part_persons}"
    folder.mkdir(parents=True, exist_ok=True)
    per_part = part_persons // CHUNK_ROWS
    chunks = (persons + CHUNK_ROWS - 1) // CHUNK_ROWS
    for part in range((chunks + per_part - 1) // per_part):
        path = folder / f"part-{part:05d}.parquet"
        if path.exists():
            continue
        temporary = folder / f".{path.name}.tmp"
        writer = None
        for index in range(part * per_part, min(chunks, (part + 1) * per_part)):
            rows = min(CHUNK_ROWS, persons - index * CHUNK_ROWS)
            table = census_chunk(SEED, index, rows)
            if writer is None:
                writer = pq.ParquetWriter(temporary, table.schema)
            writer.write_table(table, row_group_size=min(rows, 256 * 1024))
        writer.close()
        os.replace(temporary, path)
        done = min(persons, (part + 1) * part_persons)
        progress(f"synthetic census: {done:,} / {persons:,} persons")
    return folder


def _settings(folder: Path, driver_memory: str) -> list[str]:
    return [
        f"spark.hadoop.fs.viewfs.mounttable.{CLUSTER}.link./{MOUNT}=file://{folder}",
        f"spark.driver.memory={driver_memory}",
    ]


def _jvm_peak_kib() -> int | None:
    """The largest ``VmHWM`` among this process's children (the driver JVM), in KiB."""
    me = str(os.getpid())
    peaks = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2 :].split()[1] != me:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]))
        except (OSError, ValueError):
            continue
    return max(peaks) if peaks else None


def child(arguments) -> None:
    """One run in this process; prints its figures as one JSON line."""
    from dp_pipeline.release.run import Progress, apply_overrides, run_release
    from dp_pipeline.release.spec.load import load_spec

    out = Path(arguments.out)
    settings = _settings(Path(arguments.folder), arguments.driver_memory) + arguments.conf
    uri = str(arguments.folder) if arguments.local else f"viewfs://{CLUSTER}/{MOUNT}"
    spec = apply_overrides(
        load_spec(arguments.spec),
        input_path=uri,
        input_format="parquet",
        output_dir=str(out / "out"),
        ledger_path=str(out / "ledger.sqlite"),
        key_file=str(out / "master.key"),
        engine="spark",
        master=arguments.master,
        spark_conf=settings,
    )
    printer = Progress(quiet=not arguments.verbose)
    marks: list[tuple[float, str]] = []

    def progress(message: str) -> None:
        marks.append((time.perf_counter(), message))
        printer(message)

    figures: dict = {}
    if arguments.child == "private":
        started = time.perf_counter()
        result = run_release(spec, progress=progress)
        timings = dict(result.timings)
        starting = [t for t, m in marks if m.startswith("spark: starting a session")]
        started_ = [t for t, m in marks if m.startswith("spark: the JVM's and Spark's own")]
        fingerprinted = [t for t, m in marks if m.startswith("fingerprinted the input")]
        if starting and started_ and fingerprinted:
            # The setup phase's parts, from the progress lines' times: the session's start,
            # Spark's listing and schema check, the fingerprint, then key (before the
            # session), identity and reservation together.
            timings["session"] = started_[0] - starting[0]
            timings["listing"] = fingerprinted[0] - timings["fingerprint"] - started_[0]
            timings["setup, rest"] = (
                timings["setup"] - timings["session"] - timings["listing"] - timings["fingerprint"]
            )
        figures["files"] = len(list(result.output.glob("*.parquet")))
        # When each step began (s from the run's start): the setup phase's parts.
        figures["steps"] = [(round(t - started, 2), m[:60]) for t, m in marks]
    else:
        from bench_release import plain_pipeline

        from dp_pipeline.engines.spark.session.start import release_session as spark_session
        from dp_pipeline.release.spec.spark_conf import parse_conf_arguments

        problems: list[str] = []
        conf = parse_conf_arguments(settings, problems).as_dict()
        started = time.perf_counter()
        spark = spark_session(arguments.master, conf)
        spark.sparkContext.setLogLevel("ERROR")
        session = time.perf_counter() - started
        try:
            timings = plain_pipeline(spark, spec, uri, out / "plain", arguments.plain_cache)
        finally:
            spark.stop()
        timings["session"] = session
        timings["total"] += session
        figures["files"] = len(list((out / "plain").glob("*.parquet")))
    figures["wall"] = time.perf_counter() - started
    figures["timings"] = timings
    figures["python_peak_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    figures["jvm_peak_kib"] = _jvm_peak_kib()  # the JVM outlives the stopped session
    print(json.dumps(figures))


def _row(name: str, runs: list[dict]) -> dict:
    best = min(runs, key=lambda r: r["timings"]["total"])
    return {
        "name": name,
        "timings": best["timings"],
        "python": min(r["python_peak_kib"] for r in runs) / 1024,
        "jvm": min((r["jvm_peak_kib"] or 0) for r in runs) / 1024,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000_000)
    parser.add_argument("--part-persons", type=int, default=10_000_000)
    parser.add_argument("--data", default=str(ROOT / ".bench_cache" / "scale"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="8g", help="spark.driver.memory of both runs")
    parser.add_argument("--spec", default=str(ROOT / "conf" / "census_demo.toml"))
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds")
    parser.add_argument(
        "--only", choices=("private", "plain"), help="run one pipeline (the other's figures: –)"
    )
    parser.add_argument("--plain-cache", action="store_true", help="plain: cache the input first")
    parser.add_argument(
        "--conf", action="append", default=[], help="KEY=VALUE: one more Spark setting of both"
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="read the folder by its local path, not through viewfs:// (the Parquet pass)",
    )
    parser.add_argument("--generate-only", action="store_true", help="write the sample, exit")
    parser.add_argument("--verbose", action="store_true", help="the runs' progress lines")
    parser.add_argument("--child", choices=("private", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.child:
        child(arguments)
        return 0

    from dp_pipeline.release.run import Progress

    progress = Progress()
    data = Path(arguments.data)
    folder = sample_folder(data, arguments.persons, arguments.part_persons, progress)
    files = sorted(folder.glob("*.parquet"))
    size = sum(p.stat().st_size for p in files)
    progress(f"input: {len(files)} Parquet file(s), {size / 2**30:.2f} GiB")
    if arguments.generate_only:
        return 0
    names = [arguments.only] if arguments.only else ["private", "plain"]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    loads = [os.getloadavg()[0]]
    environment = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'bench'}")
    scratch = Path(tempfile.mkdtemp(prefix="dp_scale_", dir=arguments.data))
    try:
        for round_ in range(arguments.rounds):
            for name in names:
                out = scratch / f"{name}-{round_}"
                out.mkdir()
                command = [sys.executable, __file__, "--child", name, "--folder", str(folder)]
                command += ["--out", str(out), "--master", arguments.master]
                command += ["--driver-memory", arguments.driver_memory, "--spec", arguments.spec]
                command += ["--plain-cache"] * arguments.plain_cache
                command += ["--local"] * arguments.local
                command += [f"--conf={setting}" for setting in arguments.conf]
                command += ["--verbose"] * arguments.verbose
                done = subprocess.run(
                    command, env=environment, capture_output=True, text=True, check=False
                )
                sys.stderr.write(done.stderr if arguments.verbose or done.returncode else "")
                if done.returncode:
                    raise SystemExit(f"{name} run failed ({done.returncode})")
                runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
                loads.append(os.getloadavg()[0])
                print(f"round {round_ + 1} {name}: {runs[name][-1]}", file=sys.stderr)
                shutil.rmtree(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    rows = [_row(name, found) for name, found in runs.items()]
    print()
    print(
        f"{arguments.persons:,} persons in {len(files)} Parquet file(s) ({size / 2**30:.2f} GiB) "
        f"read {'by local path' if arguments.local else 'through viewfs://'}, Spark "
        f"{arguments.master}, spark.driver.memory {arguments.driver_memory}"
        f"{''.join(', ' + setting for setting in arguments.conf)}; fastest of "
        f"{arguments.rounds} round(s), one process a run; "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    phases = ["plan", "session", "listing", "fingerprint", "setup, rest", "setup", "read"]
    phases += ["aggregate", "noise"]
    phases += ["postprocess", "write", "total"]
    print("| phase (s) | " + " | ".join(r["name"] for r in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for phase in phases:
        cells = []
        for row in rows:
            value = row["timings"].get(phase)
            cells.append(f"{value:.2f}" if value is not None else "–")
        print(f"| {phase} | " + " | ".join(cells) + " |")
    for label, key in (("Python", "python"), ("JVM", "jvm")):
        peaks = " | ".join(f"{r[key]:.0f}" for r in rows)
        print(f"| driver peak RSS, {label} (MiB) | {peaks} |")
    found = {r["name"]: r["timings"] for r in rows}
    if "private" in found:
        private = found["private"]
        print(
            f"setup (key, session start, listing, fingerprint, identity, reservation) / total "
            f"= {private['setup'] / private['total']:.3f} (goal < 0.10)"
        )
    if len(found) == 2:
        private, plain = found["private"], found["plain"]
        ratio = private["total"] / plain["total"]
        print(f"total ratio private / plain = {ratio:.2f} (goal <= 1.0)")
        if "session" in private:
            without = (private["total"] - private["session"]) / (plain["total"] - plain["session"])
            print(f"ratio without either session's start = {without:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
