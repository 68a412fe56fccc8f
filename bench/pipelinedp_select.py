"""PipelineDP's private partition selection on Spark (runs in PipelineDP's own venv).

    /path/to/pipelinedp-venv/bin/python bench/pipelinedp_select.py ROWS.parquet CORES \
        EPSILON DELTA MAX_CELLS [REPEATS]
    /path/to/pipelinedp-venv/bin/python bench/pipelinedp_select.py --probabilities \
        EPSILON DELTA MAX_CELLS LARGEST_COUNT

First form: reads the (unit, key) rows, caches them (reading and decoding the file is not
the selection, nor is starting the JVM), then runs ``DPEngine.select_partitions`` on the
RDD backend (truncated geometric strategy, PipelineDP's default, the optimal one for one
key per unit) with ``max_partitions_contributed = MAX_CELLS`` at (EPSILON, DELTA) and
counts the selected keys (the count materializes the whole job), REPEATS times. Prints
one JSON line: the best wall time, the least CPU time (this process, its JVM and its
Python workers: `bench/bench_keyselect_cpu.py`) and the keys kept.

Second form: PipelineDP's own probability that a key with n distinct units is kept
(PyDP's ``probability_of_keep``, the strategy ``select_partitions`` builds) for
n = 0..LARGEST_COUNT, as one JSON list (`bench/bench_keyselect.py` compares expected
keys kept with it).

PipelineDP 0.3 pins its own dependencies, hence the separate virtualenv; nothing here
imports dp_pipeline. Called by ``bench/bench_keyselect_spark.py --pipelinedp-python``.
"""

from __future__ import annotations

import json
import os
import sys
import time


def probabilities(epsilon: str, delta: str, max_cells: str, largest: str) -> int:
    from pydp.algorithms import partition_selection

    strategy = partition_selection.create_partition_strategy(
        "truncated_geometric", float(epsilon), float(delta), int(max_cells)
    )
    print(json.dumps([strategy.probability_of_keep(n) for n in range(int(largest) + 1)]))
    return 0


def main() -> int:
    if sys.argv[1] == "--probabilities":
        return probabilities(*sys.argv[2:])
    path, cores, epsilon, delta, max_cells, *rest = sys.argv[1:]
    repeats = int(rest[0]) if rest else 1
    # The workers must run this venv's interpreter (PipelineDP is installed there only).
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import pipeline_dp
    from bench_keyselect_cpu import tree_cpu_seconds
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", str(2 * int(cores)))
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = spark.read.parquet(path).rdd.map(lambda row: (row[0], row[1]))
    rows.cache().count()
    walls, cpus, kept = [], [], 0
    for _ in range(repeats):
        cpu, start = tree_cpu_seconds(), time.perf_counter()
        accountant = pipeline_dp.NaiveBudgetAccountant(
            total_epsilon=float(epsilon), total_delta=float(delta)
        )
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.SparkRDDBackend(spark.sparkContext))
        params = pipeline_dp.SelectPartitionsParams(max_partitions_contributed=int(max_cells))
        extractors = pipeline_dp.DataExtractors(
            privacy_id_extractor=lambda row: row[0], partition_extractor=lambda row: row[1]
        )
        selected = engine.select_partitions(rows, params, extractors)
        accountant.compute_budgets()
        kept = selected.count()
        walls.append(time.perf_counter() - start)
        cpus.append(tree_cpu_seconds() - cpu)
    print(json.dumps({"seconds": min(walls), "cpu": min(cpus), "kept": kept}))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
