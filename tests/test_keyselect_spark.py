"""Key selection on Spark: a ``mapInPandas`` over the per-key counts releases exactly the
keys pandas releases, whatever the partitioning (each key's draw from its own stream)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.keyselect import PartitionSelector, SelectionKey, plan_selection, select_keys
from dp_pipeline.keyselect.counts import distinct_unit_counts
from dp_pipeline.randomness import MasterKey

pytestmark = pytest.mark.spark

MASTER = MasterKey(bytes(range(80, 112)))
SELECTION = SelectionKey.derive(MASTER, "release", "spark table")
SALT = BoundingSalt.derive(MASTER, "release", "spark table")


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
    counts = distinct_unit_counts(
        df, key="key", privacy_unit="unit", max_cells=3, salt=SALT, selection_key=SELECTION
    )
    table = pd.DataFrame({"key": counts.keys.astype(str), "n": counts.counts})
    selector = PartitionSelector("key", "n", plan, SELECTION)
    for partitions in (1, 3, 7):
        frame = spark.createDataFrame(table).repartition(partitions)
        released = frame.mapInPandas(selector, schema="key string, n long").collect()
        assert sorted(row["key"] for row in released) == expected.keys.tolist()
