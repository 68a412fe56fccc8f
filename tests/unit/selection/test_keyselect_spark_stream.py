"""`select_keys_spark`: the streamed Spark selection releases exactly the keys pandas
releases (values and types), as a lazy one-column DataFrame, and refuses bad columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.keyselect import SelectionKey, plan_selection, select_keys
from dp_pipeline.keyselect.weighted import plan_weighted_selection, select_weighted_keys
from dp_pipeline.randomness import MasterKey

pytestmark = pytest.mark.spark

MASTER = MasterKey(bytes(range(120, 152)))
SELECTION = SelectionKey.derive(MASTER, "release", "stream table")
SALT = BoundingSalt.derive(MASTER, "release", "stream table")


def data(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"unit": rng.integers(0, 2500, 8000), "site": rng.zipf(1.4, 8000)})


def test_the_streamed_selection_releases_the_pandas_keys_byte_for_byte(spark):
    from dp_pipeline.keyselect.spark import select_keys_spark  # PySpark only in this tier

    df = data(3)
    df["name"] = [f"s{k}" for k in df["site"]]
    df.loc[::97, "name"] = None  # null keys: dropped on both engines
    frame = spark.createDataFrame(df)
    plans = [
        plan_selection(noise="laplace", epsilon=1, delta="1/1000000", max_cells=2),
        plan_weighted_selection(noise="gaussian", epsilon=1, delta="1/1000000", max_cells=3),
    ]
    for plan, column in zip(plans, ("name", "site"), strict=True):
        pick = select_weighted_keys if hasattr(plan, "weights") else select_keys
        expected = pick(
            df, key=column, privacy_unit="unit", plan=plan, selection_key=SELECTION, salt=SALT
        ).keys.tolist()
        assert len(expected) > 5
        for partitions in (None, 3):
            released = select_keys_spark(
                frame,
                key=column,
                privacy_unit="unit",
                plan=plan,
                selection_key=SELECTION,
                salt=SALT,
                partitions=partitions,
            )
            assert released.columns == [column]
            got = sorted(row[column] for row in released.collect())
            assert got == expected
            assert [type(v) for v in got] == [type(v) for v in expected]


def test_bad_columns_are_refused_before_any_job_with_the_field_and_the_fix(spark):
    from dp_pipeline.keyselect.spark import select_keys_spark  # PySpark only in this tier

    frame = spark.createDataFrame(pd.DataFrame({"unit": [1, 2], "x": [0.5, 1.5]}))
    plan = plan_selection(noise="laplace", epsilon=1, delta="1/1000000", max_cells=1)
    common = dict(privacy_unit="unit", plan=plan, selection_key=SELECTION, salt=SALT)
    with pytest.raises(DPTypeError, match=r"^key column 'x' has Spark type double; .*cast"):
        select_keys_spark(frame, key="x", **common)
    with pytest.raises(DPValueError, match=r"^key='site': no such column in the DataFrame$"):
        select_keys_spark(frame, key="site", **common)
    with pytest.raises(DPValueError, match=r"^key='unit': must differ from privacy_unit"):
        select_keys_spark(frame, key="unit", **common)
