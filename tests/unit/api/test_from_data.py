"""``domains={key: FROM_DATA}`` on ``df.dp``: the released keys are selected privately, the
statistic is noised on exactly those keys, the accountant composes both, and every bad
input is one clear line before anything is read."""

from __future__ import annotations

import pickle
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dp_pipeline
from dp_pipeline import FROM_DATA, MasterKey
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.keyselect import plan_selection

KEY = MasterKey(bytes(range(7, 39)))
LABELS = dict(key=KEY, release_id="open", table="urls", privacy_unit="user")
# The threshold policy has an accountant event whatever the noise (a Gaussian plan is one).
SELECT = dict(selection_epsilon=1, selection_delta=Fraction(1, 10**6), selection_noise="gaussian")


def web_log(rows: int = 6000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    url = rng.zipf(1.6, rows) % 200
    return pd.DataFrame(
        {
            "user": rng.integers(0, 2000, rows),
            "url": [f"/page/{k}" for k in url],
            "url_id": url.astype(np.int64),
            "ms": rng.integers(0, 1000, rows),
        }
    )


def test_from_data_is_a_typed_singleton_of_the_root_package():
    assert dp_pipeline.FROM_DATA is FROM_DATA
    assert isinstance(FROM_DATA, dp_pipeline.FromData)
    assert repr(FROM_DATA) == "FROM_DATA"
    assert pickle.loads(pickle.dumps(FROM_DATA)) is FROM_DATA
    assert "FROM_DATA" in dp_pipeline.__all__


def test_count_releases_exactly_the_selected_keys_with_the_composed_cost():
    df = web_log()
    result = df.dp.count(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    info = result.dp.info
    selection = info.key_selection
    plan = plan_selection(noise="gaussian", epsilon=1, delta=Fraction(1, 10**6), max_cells=2)
    assert selection.threshold == plan.threshold
    assert selection.keys_kept == len(result) > 0
    assert result["url"].tolist() == sorted(result["url"])
    assert set(result["url"]) <= set(df["url"])
    # The query's ε is the accountant's over the statistic's event and the selection's.
    accountant = PrivacyAccountant()
    for event in (*(m.event for m in info.measures), plan.event()):
        accountant.add_event(event)
    assert info.delta == Fraction(1, 10**6) + Fraction(1, 10**6)
    assert info.epsilon == accountant.epsilon(info.delta).upper
    assert info.events[-1] == plan.event()
    # The statistic's noise is calibrated to a unit on max_cells keys, whatever was kept.
    assert info.measures[0].sensitivity == (1, 1)
    line = repr(info)
    assert f"{len(result)} url keys kept at threshold {plan.threshold}" in line
    summary = info.public_summary()["key_selection"]
    assert summary["threshold"] == plan.threshold and summary["keys_kept"] == len(result)
    # Never how many keys the data had.
    assert str(df["url"].nunique()) not in " ".join(map(str, summary.values()))


def test_keys_kept_are_those_of_the_selection_and_the_values_those_of_declared_domains():
    df = web_log()
    kept = df.dp.count(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    again = df.dp.count(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    pd.testing.assert_frame_equal(kept, again)  # the same key and labels: the same release
    assert kept["count"].dtype == np.int64


@pytest.mark.parametrize("statistic", ["sum", "mean", "var", "std"])
def test_every_statistic_runs_on_the_selected_keys(statistic):
    df = web_log()
    result = getattr(df.dp, statistic)(
        "ms",
        bounds=(0, 1000),
        by="url_id",
        domains={"url_id": FROM_DATA},
        epsilon=1,
        max_cells=3,
        **SELECT,
        **LABELS,
    )
    assert result.dp.info.key_selection.keys_kept == len(result) > 0
    assert result["url_id"].dtype == np.int64
    assert set(result["url_id"]) <= set(df["url_id"])


def test_a_declared_key_beside_a_selected_one_gives_their_product():
    df = web_log().assign(hour=lambda d: d["ms"] % 3)
    result = df.dp.count(
        by=["url", "hour"],
        domains={"url": FROM_DATA, "hour": [0, 1, 2]},
        epsilon=1,
        max_cells=2,
        **SELECT,
        **LABELS,
    )
    kept = result.dp.info.key_selection.keys_kept
    assert len(result) == 3 * kept
    assert result["hour"].tolist() == [0, 1, 2] * kept


def test_without_a_privacy_unit_each_row_is_a_unit():
    df = web_log()
    labels = {**LABELS, "privacy_unit": None}
    result = df.dp.count(by="url", domains={"url": FROM_DATA}, epsilon=1, **SELECT, **labels)
    assert result.dp.info.key_selection.max_cells == 1
    assert len(result) > 0


def test_no_key_released_gives_an_empty_table_with_the_input_types():
    df = web_log(rows=30)
    result = df.dp.count(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    assert result.empty and result.columns.tolist() == ["url", "count"]
    assert result["url"].dtype == df["url"].dtype
    assert result.dp.info.key_selection.keys_kept == 0


def test_null_keys_are_invalid_rows_dropped_or_refused():
    df = web_log()
    df.loc[::7, "url"] = None
    dropped = df.dp.count(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    assert dropped["url"].notna().all()
    with pytest.raises(DPValueError, match=r"^column 'url': some rows have a null key"):
        df.dp.count(
            by="url",
            domains={"url": FROM_DATA},
            epsilon=1,
            max_cells=2,
            on_invalid="error",
            **SELECT,
            **LABELS,
        )


def test_a_column_of_mixed_types_is_refused_under_error_and_dropped_otherwise():
    df = web_log()
    df["url"] = df["url"].astype(object)
    df.loc[::5, "url"] = 17
    with pytest.raises(DPValueError, match=r"not a string \(a column of mixed types\)"):
        df.dp.count(
            by="url",
            domains={"url": FROM_DATA},
            epsilon=1,
            max_cells=2,
            on_invalid="error",
            **SELECT,
            **LABELS,
        )
    dropped = df.dp.count(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    assert all(isinstance(url, str) for url in dropped["url"])


BAD = [
    (
        dict(domains={}),
        r"key column 'url' has no declared domain; .*dp_pipeline\.FROM_DATA to select",
    ),
    (
        dict(domains={"url": FROM_DATA}, selection_epsilon=None),
        r"domains\['url'\] = FROM_DATA needs selection_epsilon=: the budget",
    ),
    (
        dict(domains={"url": FROM_DATA}, selection_delta=None),
        r"needs selection_delta=",
    ),
    (
        dict(domains={"url": ["/page/1", FROM_DATA]}),
        r"lists FROM_DATA beside declared values; a key is either declared",
    ),
    (
        dict(domains={"url": FROM_DATA}, max_cells=1001),
        r"^key selection of 'url' \(selection_epsilon, selection_delta\): max_cells=1001: "
        r"must be between 1 and 1000",
    ),
    (
        dict(domains={"url": FROM_DATA}, selection_epsilon=Fraction(1, 10**9)),
        r"budget too small for key selection .*no key could be released",
    ),
    (
        dict(domains={"url": FROM_DATA}, selection_noise="uniform"),
        r"^selection_noise='uniform': must be one of 'laplace', 'gaussian'",
    ),
    (
        dict(domains={"url": FROM_DATA}, selection_delta=0.01),
        r"selection_delta",
    ),
    (
        dict(domains={"url": ["/page/1"]}),
        r"^selection_epsilon= applies to a key selected from the data",
    ),
    (
        dict(by=["url", "url_id"], domains={"url": FROM_DATA, "url_id": range(100)}, cell_limit=50),
        r"^the declared keys beside 'url' have 100 cells, above the cell limit 50 before any key",
    ),
    (
        dict(by=["url", "url_id"], domains={"url": FROM_DATA, "url_id": FROM_DATA}),
        r"one key per query can be selected from the data",
    ),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bad_input_is_refused_before_reading(change, message):
    class Unreadable(pd.DataFrame):  # any read of a row would fail
        def __getitem__(self, key):
            raise AssertionError("the data was read")

    arguments = {"by": "url", "epsilon": 1, "max_cells": 2, **SELECT, **LABELS, **change}
    with pytest.raises((DPValueError, DPTypeError), match=message):
        Unreadable(web_log(rows=10)).dp.count(**arguments)


def test_quantiles_and_top_k_refuse_from_data_with_a_reason():
    with pytest.raises(DPValueError, match=r"keys are selected from the data for count, sum"):
        web_log().dp.quantile(
            "ms",
            "1/2",
            bounds=(0, 1000),
            granularity=1,
            by="url",
            domains={"url": FROM_DATA},
            epsilon=1,
            **LABELS,
        )


def test_the_default_laplace_selection_is_an_accountant_event():
    df = web_log()
    select = dict(selection_epsilon=1, selection_delta=Fraction(1, 10**6))
    result = df.dp.count(by="url", domains={"url": FROM_DATA}, epsilon=1, **select, **LABELS)
    selection = result.dp.info.key_selection
    plan = plan_selection(noise="laplace", epsilon=1, delta=Fraction(1, 10**6), max_cells=1)
    assert (selection.policy, selection.threshold) == (plan.policy, plan.threshold)
    assert selection.policy == "optimal_per_key"  # the Laplace default at max_cells = 1
    assert result.dp.info.events[-1] == plan.event()
    assert selection.keys_kept == len(result) > 0


def test_a_budget_that_cannot_release_a_key_held_by_every_unit_is_refused_with_the_threshold():
    arguments = dict(by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **LABELS)
    with pytest.raises(DPValueError, match=r"threshold") as refused:
        web_log(rows=10).dp.count(
            **arguments,
            selection_epsilon=Fraction(1, 100),
            selection_delta=Fraction(1, 10**6),
            selection_max_units=50,
        )
    assert "\n" not in str(refused.value)
    with pytest.raises(DPValueError, match=r"^selection_max_units=0: must be a positive int"):
        web_log(rows=10).dp.count(**arguments, **SELECT, selection_max_units=0)


def test_a_spark_query_is_planned_and_described_before_any_session():
    pytest.importorskip("pyspark")
    from dp_pipeline.spark import dp_count

    query = dp_count(
        by="url", domains={"url": FROM_DATA}, epsilon=1, max_cells=2, **SELECT, **LABELS
    )
    assert repr(query) == (
        "SparkDPQuery(count by ['url'], keys of 'url' selected from the data, table='urls')"
    )
    assert query.info.key_selection.keys_kept is None
    assert "keys kept" not in repr(query.info)
    threshold = query.info.key_selection.threshold
    assert f"; url keys selected at threshold {threshold};" in repr(query.info)


def test_more_released_cells_than_the_cell_limit_are_refused_naming_the_limit():
    df = web_log().assign(hour=lambda d: d["ms"] % 3)
    with pytest.raises(
        DPValueError,
        match=r"^the selection of 'url' kept at least \d+ keys: at least \d+ cells, above the "
        r"cell limit 6; raise cell_limit",
    ):
        df.dp.count(
            by=["url", "hour"],
            domains={"url": FROM_DATA, "hour": [0, 1, 2]},
            epsilon=1,
            max_cells=2,
            cell_limit=6,
            **SELECT,
            **LABELS,
        )
