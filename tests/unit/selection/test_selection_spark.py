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


def assert_same_release(selection, df, pandas_result: pd.DataFrame) -> None:
    """The Spark selection of ``df``, by ``df.transform`` and collected, is ``df.dp``'s."""
    rows = df.transform(selection).toPandas()
    pd.testing.assert_frame_equal(rows, pandas_result, check_dtype=False)
    assert selection.info == pandas_result.dp.info  # info and diagnostics
    collected = selection.collect(df)
    pd.testing.assert_frame_equal(collected, pandas_result)
    assert collected.attrs["dp"] == pandas_result.attrs["dp"]


def test_spark_selections_equal_pandas_for_the_same_key(spark):
    from dp_pipeline.spark import dp_median, dp_quantile, dp_top_k

    local = people()
    df = spark.createDataFrame(local)
    quantile = dict(bounds=(0, 200000), granularity=500, epsilon=1, **COMMON)
    assert_same_release(
        dp_quantile("income", "0.75", **quantile),
        df,
        local.dp.quantile("income", "0.75", **quantile),
    )
    median = dict(bounds=(0, 100), granularity="1/2", epsilon="0.5", **COMMON)
    assert_same_release(dp_median("age", **median), df, local.dp.median("age", **median))
    peeling = dict(
        COMMON,
        candidates=["n", "s", "e", "w", "z", "x"],
        epsilon=2,
        privacy_unit="person",
        max_candidates=2,
    )
    assert_same_release(
        dp_top_k("region", 3, **peeling), df, local.dp.top_k("region", 3, **peeling)
    )
    one_shot = dict(candidates=range(90), epsilon=1, method="one_shot", **COMMON)
    assert_same_release(dp_top_k("age", 4, **one_shot), df, local.dp.top_k("age", 4, **one_shot))


def test_spark_bad_input_names_the_column(spark):
    from dp_pipeline.spark import dp_median, dp_top_k

    df = spark.createDataFrame(people(30))
    selection = dp_median("region", bounds=(0, 9), granularity=1, epsilon=1, **COMMON)
    assert "SparkDPSelection(median of 'region'" in repr(selection)  # nothing read yet
    with pytest.raises(ValueError, match=r"column 'income': some rows hold null, NaN"):
        df.transform(
            dp_median(
                "income", bounds=(0, 9), granularity=1, epsilon=1, on_invalid="error", **COMMON
            )
        )
    with pytest.raises(TypeError, match="quantile column 'region' has Spark type string"):
        df.transform(dp_median("region", bounds=(0, 9), granularity=1, epsilon=1, **COMMON))
    with pytest.raises(ValueError, match="k = 9 is larger than the number of candidates"):
        dp_top_k("region", 9, candidates=["n", "s"], epsilon=1, **COMMON)


def test_the_old_spark_selection_call_says_how_to_write_the_new_one():
    pytest.importorskip("pyspark")
    from dp_pipeline.selection import spark as spark_selection

    with pytest.raises(TypeError) as moved:
        spark_selection.dp_quantile  # noqa: B018  (the attribute access is the call)
    message = str(moved.value)
    assert "dp_pipeline.selection.spark.dp_quantile(df, column, q, ...) is now" in message
    assert "df.transform(dp_quantile(column, q, ...))" in message
    with pytest.raises(AttributeError):
        spark_selection.no_such_name  # noqa: B018
