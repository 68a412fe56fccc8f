"""Spark DP selection: the same result and attrs as the pandas engine for the same key."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import MasterKey

KEY = MasterKey(bytes(range(11, 43)))
COMMON = dict(key=KEY, release_id="2026-11", table="sel", privacy_unit=None)


def people(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(5)  # test data only
    frame = pd.DataFrame(
        {
            "age": rng.integers(0, 90, n),
            "income": rng.gamma(2.0, 15000.0, n),
            "region": rng.choice(["n", "s", "e", "w", "z"], n, p=[0.4, 0.3, 0.15, 0.1, 0.05]),
            "person": rng.integers(0, n // 3, n),
        }
    )
    frame.loc[[2, 4], "income"] = np.nan
    frame.loc[6, "income"] = 10.0**7
    return frame


def assert_same_release(spark_result: pd.DataFrame, pandas_result: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(spark_result, pandas_result, check_dtype=False)
    assert spark_result.attrs["dp"] == pandas_result.attrs["dp"]  # info and diagnostics


def test_spark_selections_equal_pandas_for_the_same_key(spark):
    from dp_pipeline.selection import spark as spark_selection

    local = people()
    df = spark.createDataFrame(local)
    quantile = dict(bounds=(0, 200000), granularity=500, epsilon=1, **COMMON)
    assert_same_release(
        spark_selection.dp_quantile(df, "income", "0.75", **quantile),
        local.dp.quantile("income", "0.75", **quantile),
    )
    median = dict(bounds=(0, 100), granularity="1/2", epsilon="0.5", **COMMON)
    assert_same_release(
        spark_selection.dp_median(df, "age", **median), local.dp.median("age", **median)
    )
    peeling = dict(
        COMMON,
        candidates=["n", "s", "e", "w", "z", "x"],
        epsilon=2,
        privacy_unit="person",
        max_candidates=2,
    )
    assert_same_release(
        spark_selection.dp_top_k(df, "region", 3, **peeling),
        local.dp.top_k("region", 3, **peeling),
    )
    one_shot = dict(candidates=range(90), epsilon=1, method="one_shot", **COMMON)
    assert_same_release(
        spark_selection.dp_top_k(df, "age", 4, **one_shot),
        local.dp.top_k("age", 4, **one_shot),
    )


def test_spark_bad_input_names_the_column(spark):
    from dp_pipeline.selection import spark as spark_selection

    df = spark.createDataFrame(people(30))
    with pytest.raises(ValueError, match=r"column 'income': some rows hold null, NaN"):
        spark_selection.dp_median(
            df, "income", bounds=(0, 9), granularity=1, epsilon=1, on_invalid="error", **COMMON
        )
    with pytest.raises(TypeError, match="quantile column 'region' has Spark type string"):
        spark_selection.dp_median(df, "region", bounds=(0, 9), granularity=1, epsilon=1, **COMMON)
    with pytest.raises(ValueError, match="k = 9 is larger than the number of candidates"):
        spark_selection.dp_top_k(df, "region", 9, candidates=["n", "s"], epsilon=1, **COMMON)
