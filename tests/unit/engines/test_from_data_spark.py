"""``domains={key: FROM_DATA}`` on Spark: the selection streamed (`select_keys_spark`), the
statistic on the released keys' rows; the same keys and values as pandas, byte for byte."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dp_pipeline import FROM_DATA, MasterKey
from dp_pipeline.errors import DPValueError

pytestmark = pytest.mark.spark

KEY = MasterKey(bytes(range(50, 82)))
LABELS = dict(key=KEY, release_id="open", table="spark urls", privacy_unit="user")
SELECT = dict(selection_epsilon=1, selection_delta=Fraction(1, 10**6), selection_noise="gaussian")


def web_log(rows: int = 5000, seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    url = rng.zipf(1.6, rows) % 150
    return pd.DataFrame(
        {
            "user": rng.integers(0, 1500, rows),
            "url": [f"/page/{k}" for k in url],
            "url_id": url.astype(np.int64),
            "ms": rng.integers(0, 1000, rows),
        }
    )


def _same(pandas_result: pd.DataFrame, spark_result: pd.DataFrame, key: str) -> None:
    ordered = spark_result.sort_values(key).reset_index(drop=True)
    assert ordered.columns.tolist() == pandas_result.columns.tolist()
    for column in pandas_result.columns:
        left = pandas_result[column].tolist()
        right = ordered[column].tolist()
        assert left == right, column


@pytest.mark.parametrize("statistic", ["count", "mean"])
def test_spark_releases_the_keys_and_values_pandas_releases(spark, statistic):
    from dp_pipeline.spark import dp_count, dp_mean

    df = web_log()
    value = {} if statistic == "count" else {"column": "ms", "bounds": (0, 1000)}
    arguments = dict(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    expected = getattr(df.dp, statistic)(**value, **arguments)
    query = (dp_count if statistic == "count" else dp_mean)(**value, **arguments)
    assert query.info.key_selection.keys_kept is None  # known before reading: the threshold
    assert query.info.key_selection.threshold == expected.dp.info.key_selection.threshold
    released = spark.createDataFrame(df).repartition(5).transform(query).toPandas()
    _same(expected, released, "url")
    assert query.info.key_selection.keys_kept == len(expected) > 0
    assert query.info.epsilon == expected.dp.info.epsilon


def test_spark_variance_and_integer_keys_match_pandas(spark):
    from dp_pipeline.spark import dp_std

    df = web_log()
    arguments = dict(
        by="url_id",
        domains={"url_id": FROM_DATA},
        bounds=(0, 1000),
        epsilon=1,
        max_cells=3,
        **SELECT,
        **LABELS,
    )
    expected = df.dp.std("ms", **arguments)
    released = dp_std("ms", **arguments).collect(spark.createDataFrame(df))
    _same(expected, released, "url_id")


def test_spark_without_released_keys_gives_an_empty_table(spark):
    from dp_pipeline.spark import dp_count

    df = web_log(rows=20)
    query = dp_count(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    released = spark.createDataFrame(df).transform(query)
    assert released.count() == 0
    assert dict(released.dtypes)["url"] == "string"
    assert query.info.key_selection.keys_kept == 0


def test_spark_refuses_null_keys_under_error(spark):
    from dp_pipeline.spark import dp_count

    df = web_log()
    df.loc[::9, "url"] = None
    query = dp_count(
        by="url",
        domains={"url": FROM_DATA},
        epsilon=1,
        max_cells=2,
        on_invalid="error",
        **SELECT,
        **LABELS,
    )
    with pytest.raises(DPValueError, match=r"^column 'url': some rows have a null key"):
        spark.createDataFrame(df).transform(query)


def test_spark_per_record_selection_and_an_empty_variance_match_pandas(spark):
    from dp_pipeline.spark import dp_count, dp_var

    df = web_log()
    labels = {**LABELS, "privacy_unit": None}
    arguments = dict(by="url", domains={"url": FROM_DATA}, epsilon=1, **SELECT, **labels)
    expected = df.dp.count(**arguments)
    released = spark.createDataFrame(df).transform(dp_count(**arguments)).toPandas()
    _same(expected, released, "url")
    tiny = web_log(rows=20)
    variance = dp_var("ms", bounds=(0, 1000), **arguments)
    empty = spark.createDataFrame(tiny).transform(variance)
    assert empty.count() == 0 and empty.columns == ["url", "count", "var"]
    assert variance.info.key_selection.keys_kept == 0
