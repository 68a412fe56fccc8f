"""var and std on Spark: ``dp_var`` / ``dp_std`` release the bytes ``df.dp`` releases."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import DiscreteGaussian, DPTypeError, MasterKey

pytestmark = pytest.mark.spark

KEY = MasterKey.from_hex("39" * 32)


def people(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(7)  # test data only
    height = rng.normal(170, 20, n)
    height[::17] = np.nan  # invalid values: dropped alike by both engines
    return pd.DataFrame(
        {
            "person_id": rng.integers(0, 120, n),
            "sex": rng.choice(["F", "M"], n),
            "region": rng.integers(0, 3, n),
            "height": height,
        }
    )


@pytest.mark.parametrize("statistic", ["var", "std"])
def test_spark_and_pandas_release_the_same_bytes(spark, statistic):
    from dp_pipeline.spark import SparkDPVariance, dp_std, dp_var

    local = people()
    arguments = dict(
        bounds=(120, 220),
        granularity="1/2",
        by=["sex", "region"],
        domains={"sex": ["F", "M"], "region": range(3)},
        privacy_unit="person_id",
        max_cells=2,
        max_per_cell=2,
        key=KEY,
        release_id="r",
        table="t",
    )
    budget = {"epsilon": 1, "delta": Fraction(1, 10**6)}
    on_pandas = getattr(local.dp, statistic)("height", **arguments, **budget)
    query = (dp_var if statistic == "var" else dp_std)("height", **arguments, **budget)
    assert isinstance(query, SparkDPVariance)
    assert query.info.rho == on_pandas.attrs["dp"].rho
    on_spark = query(spark.createDataFrame(local)).toPandas()
    assert list(on_spark.columns) == list(on_pandas.columns)
    for column in on_pandas.columns:
        expected = on_pandas[column].astype(object).tolist()
        assert on_spark[column].astype(object).tolist() == expected, column
    assert query.diagnostics == on_pandas.attrs["dp"].info.diagnostics
    assert query.diagnostics.rows_invalid_value > 0


def test_a_non_numeric_spark_column_is_refused_naming_it(spark):
    from dp_pipeline.spark import dp_var

    df = spark.createDataFrame(people().assign(name="x"))
    query = dp_var(
        "name",
        bounds=(0, 1),
        by="sex",
        domains={"sex": ["F", "M"]},
        noise=DiscreteGaussian(4),
        privacy_unit=None,
        key=KEY,
        release_id="r",
        table="t",
    )
    with pytest.raises(DPTypeError, match="value column 'name' has type string; var needs"):
        query(df)


def test_a_session_variance_on_spark_is_the_pandas_release_in_the_session_s_labels(spark, tmp_path):
    from dp_pipeline import Budget, Session
    from dp_pipeline.engines.variance import run_variance
    from dp_pipeline.query.variance import VarianceSpec
    from dp_pipeline.session.plan import query_table, session_digest

    local = people()
    s = Session(
        key=KEY,
        population="people",
        privacy_unit="person_id",
        budget=Budget(rho=1),
        cap=Budget(rho=1),
        ledger=tmp_path / "ledger.sqlite",
        release_id="nb",
    )
    arguments = dict(bounds=(120, 220), by="sex", domains={"sex": ["F", "M"]})
    released = s.var(spark.createDataFrame(local), "height", **arguments, rho=Fraction(1, 2))
    salt = {"ledger": s.ledger.meta("ledger_id")}
    spec = VarianceSpec.build(
        "var",
        "height",
        **arguments,
        rho=Fraction(1, 2),
        privacy_unit="person_id",
        key=KEY,
        release_id="nb",
        table=query_table(0),
        release_digest=session_digest("people", "nb", salt),
    )
    expected = run_variance(local, spec)
    on_spark = released.toPandas()
    for column in expected.columns:
        assert on_spark[column].astype(object).tolist() == expected[column].astype(object).tolist()
    assert [(q.engine, q.state) for q in s.queries] == [("spark", "committed")]


def test_on_invalid_error_on_spark_names_the_value_column_the_user_gave(spark):
    from dp_pipeline import DPValueError
    from dp_pipeline.spark import dp_std

    query = dp_std(
        "height",
        bounds=(120, 220),
        by="sex",
        domains={"sex": ["F", "M"]},
        noise=DiscreteGaussian(4),
        privacy_unit=None,
        on_invalid="error",
        key=KEY,
        release_id="r",
        table="t",
    )
    with pytest.raises(DPValueError) as caught:
        query(spark.createDataFrame(people()))
    assert str(caught.value).startswith("column 'height': some rows hold null, NaN or infinite")
