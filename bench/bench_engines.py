"""Engines benchmark: DP counts vs plain group-by counts on census-like person data.

Usage (from the repo root):
    PYTHONPATH=. python bench/bench_engines.py --rows 10000000 --engines pandas,spark

Prints one row per (engine, query): plain time, DP time, ratio, peak memory.
Timings are the fastest of ``--rounds`` wall-clock runs measured in this run
(peak memory: pandas, tracemalloc over the first run; Spark, the JVM's peak
resident set over the runs, reset before each measurement); the plain baseline is
pandas ``groupby().size()`` + reindex to the full domain, or Spark
``groupBy().count()`` written to the ``noop`` sink.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc

import numpy as np
import pandas as pd

from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.query.spec import QuerySpec

SIZES = {"state": 51, "county": 3143, "age": 116, "sex": 2, "race": 7, "hispanic": 2}
QUERIES = {
    "state x age x sex": ["state", "age", "sex"],
    "county x race x hispanic": ["county", "race", "hispanic"],
    "county x age x sex x hispanic": ["county", "age", "sex", "hispanic"],
}


def persons(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only; noise never uses numpy generators
    return pd.DataFrame({name: rng.integers(0, size, rows) for name, size in SIZES.items()})


def spec_for(columns: list[str]) -> QuerySpec:
    return QuerySpec.build(
        "count",
        by=columns,
        domains={c: range(SIZES[c]) for c in columns},
        noise=DiscreteGaussian(100),
        key=MasterKey.from_hex("77" * 32),
        release_id="bench",
        table="_".join(columns),
        privacy_unit=None,
    )


def timed(function, rounds: int):
    """(fastest wall time of ``rounds`` runs, peak traced MiB of the first run).

    The fastest of several runs keeps one-time costs (JIT, Python worker start)
    and a noisy neighbour from landing on one side of a ratio only.
    """
    times = []
    peak = 0.0
    for round_ in range(rounds):
        if round_ == 0:
            tracemalloc.start()
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
        if round_ == 0:
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
    return min(times), peak


def bench_pandas(df: pd.DataFrame, queries, rounds: int):
    rows = []
    for name, columns in queries.items():
        full = pd.MultiIndex.from_product([range(SIZES[c]) for c in columns], names=columns)

        def plain(columns=columns, full=full):
            df.groupby(columns).size().reindex(full, fill_value=0)

        spec = spec_for(columns)
        plain_s, plain_mb = timed(plain, rounds)
        dp_s, dp_mb = timed(lambda spec=spec: run_pandas(df, spec), rounds)
        rows.append(("pandas", name, plain_s, dp_s, plain_mb, dp_mb))
    return rows


def jvm_timed(spark, function, rounds: int):
    """`timed`, with the peak resident memory (MiB) of Spark's JVM over the runs.

    Local mode runs driver and executors in that one JVM; its peak RSS (VmHWM)
    is reset before the run by writing 5 to /proc/<pid>/clear_refs (Linux).
    NaN where that is not possible. Python workers are not included.
    """
    pid = getattr(getattr(spark.sparkContext._gateway, "proc", None), "pid", None)
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as reset:
            reset.write("5")
    except (OSError, TypeError):
        pid = None
    seconds, _ = timed(function, rounds)
    if pid is None:
        return seconds, float("nan")
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return seconds, int(line.split()[1]) / 1024
    return seconds, float("nan")


def bench_spark(df: pd.DataFrame, queries, cores: int, rounds: int):
    from dp_pipeline.spark import local_session, run_spark

    spark = local_session(cores, driver_memory="6g")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "persons.parquet")
        df.to_parquet(path)
        source = spark.read.parquet(path)
        source.groupBy("state").count().collect()  # warm up the JVM and the file cache
        for name, columns in queries.items():
            spec = spec_for(columns)

            def plain(columns=columns):
                source.groupBy(*columns).count().write.format("noop").mode("overwrite").save()

            def private(spec=spec):
                noisy, _ = run_spark(source, spec)
                noisy.write.format("noop").mode("overwrite").save()

            plain_s, plain_mb = jvm_timed(spark, plain, rounds)
            dp_s, dp_mb = jvm_timed(spark, private, rounds)
            rows.append((f"spark local[{cores}]", name, plain_s, dp_s, plain_mb, dp_mb))
    spark.stop()
    return rows


def bench_tumult(df: pd.DataFrame, queries, cores: int, python: str) -> dict[str, float]:
    """Tumult Analytics' seconds per query, run by ``python`` (its own venv) on the same data."""
    import json
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tumult_counts.py")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "persons.parquet")
        df.to_parquet(path)
        arguments = [",".join(f"{c}:{SIZES[c]}" for c in columns) for columns in queries.values()]
        # Tumult's Spark workers must run Tumult's interpreter, not ours.
        environment = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
        finished = subprocess.run(
            [python, script, path, str(cores), *arguments],
            capture_output=True,
            text=True,
            check=False,
            env=environment,
        )
    if finished.returncode != 0:
        print(finished.stderr[-3000:], file=sys.stderr)
        raise RuntimeError(f"{script} failed with status {finished.returncode}")
    seconds = {}
    lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
    for name, line in zip(queries, lines, strict=True):
        seconds[name] = json.loads(line)["seconds"]
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--engines", default="pandas,spark")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--rounds", type=int, default=2, help="runs per measurement (fastest)")
    parser.add_argument(
        "--tumult-python",
        help="python of a virtualenv with tmlt-analytics 0.21: also time Tumult on the same data",
    )
    args = parser.parse_args()
    df = persons(args.rows, args.seed)
    results = []
    engines = args.engines.split(",")
    if "pandas" in engines:
        results += bench_pandas(df, QUERIES, args.rounds)
    if "spark" in engines:
        results += bench_spark(df, QUERIES, args.cores, args.rounds)
    tumult = {}
    if args.tumult_python:
        tumult = bench_tumult(df, QUERIES, args.cores, args.tumult_python)
    print(f"rows={args.rows:,}")
    print("| engine | query | cells | plain s | DP s | DP/plain | plain peak MiB | DP peak MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for engine, name, plain_s, dp_s, plain_mb, dp_mb in results:
        cells = int(np.prod([SIZES[c] for c in QUERIES[name]]))
        print(
            f"| {engine} | {name} | {cells:,} | {plain_s:.2f} | {dp_s:.2f} | "
            f"{dp_s / plain_s:.2f} | {plain_mb:.0f} | {dp_mb:.0f} |"
        )
    if tumult:
        ours = {name: dp_s for engine, name, _, dp_s, _, _ in results if engine.startswith("spark")}
        print()
        print(f"| query | cells | Tumult local[{args.cores}] s | dp_pipeline Spark s | speed-up |")
        print("|---|---:|---:|---:|---:|")
        for name, seconds in tumult.items():
            cells = int(np.prod([SIZES[c] for c in QUERIES[name]]))
            mine = ours.get(name, float("nan"))
            print(f"| {name} | {cells:,} | {seconds:.2f} | {mine:.2f} | {seconds / mine:.1f}x |")


if __name__ == "__main__":
    main()
