"""Tumult Analytics' DP counts on the engines benchmark's data (runs in Tumult's own venv).

    /path/to/tumult-venv/bin/python bench/tumult_counts.py PERSONS.parquet CORES QUERY...

Each QUERY is comma-separated key columns with their domain sizes, e.g.
``state:51,age:116,sex:2``. Prints one JSON line per query: the wall time of
``session.evaluate`` plus materializing the result (written to Spark's noop
sink), fastest of two runs (one run above 100,000 cells), with a full-domain
KeySet and zCDP (discrete Gaussian noise), each row one person (``AddOneRow``).
Tumult 0.21 pins PySpark 3.5 and pandas < 2, hence the separate virtualenv;
nothing here imports dp_pipeline. Called by ``bench/bench_engines.py --tumult-python``.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    path, cores, *queries = sys.argv[1:]
    from pyspark.sql import SparkSession

    try:
        from tmlt.analytics import (
            AddOneRow,
            KeySet,
            QueryBuilder,
            RhoZCDPBudget,
            Session,
        )
    except ImportError:  # older layout
        from tmlt.analytics.keyset import KeySet
        from tmlt.analytics.privacy_budget import RhoZCDPBudget
        from tmlt.analytics.protected_change import AddOneRow
        from tmlt.analytics.query_builder import QueryBuilder
        from tmlt.analytics.session import Session

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.driver.memory", "6g")
        .config("spark.sql.shuffle.partitions", str(2 * int(cores)))
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = spark.read.parquet(path)
    for query in queries:
        sizes = {name: int(size) for name, size in (part.split(":") for part in query.split(","))}
        keys = KeySet.from_dict({name: list(range(size)) for name, size in sizes.items()})
        cells = 1
        for size in sizes.values():
            cells *= size
        times = []
        for _ in range(2 if cells <= 100_000 else 1):  # a million-cell run takes minutes
            session = Session.from_dataframe(
                privacy_budget=RhoZCDPBudget(1),
                source_id="persons",
                dataframe=frame,
                protected_change=AddOneRow(),
            )
            start = time.perf_counter()
            query_plan = QueryBuilder("persons").groupby(keys).count()
            result = session.evaluate(query_plan, RhoZCDPBudget(1))
            result.write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - start)
        print(json.dumps({"query": query, "seconds": min(times), "cells": cells}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
