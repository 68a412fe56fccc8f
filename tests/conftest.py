"""Shared fixtures: one real local-mode Spark session for the whole test run, and a
recorder of which Spark aggregation path ran."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """local[2] with up to 2 attempts per task (so an injected one-time failure is retried)."""
    pytest.importorskip("pyspark")
    from dp_pipeline.spark import local_session

    session = local_session(2, max_task_failures=2, shuffle_partitions=4, driver_memory="1g")
    yield session
    session.stop()


@pytest.fixture
def parquet_pass_calls(monkeypatch):
    """Records whether each `_parquet_pass` call aggregated (True) or declined (False)."""
    import dp_pipeline.spark_aggregate as spark_aggregate

    calls = []
    original = spark_aggregate._parquet_pass

    def recording(*args):
        result = original(*args)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(spark_aggregate, "_parquet_pass", recording)
    return calls
