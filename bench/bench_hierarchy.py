"""Benchmark: what the hierarchy check costs the aggregation of the demo's combined tables.

    PYTHONPATH=. python bench/bench_hierarchy.py --persons 2000000 --rounds 3

The five count tables conf/census_demo.toml makes consistent are aggregated (read,
code, bound, aggregate; no noise) by one engine path, once with the rule that drops
rows breaking the county -> state mapping (what a release runs) and once without
it, alternating, on the same synthetic census Parquet file (generated once and
cached, not timed). Prints the fastest of ``--rounds`` runs of each and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dp_pipeline.datasets.synthetic import cached_census_sample
from dp_pipeline.engines.backend import aggregate
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.plan.queries import table_spec
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]


def combined_specs(spec) -> tuple[list, list]:
    """(the combined tables' queries with the hierarchy rule, the same without it)."""
    plan = plan_release(spec)
    master = MasterKey.from_hex("77" * 32)
    checked = [
        table_spec(spec, p.table, p.mechanism, master)
        for p in plan.tables
        if p.table.name in spec.postprocess.tables
    ]
    plain = [
        dataclasses.replace(q, query=dataclasses.replace(q.query, hierarchy=None)) for q in checked
    ]
    return checked, plain


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=2_000_000)
    parser.add_argument("--paths", default="pandas,parquet_pass,spark_sql")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--cache", default=str(ROOT / ".bench_cache"))
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after a warm-up)")
    arguments = parser.parse_args(argv)
    path = cached_census_sample(arguments.cache, arguments.persons, 2026)
    spec = load_spec(ROOT / "conf" / "census_demo.toml")
    checked, plain = combined_specs(spec)
    paths = arguments.paths.split(",")
    inputs = {}
    if "pandas" in paths:
        import pyarrow.parquet as pq

        inputs["pandas"] = pq.read_table(path).to_pandas()
    if {"parquet_pass", "spark_sql"} & set(paths):
        from dp_pipeline.engines.spark import parquet_plan
        from dp_pipeline.engines.spark.session.start import release_session as spark_session

        spark = spark_session(arguments.master)
        one_pass = parquet_plan.ONE_PASS_CELLS
    print(f"{arguments.persons:,} persons, {len(checked)} combined tables, {arguments.master}")
    print("| path | with the check s | without s | ratio |")
    print("|---|---:|---:|---:|")
    for name in paths:
        if name != "pandas":
            parquet_plan.ONE_PASS_CELLS = one_pass if name == "parquet_pass" else 0
            source = spark.read.parquet(str(path))
        else:
            source = inputs["pandas"]
        best = {"with": float("inf"), "without": float("inf")}
        for round_ in range(arguments.rounds + 1):
            for label, specs in (("with", checked), ("without", plain)):
                started = time.perf_counter()
                results = aggregate(source, specs)
                seconds = time.perf_counter() - started
                if round_:  # the first round warms the JVM, the caches and the workers
                    best[label] = min(best[label], seconds)
                del results
        ratio = best["with"] / best["without"]
        print(f"| {name} | {best['with']:.2f} | {best['without']:.2f} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
