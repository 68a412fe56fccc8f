"""`Session` with a key selected from the data (FROM_DATA): the selection is charged once
per query with its statistic, ``session.cost`` gives its threshold and margins before
anything is read, and bad input is refused before anything is spent."""

from __future__ import annotations

import hashlib
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dp_pipeline import FROM_DATA, Budget, BudgetExceededError, MasterKey, Session
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect import plan_selection
from dp_pipeline.release.ledger.store import Ledger

KEY = MasterKey(hashlib.sha256(b"session from data").digest())
DELTA = Fraction(1, 10**6)
URLS = dict(by="url", domains={"url": FROM_DATA}, max_cells=2)
SELECT = dict(selection_epsilon=1, selection_delta=DELTA, selection_noise="gaussian")


def web_log(rows: int = 5000, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    url = rng.zipf(1.6, rows) % 150
    return pd.DataFrame(
        {
            "user": rng.integers(0, 1500, rows),
            "url": [f"/page/{k}" for k in url],
            "ms": rng.integers(0, 1000, rows),
        }
    )


class Unreadable(pd.DataFrame):
    """A DataFrame whose schema can be seen but whose columns cannot be read."""

    def __getitem__(self, key):
        raise AssertionError("a column was read")


def session(tmp_path, budget: Budget) -> Session:
    return Session(
        key=KEY,
        population="visitors",
        privacy_unit="user",
        budget=budget,
        cap=budget,
        ledger=tmp_path / "ledger.sqlite",
        release_id="web-1",
    )


def test_cost_gives_the_threshold_and_margins_before_reading(tmp_path):
    s = session(tmp_path, Budget(epsilon=6, delta=Fraction(1, 10**5)))
    cost = s.cost.mean("ms", bounds=(0, 1000), epsilon=1, **URLS, **SELECT)
    plan = plan_selection(noise="gaussian", epsilon=1, delta=DELTA, max_cells=2)
    assert cost.threshold == plan.threshold
    assert f"keys released at threshold {plan.threshold}" in repr(cost)
    assert sorted(cost.margin_of_error) == ["count", "sum"]
    assert cost.info.events[-1] == plan.event()
    assert s.queries == () and Ledger(tmp_path / "ledger.sqlite").history() == []
    plain = s.cost.mean("ms", bounds=(0, 1000), epsilon=1, by="url", domains={"url": ["/a"]})
    assert plain.threshold is None


def test_the_selection_is_charged_once_with_its_statistic(tmp_path):
    s = session(tmp_path, Budget(epsilon=6, delta=Fraction(1, 10**5)))
    cost = s.cost.count(epsilon=1, **URLS, **SELECT)
    result = s.count(web_log(), epsilon=1, **URLS, **SELECT)
    assert s.spent == cost.spent_after
    (record,) = s.queries
    assert record.state == "committed"
    assert len(record.info.events) == 2  # the count's and the selection's
    accountant = PrivacyAccountant()
    for event in record.info.events:
        accountant.add_event(event)
    assert s.spent.upper == accountant.epsilon(Fraction(1, 10**5)).upper
    info = result.dp.info
    assert info.key_selection.keys_kept == len(result) > 0
    assert info.key_selection.threshold == cost.threshold


def test_a_selection_over_the_budget_is_refused_before_reading(tmp_path):
    s = session(tmp_path, Budget(epsilon=1, delta=Fraction(1, 10**5)))
    with pytest.raises(BudgetExceededError, match="refused before reading any data"):
        s.count(Unreadable(web_log()), epsilon=1, **URLS, **SELECT)
    assert s.queries == () and Ledger(tmp_path / "ledger.sqlite").history() == []


def test_bad_selection_parameters_are_refused_before_anything_is_spent(tmp_path):
    s = session(tmp_path, Budget(epsilon=6, delta=Fraction(1, 10**5)))
    with pytest.raises(DPValueError, match=r"^key selection of 'url' .*: max_cells=2000: must be "):
        s.count(Unreadable(web_log()), epsilon=1, **{**URLS, "max_cells": 2000}, **SELECT)
    with pytest.raises(DPValueError, match=r"budget too small for key selection"):
        s.count(
            Unreadable(web_log()),
            epsilon=1,
            **URLS,
            **{**SELECT, "selection_epsilon": Fraction(1, 10**9)},
        )
    assert s.queries == () and Ledger(tmp_path / "ledger.sqlite").history() == []


@pytest.mark.spark
def test_a_spark_session_selects_the_keys_streamed_and_charges_once(tmp_path, spark):
    s = session(tmp_path, Budget(epsilon=6, delta=Fraction(1, 10**5)))
    cost = s.cost.count(epsilon=1, **URLS, **SELECT)
    released = s.count(spark.createDataFrame(web_log()), epsilon=1, **URLS, **SELECT)
    (record,) = s.queries
    assert record.state == "committed" and record.engine == "spark"
    assert s.spent == cost.spent_after
    urls = [row["url"] for row in released.collect()]
    assert urls and len(urls) == len(set(urls))
    assert set(urls) <= set(web_log()["url"])


@pytest.mark.parametrize("budget", [Budget(rho=1), Budget(epsilon=5)])
def test_a_session_without_a_delta_refuses_a_selection_before_spending(tmp_path, budget):
    s = session(tmp_path, budget)
    for ask in (s.cost.count, lambda **a: s.count(Unreadable(web_log()), **a)):
        with pytest.raises(DPValueError, match=r"has no finite zCDP ρ and no pure ε .*cannot"):
            ask(epsilon=1, **URLS, **SELECT)
    assert s.queries == () and Ledger(tmp_path / "ledger.sqlite").history() == []
