"""Key selection on Spark: bounding per partition of whole units, a streamed sum per key
and a ``mapInPandas`` over the per-key totals release exactly the keys pandas releases,
whatever the partitioning (each key's decision from its own stream)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.keyselect import PartitionSelector, SelectionKey, plan_selection, select_keys
from dp_pipeline.keyselect.partitions import PairBounder
from dp_pipeline.keyselect.weighted import plan_weighted_selection, select_weighted_keys
from dp_pipeline.randomness import MasterKey

pytestmark = pytest.mark.spark

MASTER = MasterKey(bytes(range(80, 112)))
SELECTION = SelectionKey.derive(MASTER, "release", "spark table")
SALT = BoundingSalt.derive(MASTER, "release", "spark table")


def spark_selection(spark, df, plan, partitions: int, weights=None) -> list[str]:
    from pyspark.sql import functions as sf  # PySpark only in the spark tier

    bounder = PairBounder("key", "unit", plan.max_cells, SALT, SELECTION, weights)
    pairs = (
        spark.createDataFrame(df)
        .repartition(partitions, "unit")
        .mapInPandas(bounder, schema="key string, weight long")
    )
    totals = pairs.groupBy("key").agg(sf.sum("weight").alias("n"))
    selector = PartitionSelector("key", "n", plan, SELECTION)
    released = totals.mapInPandas(selector, schema="key string, n long").collect()
    return sorted(row["key"] for row in released)


def test_spark_partitions_release_the_same_keys_as_pandas(spark):
    rng = np.random.default_rng(8)
    df = pd.DataFrame(
        {"unit": rng.integers(0, 3000, 9000), "key": [f"m{k}" for k in rng.zipf(1.5, 9000)]}
    )
    plan = plan_selection(noise="laplace", epsilon=1, delta="1/1000000", max_cells=3)
    expected = select_keys(
        df, key="key", privacy_unit="unit", plan=plan, selection_key=SELECTION, salt=SALT
    )
    assert expected.keys.size > 5
    for partitions in (1, 4):
        assert spark_selection(spark, df, plan, partitions) == expected.keys.tolist()
    weighted = plan_weighted_selection(noise="gaussian", epsilon=1, delta="1/1000000", max_cells=3)
    expected = select_weighted_keys(
        df, key="key", privacy_unit="unit", plan=weighted, selection_key=SELECTION, salt=SALT
    )
    assert expected.keys.size > 5
    got = spark_selection(spark, df, weighted, 3, weighted.weights)
    assert got == expected.keys.tolist()
