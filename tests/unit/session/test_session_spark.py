"""`dp_pipeline.Session` on Spark (local mode, real SQLite ledger): the same release as on
pandas for the same key and release id, and a refusal that never reads the data."""

from __future__ import annotations

import hashlib
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dp_pipeline import Budget, BudgetExceededError, DiscreteGaussian, MasterKey, Session
from dp_pipeline.release.ledger.store import Ledger

KEY = MasterKey(hashlib.sha256(b"session spark tests").digest())
SEX = dict(by="sex", domains={"sex": ["F", "M"]})


def people(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(3)  # test data only
    return pd.DataFrame(
        {
            "person_id": np.repeat(np.arange(n // 2), 2),
            "sex": rng.choice(["F", "M"], n),
            "age": rng.integers(0, 100, n),
            "income": rng.integers(0, 100_000, n),
        }
    )


def session(folder) -> Session:
    return Session(
        key=KEY,
        population="people",
        privacy_unit="person_id",
        budget=Budget(rho=10),
        cap=Budget(rho=10),
        ledger=folder / "ledger.sqlite",
        release_id="audit-1",
    )


def queries(s: Session, df) -> list[pd.DataFrame]:
    """The same five queries, in order; Spark's lazy tables collected and sorted."""
    tables = [
        s.count(df, by=["sex", "age"], domains={"sex": ["F", "M"], "age": range(100)}, max_cells=2,
                noise=DiscreteGaussian(9)),
        s.sum(df, "income", bounds=(0, 100_000), granularity=1_000, **SEX, rho=Fraction(1, 4)),
        s.mean(df, "income", bounds=(0, 100_000), granularity=1_000, **SEX, rho=Fraction(1, 4)),
    ]  # fmt: skip
    keys = [["sex", "age"], ["sex"], ["sex"]]
    tables = [
        (t if isinstance(t, pd.DataFrame) else t.toPandas()).sort_values(k)
        for t, k in zip(tables, keys, strict=True)
    ]
    tables.append(s.median(df, "age", bounds=(0, 100), granularity=1, **SEX, epsilon=1))
    tables.append(s.top_k(df, "age", 3, candidates=range(100), rho=Fraction(1, 10)))
    return [t.reset_index(drop=True) for t in tables]


def test_a_session_releases_the_same_on_spark_as_on_pandas(spark, tmp_path, monkeypatch):
    local = people()
    # Noise is salted with the ledger's id: the Spark session runs on a copy of the
    # pandas session's (still empty) ledger, from a home of its own.
    Ledger(tmp_path / "pandas" / "ledger.sqlite").close()
    (tmp_path / "spark").mkdir()
    shutil.copy(tmp_path / "pandas" / "ledger.sqlite", tmp_path / "spark" / "ledger.sqlite")
    on_pandas = queries(session(tmp_path / "pandas"), local)
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "spark-home"))
    monkeypatch.setenv("HOME", str(Path(tmp_path / "spark-home") / "user"))  # a user of its own
    spark_session = session(tmp_path / "spark")
    on_spark = queries(spark_session, spark.createDataFrame(local))
    for a, b in zip(on_pandas, on_spark, strict=True):
        assert list(a.columns) == list(b.columns)
        for column in a.columns:
            assert a[column].astype(object).tolist() == b[column].astype(object).tolist(), column
    assert [q.engine for q in spark_session.queries] == ["spark"] * 5
    states = [e.state for e in Ledger(tmp_path / "spark" / "ledger.sqlite").history()]
    assert states == ["committed"] * 5


def test_a_refused_query_never_reads_the_spark_input_nor_a_result_again(spark, tmp_path):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    path = tmp_path / "people.csv"
    people().to_csv(path, index=False)
    schema = StructType(
        [
            StructField("person_id", LongType()),
            StructField("sex", StringType()),
            StructField("age", LongType()),
            StructField("income", LongType()),
        ]
    )
    df = spark.read.csv(str(path), header=True, schema=schema)
    s = session(tmp_path)
    counts = s.count(df, **SEX, rho=1)
    path.unlink()  # from now on, reading a row of df fails
    assert counts.count() == 2  # the noisy table is never recomputed from the input
    with pytest.raises(BudgetExceededError, match="refused before reading any data"):
        s.count(df, **SEX, rho=10)
    assert len(s.queries) == 1 and len(Ledger(tmp_path / "ledger.sqlite").history()) == 1
    with pytest.raises(Exception, match=r"(?i)not exist|FileNotFound|No such file"):
        df.count()  # the tripwire is real
