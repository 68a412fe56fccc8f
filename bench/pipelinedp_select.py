"""PipelineDP's private partition selection on Spark (runs in PipelineDP's own venv).

    /path/to/pipelinedp-venv/bin/python bench/pipelinedp_select.py ROWS.parquet CORES \
        EPSILON DELTA MAX_CELLS

Reads the (unit, key) rows, runs ``DPEngine.select_partitions`` on the RDD backend
(truncated geometric strategy, PipelineDP's default and the optimal one for one key per
unit) with ``max_partitions_contributed = MAX_CELLS`` at (EPSILON, DELTA), and counts
the selected keys (the count materializes the whole job). Prints one JSON line: the
wall time of that job and the keys kept. PipelineDP 0.3 pins its own dependencies, hence
the separate virtualenv; nothing here imports dp_pipeline. Called by
``bench/bench_keyselect_spark.py --pipelinedp-python``.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    path, cores, epsilon, delta, max_cells = sys.argv[1:]
    # The workers must run this venv's interpreter (PipelineDP is installed there only).
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import pipeline_dp
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
    rows.cache().count()  # reading and decoding the file is not the selection
    start = time.perf_counter()
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
    print(json.dumps({"seconds": time.perf_counter() - start, "kept": kept}))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
