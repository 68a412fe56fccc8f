"""Shared fixtures: one real local-mode Spark session for the whole test run."""

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
