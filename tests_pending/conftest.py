"""Shares the fixtures of tests/conftest.py (e.g. the Spark session) with the pending suites."""

from tests.conftest import *  # noqa: F403
