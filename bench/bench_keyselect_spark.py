"""Private key selection at Spark scale, side by side in one run: a plain Spark pipeline,
ours (`dp_pipeline.keyselect.spark.select_keys_spark`) and PipelineDP 0.3 on Spark.

Run (repository root; PipelineDP in its own virtualenv, e.g.
``python3 -m venv PDP && PDP/bin/pip install pipeline-dp==0.3.1 pyspark``):

    PYTHONPATH=. python bench/bench_keyselect_spark.py --rows 10000000 --keys 1000000 \
        --pipelinedp-python PDP/bin/python

Data (numpy, test data only): ROWS rows of (unit, key) integers; every one of KEYS keys
appears at least once and the other rows draw keys from a Zipf(1.1) law over 1..KEYS;
units are uniform over ROWS/10 values (about 10 rows per unit). Spark local mode on
CORES cores; each pipeline reads the same Parquet file, cached before timing, and is
materialized by a ``count`` of its released keys:

(a) plain: the distinct (unit, key) pairs, each unit's MAX_CELLS pairs of smallest
    xxhash64 (a window by unit), the distinct units per key, keys with at least the
    same threshold as ours (a fixed threshold, no noise);
(b) ours: `select_keys_spark` with the default Laplace plan at (ε, δ) and MAX_CELLS (the
    policy with the smaller threshold: the truncated geometric per key or the threshold);
(c) PipelineDP: ``select_partitions`` (truncated geometric) at the same (ε, δ) and
    ``max_partitions_contributed = MAX_CELLS`` (`bench/pipelinedp_select.py`).

What each figure times: the query alone, from the cached input to the count of released
keys. Not timed: generating and writing the data, starting the JVM (each process starts
its session first and warms it with the cache), planning. Each pipeline runs REPEATS
times, (a) and (b) alternating in one session, (c) in its own process and session; the
best wall time and the least CPU time of each are kept. CPU is that of the driver, its
JVM and its Python workers together (`bench/bench_keyselect_cpu.py`, from /proc): on a
loaded machine the CPU ratio is the figure to trust. Prints the times, the keys kept,
the ratios and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
from bench_keyselect_cpu import tree_cpu_seconds
from pyspark.sql import Window
from pyspark.sql import functions as sf

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.plan import plan_selection
from dp_pipeline.keyselect.spark import select_keys_spark
from dp_pipeline.randomness import MasterKey
from dp_pipeline.spark import local_session


def dataset(rows: int, keys: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1, dtype=float) ** 1.1
    cdf = np.cumsum(weights / weights.sum())
    drawn = np.minimum(np.searchsorted(cdf, rng.random(rows - keys)), keys - 1)
    key = np.concatenate([np.arange(keys), drawn]).astype(np.int64)
    rng.shuffle(key)
    unit = rng.integers(0, max(rows // 10, 1), rows, dtype=np.int64)
    return pd.DataFrame({"unit": unit, "key": key + 1})


def plain(frame, max_cells: int, threshold: int):
    pairs = frame.select("unit", "key").distinct()
    order = Window.partitionBy("unit").orderBy(sf.xxhash64("unit", "key"))
    kept = pairs.withColumn("rank", sf.row_number().over(order)).where(sf.col("rank") <= max_cells)
    counts = kept.groupBy("key").agg(sf.count("*").alias("units"))
    return counts.where(sf.col("units") >= threshold).select("key")


def timed(job) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process tree) of one run of ``job``."""
    cpu, start = tree_cpu_seconds(), time.perf_counter()
    job()
    return time.perf_counter() - start, tree_cpu_seconds() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--epsilon", default="1")
    parser.add_argument("--delta", default="1/1000000")
    parser.add_argument("--max-cells", type=int, default=4)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--pipelinedp-python", help="python of a venv with pipeline-dp 0.3")
    args = parser.parse_args()
    load_before = os.getloadavg()
    plan = plan_selection(
        noise="laplace", epsilon=args.epsilon, delta=args.delta, max_cells=args.max_cells
    )
    master = MasterKey(os.urandom(32))
    selection, salt = (
        SelectionKey.derive(master, "bench", "keys"),
        BoundingSalt.derive(master, "bench", "keys"),
    )
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "rows.parquet")
        dataset(args.rows, args.keys, args.seed).to_parquet(path, index=False)
        spark = local_session(args.cores, driver_memory="4g")
        spark.sparkContext.setLogLevel("ERROR")
        frame = spark.read.parquet(path).cache()
        frame.count()
        kept: dict[str, int] = {}
        pipelines = {
            "plain": lambda: plain(frame, args.max_cells, plan.threshold),
            "ours": lambda: select_keys_spark(
                frame,
                key="key",
                privacy_unit="unit",
                plan=plan,
                selection_key=selection,
                salt=salt,
            ),
        }
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in pipelines}
        for _ in range(args.repeats):
            for name, build in pipelines.items():

                def job(name=name, build=build):
                    kept[name] = build().count()

                runs[name].append(timed(job))
        seconds = {name: min(wall for wall, _ in done) for name, done in runs.items()}
        cpu = {name: min(used for _, used in done) for name, done in runs.items()}
        spark.stop()
        for name in seconds:
            print(f"{name:>10}: {seconds[name]:8.1f} s  keys kept {kept[name]}", flush=True)
        if args.pipelinedp_python:
            script = Path(__file__).with_name("pipelinedp_select.py")
            delta = float(Fraction(args.delta))
            out = subprocess.run(
                [
                    args.pipelinedp_python,
                    str(script),
                    path,
                    str(args.cores),
                    args.epsilon,
                    repr(delta),
                    str(args.max_cells),
                    str(args.repeats),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode:
                raise SystemExit(f"PipelineDP failed:\n{out.stderr[-3000:]}")
            line = json.loads(out.stdout.strip().splitlines()[-1])
            seconds["pipelinedp"], kept["pipelinedp"] = line["seconds"], line["kept"]
            cpu["pipelinedp"] = line["cpu"]
    print(
        f"rows={args.rows} keys={args.keys} cores={args.cores} epsilon={args.epsilon} "
        f"delta={args.delta} max_cells={args.max_cells} threshold={plan.threshold} "
        f"policy={plan.policy}"
    )
    for name in seconds:
        print(
            f"{name:>10}: wall {seconds[name]:8.1f} s  cpu {cpu[name]:8.1f} s  "
            f"keys kept {kept[name]}"
        )
    print(
        f"ours/plain = {seconds['ours'] / seconds['plain']:.2f} wall, "
        f"{cpu['ours'] / cpu['plain']:.2f} cpu"
    )
    if "pipelinedp" in seconds:
        print(
            f"pipelinedp/ours = {seconds['pipelinedp'] / seconds['ours']:.2f} wall, "
            f"{cpu['pipelinedp'] / cpu['ours']:.2f} cpu"
        )
        print(f"keys kept ours/pipelinedp = {kept['ours'] / max(kept['pipelinedp'], 1):.3f}")
    print(f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
