"""Benchmark: the driver's peak memory of a Spark release post-processed on Spark vs on the driver.

    PYTHONPATH=. python bench/bench_release_memory.py --persons 1000000 --rounds 2

The release is conf/census_demo.toml with one more combined table,
``county_age_sex_race`` (3143 x 116 x 2 x 7 = 5,104,232 cells; 5.87 M combined
cells in all), on a Parquet input of synthetic persons (generated once and
cached, not timed; a real input, so no truth is carried). Each run is its own
process, so its peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``: the
Python driver only; the JVM is a child process with its own heap, capped by
``spark.driver.memory``) is that release's:

- ``kept on Spark``: `DRIVER_POSTPROCESS_CELLS` lowered below the combined cells,
  so the combined tables are noised, made consistent and read back by the
  writer on Spark, one row group of one table at a time;
- ``driver``: the limit raised, so every table is collected and made
  consistent on the driver (`make_consistent`), then written whole.

Rounds alternate the two; each figure is the fastest / smallest of its rounds,
and the table prints ratios against the driver run of the same invocation.
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
MODES = {"kept on Spark": 1_000_000, "driver": 10**12}  # DRIVER_POSTPROCESS_CELLS
EXTRA_TABLE = """
[[tables]]
name = "county_age_sex_race"     # 3143 x 116 x 2 x 7 = 5,104,232 cells
keys = ["county", "age", "sex", "race"]
statistic = "count"
share = "1/4"
"""


def write_spec(folder: Path) -> Path:
    """The demo spec with the extra combined table (county_age_sex's share halved for it)."""
    text = (ROOT / "conf" / "census_demo.toml").read_text()
    marker = 'keys = ["county", "age", "sex"]\nstatistic = "count"\nshare = "1/2"'
    if marker not in text:
        raise SystemExit("conf/census_demo.toml changed: county_age_sex's share not found")
    text = text.replace(marker, marker.replace('"1/2"', '"1/4"')) + EXTRA_TABLE
    shutil.copy(ROOT / "conf" / "census_demo_counties.csv", folder / "census_demo_counties.csv")
    path = folder / "memory.toml"
    path.write_text(text)
    return path


def child(arguments) -> None:
    """One release in this process; prints its figures as one JSON line."""
    import dp_pipeline.release.plan.postprocess as postprocess_checks
    from dp_pipeline.release.run import Progress, apply_overrides, run_release
    from dp_pipeline.release.spec.load import load_spec

    postprocess_checks.DRIVER_POSTPROCESS_CELLS = MODES[arguments.child]
    spec = apply_overrides(
        load_spec(arguments.spec_file),
        input_path=arguments.input,
        output_dir=str(Path(arguments.out) / "out"),
        ledger_path=str(Path(arguments.out) / "ledger.sqlite"),
        key_file=str(Path(arguments.out) / "key"),
        engine="spark",
        master=arguments.master,
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    printer = Progress(quiet=not arguments.verbose)

    def progress(message: str) -> None:  # each step with the peak so far (--verbose)
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        printer(f"{message} [driver peak {peak_mib:.0f} MiB]")

    result = run_release(spec, progress=progress)
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sizes = {p.name: p.stat().st_size for p in sorted(result.output.glob("*.parquet"))}
    print(
        json.dumps(
            {
                "peak_kib": peak,
                "before_kib": before,
                "wall": wall,
                "postprocess": result.timings.get("postprocess", 0.0),
                "write": result.timings.get("write", 0.0),
                "bytes": sizes,
                "digest": _digest(result.output),
            }
        )
    )


def _digest(folder: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.parquet")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--cache", default=str(ROOT / ".bench_cache"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--verbose", action="store_true", help="the releases' progress lines")
    parser.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--spec-file", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.child:
        child(arguments)
        return 0

    from dp_pipeline.datasets.synthetic import cached_census_sample
    from dp_pipeline.engines.spark.session.start import local_session
    from dp_pipeline.release.run import Progress

    input_path = cached_census_sample(arguments.cache, arguments.persons, 2026, Progress())
    memory = local_session.__kwdefaults__["driver_memory"]
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    environment.setdefault(
        "DP_PIPELINE_MASTER_KEY", "a7d393ef6fecbbd9712b118e67aee439871402fd15b4ba05fd5f5db5b4d22ede"
    )
    with tempfile.TemporaryDirectory() as scratch:
        spec_file = write_spec(Path(scratch))
        for round_ in range(arguments.rounds):
            for mode in MODES:
                out = Path(scratch) / f"{mode.split()[0]}-{round_}"
                command = [sys.executable, __file__, "--child", mode, "--spec-file"]
                command += [str(spec_file), "--input", str(input_path), "--out", str(out)]
                command += ["--master", arguments.master] + ["--verbose"] * arguments.verbose
                done = subprocess.run(
                    command, env=environment, capture_output=True, text=True, check=False
                )
                if done.returncode:
                    sys.stderr.write(done.stderr)
                    raise SystemExit(f"{mode} run failed ({done.returncode})")
                if arguments.verbose:
                    sys.stderr.write(done.stderr)
                runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"round {round_ + 1} {mode}: {runs[mode][-1]}", file=sys.stderr)
    best = {
        mode: {
            "peak": min(r["peak_kib"] for r in rounds) / 1024,
            "before": min(r["before_kib"] for r in rounds) / 1024,
            "wall": min(r["wall"] for r in rounds),
            "postprocess": min(r["postprocess"] for r in rounds),
        }
        for mode, rounds in runs.items()
    }
    digests = {r["digest"] for rounds in runs.values() for r in rounds}
    base = best["driver"]
    print()
    print(
        f"{arguments.persons:,} persons, 5,868,108 combined cells, Spark {arguments.master}, "
        f"spark.driver.memory {memory} (JVM heap, not in the figures); best of "
        f"{arguments.rounds} round(s); load {os.getloadavg()[0]:.1f}"
    )
    print("| path | driver peak RSS MiB | / driver | at start MiB | release s | / driver |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, figures in best.items():
        print(
            f"| {mode} | {figures['peak']:.0f} | {figures['peak'] / base['peak']:.2f} | "
            f"{figures['before']:.0f} | {figures['wall']:.1f} | "
            f"{figures['wall'] / base['wall']:.2f} |"
        )
    print(f"published files identical across all runs: {'yes' if len(digests) == 1 else 'NO'}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
