"""Benchmark: the demo release on Spark against a plain, non-private Spark pipeline.

    PYTHONPATH=. python bench/bench_release.py --persons 10000000 --master 'local[2]'

Both pipelines run in the same Spark session on the same Parquet input
(synthetic census microdata, generated once and cached, not timed) and
produce the same six tables of conf/census_demo.toml. The private pipeline is
`run_release` (plan, ledger reservation, read, aggregate + noise, atomic write
with privacy_report.json and report.html); the plain one reads, groups by the
same keys, completes the declared domain and writes one Parquet file per
table. Prints phase timings and the ratio private / plain.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa

from dp_pipeline.release.engines import _full_index
from dp_pipeline.release.outputs import write_table
from dp_pipeline.release.run import Progress, apply_overrides, run_release
from dp_pipeline.release.spec import load_spec
from dp_pipeline.release.synthetic import cached_census_sample

ROOT = Path(__file__).resolve().parents[1]


def plain_pipeline(spark, spec, input_path: Path, output: Path) -> dict[str, float]:
    """The same tables without privacy: group by, complete the domain, write Parquet."""
    from pyspark.sql import functions

    timings = {}
    started = time.perf_counter()
    frame = spark.read.parquet(str(input_path)).cache()
    frame.count()
    timings["read"] = time.perf_counter() - started
    started = time.perf_counter()
    tables = {}
    for table in spec.tables:
        if table.statistic == "count":
            value = functions.count(functions.lit(1))
        else:
            column = functions.col(table.value)
            value = functions.sum(
                functions.least(
                    functions.greatest(column, functions.lit(table.lower)),
                    functions.lit(table.upper),
                )
            )
        grouped = frame.groupBy(*table.keys).agg(value.alias("value")).toPandas()
        full = grouped.set_index(list(table.keys))["value"].reindex(
            _full_index(spec, table.keys), fill_value=0
        )
        tables[table.name] = full.reset_index()
    timings["aggregate_noise"] = time.perf_counter() - started
    started = time.perf_counter()
    output.mkdir(parents=True, exist_ok=True)
    for name, result in tables.items():
        write_table(pa.Table.from_pandas(result, preserve_index=False), output / f"{name}.parquet")
    timings["write"] = time.perf_counter() - started
    frame.unpersist()
    timings["total"] = sum(timings.values())
    return timings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=10_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--spec", default=str(ROOT / "conf" / "census_demo.toml"))
    parser.add_argument("--cache", default=str(ROOT / ".bench_cache"))
    arguments = parser.parse_args(argv)

    from dp_pipeline.release.engines import spark_session

    progress = Progress()
    input_path = cached_census_sample(arguments.cache, arguments.persons, 2026, progress)
    spark = spark_session(arguments.master)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            scratch = Path(scratch)
            spec = apply_overrides(
                load_spec(arguments.spec),
                input_path=str(input_path),
                output_dir=str(scratch / "out"),
                ledger_path=str(scratch / "ledger.sqlite"),
                key_file=str(scratch / "key"),
                engine="spark",
                master=arguments.master,
            )
            # Warm the JVM and the file cache so neither pipeline pays for it alone.
            spark.read.parquet(str(input_path)).count()
            plain = plain_pipeline(spark, spec, input_path, scratch / "plain")
            private = run_release(spec, progress=progress, spark=spark).timings
    finally:
        spark.stop()

    print()
    print(f"demo release, {arguments.persons:,} persons, Spark {arguments.master}")
    print(f"{'phase':<18}{'private (s)':>12}{'plain (s)':>12}{'ratio':>8}")
    for phase in ("plan", "setup", "read", "aggregate_noise", "write", "total"):
        mine, theirs = private.get(phase, 0.0), plain.get(phase)
        ratio = f"{mine / theirs:.2f}" if theirs else "–"
        shown = f"{theirs:.2f}" if theirs is not None else "–"
        print(f"{phase:<18}{mine:>12.2f}{shown:>12}{ratio:>8}")
    print(f"planning (accountant) {private['plan']:.3f} s (goal < 1 s)")
    print(f"total ratio private / plain = {private['total'] / plain['total']:.2f} (goal <= 1.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
