"""A δ above the large-δ limit (1e-4) is refused on every surface unless the caller opts in.

Queries (``df.dp.*``, ``dp_pipeline.spark.dp_*``, a session's), `Budget`, a spec's
``[budget]`` and ``population.cap``, and a cap the ledger records: each refusal names
the field, the limit and the opt-in; each boundary case (δ = 1e-4) has a just-invalid
twin.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import inspect
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dp_pipeline
from dp_pipeline import Budget, DiscreteGaussian, DPError, LedgerError, MasterKey, Session
from dp_pipeline.query.large_delta import LARGE_DELTA_LIMIT, LargeDeltaError
from dp_pipeline.release.ledger.budget import accountant_type
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.spec.load import parse_spec
from dp_pipeline.release.spec.model import Budget as SpecBudget
from dp_pipeline.release.spec.model import SpecError

KEY = MasterKey(hashlib.sha256(b"large delta tests").digest())
SEX = dict(by="sex", domains={"sex": ["F", "M"]})
LABELS = dict(key=KEY, release_id="r", table="t", privacy_unit=None)
JUST_ABOVE = LARGE_DELTA_LIMIT + Fraction(1, 10**20)


def people(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(0)  # test data only
    return pd.DataFrame({"person_id": np.arange(n), "sex": rng.choice(["F", "M"], n)})


def assert_refusal(error: BaseException, field: str, opt_in: str) -> None:
    text = str(error)
    assert isinstance(error, DPError) and "\n" not in text
    assert f"{field} = 0.5 is above the large-delta limit 1e-4" in text, text
    assert opt_in in text, text


# ----------------------------------------------------------------------------- queries


def test_a_query_with_delta_one_half_is_refused_naming_the_opt_in():
    with pytest.raises(LargeDeltaError) as caught:
        people().dp.count(**SEX, **LABELS, epsilon=1, delta=0.5)
    assert_refusal(caught.value, "delta", "allow_large_delta=True")


def test_a_reporting_delta_beside_named_noise_follows_the_same_rule():
    with pytest.raises(LargeDeltaError) as caught:
        people().dp.count(**SEX, **LABELS, noise=DiscreteGaussian(4), delta=0.5)
    assert_refusal(caught.value, "delta", "allow_large_delta=True")


def test_a_query_opting_in_is_calibrated_and_the_limit_itself_passes():
    opted = people().dp.count(**SEX, **LABELS, epsilon=1, delta=0.5, allow_large_delta=True)
    assert len(opted) == 2
    at_limit = people().dp.count(**SEX, **LABELS, epsilon=1, delta=Fraction(1, 10**4))
    assert len(at_limit) == 2
    with pytest.raises(LargeDeltaError, match="allow_large_delta=True"):
        people().dp.count(**SEX, **LABELS, epsilon=1, delta=JUST_ABOVE)


def test_the_opt_in_must_be_a_bool():
    with pytest.raises(DPError, match="allow_large_delta must be True or False, got str"):
        people().dp.count(**SEX, **LABELS, epsilon=1, delta=0.5, allow_large_delta="yes")


@pytest.mark.spark
def test_spark_queries_refuse_it_before_any_spark_work():
    dp_spark = spark_functions()
    with pytest.raises(LargeDeltaError) as caught:
        dp_spark.dp_mean("x", bounds=(0, 10), granularity=1, **SEX, **LABELS, epsilon=1, delta=0.5)
    assert_refusal(caught.value, "delta", "allow_large_delta=True")
    query = dp_spark.dp_count(**SEX, **LABELS, epsilon=1, delta=0.5, allow_large_delta=True)
    assert query.info.delta == Fraction(1, 2)


def spark_functions():
    """`dp_pipeline.spark` (it needs PySpark: the core install's tier skips these)."""
    pytest.importorskip("pyspark")
    return importlib.import_module("dp_pipeline.spark")


@pytest.mark.parametrize(
    "function",
    [
        lambda: pd.DataFrame().dp.count,
        lambda: pd.DataFrame().dp.mean,
        pytest.param(lambda: spark_functions().dp_sum, marks=pytest.mark.spark),
        lambda: dp_pipeline.Session.count,
    ],
)
def test_the_keyword_is_in_the_generated_signatures_and_their_docs(function):
    call = function()
    parameter = inspect.signature(call).parameters["allow_large_delta"]
    assert parameter.default is False and parameter.kind is parameter.KEYWORD_ONLY
    assert "allow_large_delta (optional): True accepts a delta above 1e-4" in call.__doc__


# ----------------------------------------------------------------------------- Budget, Session


def test_budget_refuses_a_large_delta_and_accepts_it_on_purpose():
    with pytest.raises(DPError) as caught:
        Budget(epsilon=1, delta=0.5)
    assert_refusal(caught.value, "Budget.delta", "Budget(..., allow_large_delta=True)")
    assert Budget(epsilon=1, delta=0.5, allow_large_delta=True).delta == Fraction(1, 2)
    assert Budget(epsilon=1, delta=Fraction(1, 10**4)).delta == Fraction(1, 10**4)
    with pytest.raises(DPError, match="large-delta limit"):
        Budget(epsilon=1, delta=JUST_ABOVE)
    with pytest.raises(DPError, match="allow_large_delta must be True or False"):
        Budget(epsilon=1, delta=0.5, allow_large_delta=1)


def test_a_session_query_follows_the_rule_and_spends_nothing(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    budget = Budget(epsilon=2, delta=Fraction(1, 10**6))
    s = Session(
        key=KEY,
        population="people",
        privacy_unit="person_id",
        budget=budget,
        cap=budget,
        ledger=ledger,
        release_id="s1",
    )
    with pytest.raises(LargeDeltaError) as caught:
        s.count(people(), **SEX, epsilon=1, delta=0.5)
    assert_refusal(caught.value, "delta", "allow_large_delta=True")
    assert s.queries == () and Ledger(ledger).history() == []


def test_a_session_cap_with_a_large_delta_opted_in_is_recorded_and_read_back(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    cap = Budget(epsilon=1, delta=Decimal("0.9999"), allow_large_delta=True)
    common = dict(key=KEY, population="people", privacy_unit="person_id", ledger=ledger)
    s = Session(**common, budget=cap, cap=cap, release_id="s1")
    s.count(people(), **SEX, rho=Fraction(1, 100))
    again = Session(**common, budget=Budget(rho=Fraction(1, 10)), release_id="s2")
    assert again.cap.delta == Fraction(9999, 10000)


# ----------------------------------------------------------------------------- specs


def document() -> dict:
    return {
        "release": {"id": "r-1", "noise_partitions": 4},
        "population": {"name": "people", "cap": {"epsilon": 10, "delta": Decimal("1e-9")}},
        "privacy_unit": {"column": "person_id"},
        "budget": {"epsilon": Decimal("1"), "delta": Decimal("1e-10")},
        "domains": {"sex": ["F", "M"]},
        "tables": [{"name": "by_sex", "keys": ["sex"], "share": 1}],
    }


@pytest.mark.parametrize(
    ("section", "field"),
    [(("budget",), "budget"), (("population", "cap"), "population.cap")],
)
def test_a_spec_delta_above_the_limit_is_a_spec_error_naming_the_opt_in(section, field):
    doc = document()
    table = doc[section[0]] if len(section) == 1 else doc[section[0]][section[1]]
    table["delta"] = Decimal("0.5")
    with pytest.raises(SpecError) as caught:
        parse_spec(doc)
    assert len(caught.value.problems) == 1
    problem = caught.value.problems[0]
    assert problem.startswith(f"{field}.delta = 0.5 is above the large-delta limit 1e-4")
    assert f"{field}.allow_large_delta = true" in problem
    table["allow_large_delta"] = True
    spec = parse_spec(doc)
    read = spec.budget if field == "budget" else spec.cap
    assert read.delta == Fraction(1, 2) and read.allow_large_delta


def test_a_cap_of_delta_0_9999_is_refused_and_the_limit_itself_is_not():
    doc = document()
    doc["population"]["cap"]["delta"] = Decimal("0.9999")
    with pytest.raises(SpecError, match=r"population\.cap\.delta = 0\.9999 is above"):
        parse_spec(doc)
    doc["population"]["cap"]["delta"] = Decimal("1e-4")
    assert parse_spec(doc).cap.delta == Fraction(1, 10**4)


def test_the_spec_opt_in_must_be_true_or_false():
    doc = copy.deepcopy(document())
    doc["budget"]["allow_large_delta"] = "yes"
    with pytest.raises(SpecError) as caught:
        parse_spec(doc)
    assert caught.value.problems == [
        "budget.allow_large_delta = 'yes': must be true or false (true accepts a delta "
        "above the large-delta limit 1e-4 on purpose)"
    ]


# ----------------------------------------------------------------------------- ledger


def test_the_ledger_refuses_to_record_a_large_delta_cap_without_the_opt_in(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    accountant = accountant_type()()
    accountant.add(DiscreteGaussian(Fraction(100)), sensitivity=1, count=1)
    common = dict(population="people", release_id="r1", accountant=accountant, fingerprint="aa")
    with pytest.raises(LedgerError) as caught:
        ledger.reserve(**common, cap=SpecBudget(epsilon=Fraction(1), delta=Fraction(9999, 10**4)))
    assert "the population cap's delta = 0.9999 is above the large-delta limit 1e-4" in str(
        caught.value
    )
    assert "allow_large_delta" in str(caught.value)
    assert ledger.populations() == {} and ledger.history() == []
    opted = SpecBudget(epsilon=Fraction(1), delta=Fraction(9999, 10**4), allow_large_delta=True)
    assert ledger.reserve(**common, cap=opted).outcome == "reserved"
