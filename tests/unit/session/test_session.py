"""`dp_pipeline.Session` on pandas with a real SQLite ledger: refusal before reading, the
accountant's bounds, the ledger's states, re-runs, a shared cap and bad input."""

from __future__ import annotations

import hashlib
import inspect
import pickle
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dp_pipeline
from dp_pipeline import (
    Budget,
    BudgetExceededError,
    DiscreteGaussian,
    DiscreteLaplace,
    DPError,
    LedgerError,
    MasterKey,
    PrivacyAccountant,
    ReleaseIdReuseError,
    Session,
)
from dp_pipeline.accounting import zcdp_to_epsilon
from dp_pipeline.release.key_binding import KeyBindingError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.locations import default_ledger

KEY_BYTES = hashlib.sha256(b"session tests").digest()
KEY = MasterKey(KEY_BYTES)
SEX = dict(by="sex", domains={"sex": ["F", "M"]})
AGE = dict(by="age", domains={"age": range(0, 100)})


def people(n: int = 500, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    return pd.DataFrame(
        {
            "person_id": np.arange(n),
            "sex": rng.choice(["F", "M"], n),
            "age": rng.integers(0, 100, n),
            "income": rng.integers(0, 100_000, n),
        }
    )


def session(tmp_path, budget, *, cap=None, release_id="nb-1", population="people", **kwargs):
    return Session(
        key=kwargs.pop("key", KEY),
        population=population,
        privacy_unit=kwargs.pop("privacy_unit", "person_id"),
        budget=budget,
        cap=budget if cap is None else cap,
        ledger=tmp_path / "ledger.sqlite",
        release_id=release_id,
        **kwargs,
    )


class Unreadable(pd.DataFrame):
    """A DataFrame whose schema can be seen but whose columns cannot be read."""

    def __getitem__(self, key):
        raise AssertionError("a column was read")


def unreadable() -> Unreadable:
    return Unreadable(people())


def rows(tmp_path) -> list:
    return Ledger(tmp_path / "ledger.sqlite").history()


# ----------------------------------------------------------------------------- refusal


def test_a_query_over_the_budget_is_refused_before_the_data_is_touched(tmp_path):
    s = session(tmp_path, Budget(epsilon=1, delta=Fraction(1, 10**6)))
    s.count(people(), **SEX, epsilon=Fraction(7, 10), delta=Fraction(1, 10**7))
    before = (s.spent, len(rows(tmp_path)))
    with pytest.raises(BudgetExceededError) as refused:
        s.count(unreadable(), **AGE, epsilon=Fraction(9, 10), delta=Fraction(1, 10**7))
    message = str(refused.value)
    assert "session 'nb-1': session.count(...) refused before reading any data" in message
    assert "the session's budget epsilon=1, delta=1/1000000" in message
    assert "The largest epsilon= of this query that fits the session's budget is" in message
    assert (s.spent, len(rows(tmp_path))) == before  # nothing spent, nothing recorded
    assert len(s.queries) == 1
    # What the refusal suggests fits (rounded down), and it runs.
    largest = Fraction(message.rsplit(" is ", 1)[1].rstrip("."))
    suggested = dict(**AGE, epsilon=largest, delta=Fraction(1, 10**7))
    assert s.cost.count(**suggested).fits
    # The stand-in is a real tripwire: a query that is not refused reads it, and is charged.
    with pytest.raises(AssertionError, match="a column was read"):
        s.count(unreadable(), **suggested)
    assert [q.state for q in s.queries] == ["committed", "reading"]
    assert s.spent.upper <= 1


def test_a_query_that_names_its_noise_is_refused_with_the_way_to_spend_less(tmp_path):
    s = session(tmp_path, Budget(rho=Fraction(1, 100)))
    with pytest.raises(BudgetExceededError, match="names its noise: a larger sigma2"):
        s.count(unreadable(), **SEX, noise=DiscreteGaussian(2))
    assert rows(tmp_path) == [] and s.queries == ()


def test_nothing_fits_once_the_budget_is_spent(tmp_path):
    s = session(tmp_path, Budget(rho=Fraction(1, 2)))
    s.count(people(), **SEX, rho=Fraction(1, 2))
    with pytest.raises(BudgetExceededError, match="Nothing fits: what is left of the session"):
        s.count(unreadable(), **SEX, rho=Fraction(1, 100))


# ----------------------------------------------------------------------------- bounds


def test_spent_and_remaining_in_rho_are_the_closed_form(tmp_path):
    s = session(tmp_path, Budget(rho=1))
    assert tuple(s.spent) == (0, 0) and tuple(s.remaining) == (1, 1)
    s.count(people(), **SEX, noise=DiscreteGaussian(8))  # Δ = 1: ρ = 1/(2·8)
    s.count(people(), **AGE, noise=DiscreteGaussian(8), max_cells=1)
    s.mean(people(), "income", bounds=(0, 100_000), granularity=1_000, **SEX, rho=Fraction(1, 5))
    # sum and count each calibrated to at most ρ/2 (rounded up σ²): the exact ρ of the mean
    mean_rho = s.queries[2].info.rho
    assert mean_rho <= Fraction(1, 5)
    exact = Fraction(1, 16) + Fraction(1, 16) + mean_rho
    assert tuple(s.spent) == (exact, exact) and s.spent.method == "exact"
    assert tuple(s.remaining) == (1 - exact, 1 - exact)


def test_pure_epsilon_spent_is_the_sum_of_the_laplace_epsilons(tmp_path):
    s = session(tmp_path, Budget(epsilon=1))  # δ = 0: pure ε-DP
    s.count(people(), **SEX, noise=DiscreteLaplace(4))  # Δ₁ = 1: ε = 1/4
    s.count(people(), **SEX, noise=DiscreteLaplace(4), neighbouring="replace")  # Δ₁ = 2
    assert tuple(s.spent) == (Fraction(3, 4), Fraction(3, 4))
    with pytest.raises(BudgetExceededError, match="session's budget epsilon=1, delta=0"):
        s.count(unreadable(), **SEX, noise=DiscreteGaussian(1000))  # never pure ε-DP


def test_epsilon_spent_is_the_tight_composition_not_the_sum(tmp_path):
    delta = Fraction(1, 10**6)
    s = session(tmp_path, Budget(epsilon=2, delta=delta))
    for _ in range(3):
        s.count(people(), **SEX, noise=DiscreteGaussian(40))
    lower, upper = s.spent
    # Two routes to the same composition agree, and the bracket is the accountant's.
    direct = PrivacyAccountant()
    for _ in range(3):
        direct.add(DiscreteGaussian(40), 1)
    bound = direct.epsilon(float(delta))
    assert (lower, upper) == (bound.lower, bound.upper) and lower <= upper
    # Tighter than the zCDP closed form (CKS Cor. 13) and than adding each query's ε.
    assert upper <= zcdp_to_epsilon(3 / 80, 1e-6)
    one = PrivacyAccountant().add(DiscreteGaussian(40), 1).epsilon(1e-6 / 3).upper
    assert upper < 3 * one
    left_lower, left_upper = s.remaining  # rounded outwards
    assert Fraction(left_lower) <= 2 - Fraction(upper) <= Fraction(left_lower) + 1e-15
    assert Fraction(left_upper) - 1e-15 <= 2 - Fraction(lower) <= Fraction(left_upper)


def test_cost_is_a_dry_run_with_the_margin_of_error(tmp_path):
    s = session(tmp_path, Budget(epsilon=2, delta=Fraction(1, 10**6)))
    s.count(people(), **SEX, noise=DiscreteGaussian(40))
    before = s.spent
    cost = s.cost.sum("income", bounds=(0, 100_000), granularity=1_000, **SEX, rho=Fraction(1, 20))
    assert s.spent == before and len(rows(tmp_path)) == 1 and len(s.queries) == 1
    assert cost.spent_before == before and cost.fits
    assert cost.increment.lower <= cost.spent_after.upper - before.upper
    assert cost.spent_after.upper - before.lower <= cost.increment.upper
    assert cost.alone.upper <= cost.spent_after.upper
    result = s.sum(
        people(), "income", bounds=(0, 100_000), granularity=1_000, **SEX, rho=Fraction(1, 20)
    )
    assert result.dp.margin_of_error == cost.margin_of_error
    assert s.spent == cost.spent_after
    too_much = s.cost.count(**SEX, epsilon=5, delta=Fraction(1, 10**7))
    assert not too_much.fits_budget and not too_much.fits


# ----------------------------------------------------------------------------- ledger


def test_each_query_is_a_committed_ledger_release_of_the_population(tmp_path):
    s = session(tmp_path, Budget(rho=1))
    s.count(people(), **SEX, rho=Fraction(1, 10))
    s.median(people(), "age", bounds=(0, 100), granularity=1, epsilon=Fraction(1, 2))
    s.top_k(people(), "age", 2, candidates=range(0, 100), rho=Fraction(1, 10))
    history = rows(tmp_path)
    assert [(e.release_id, e.population, e.state) for e in history] == [
        ("nb-1/0", "people", "committed"),
        ("nb-1/1", "people", "committed"),
        ("nb-1/2", "people", "committed"),
    ]
    assert [q.state for q in s.queries] == ["committed"] * 3
    assert [q.engine for q in s.queries] == ["pandas"] * 3
    # The ledger composes exactly what the session spent.
    spend, _ = Ledger(tmp_path / "ledger.sqlite").spent("people")
    assert spend.rho == s.spent.upper


def test_a_query_that_fails_after_reading_stays_charged(tmp_path):
    s = session(tmp_path, Budget(rho=1))
    text_income = people().astype({"income": str})
    with pytest.raises(TypeError, match="income"):
        s.sum(text_income, "income", bounds=(0, 100_000), **SEX, rho=Fraction(1, 4))
    (entry,) = rows(tmp_path)
    assert entry.state == "reading" and entry.status == "reserved"  # charged
    assert s.queries[0].state == "reading"
    assert s.spent.upper > 0
    with pytest.raises(LedgerError, match="once data is read the run is charged"):
        Ledger(tmp_path / "ledger.sqlite", key=KEY).abort("nb-1/0")


def test_a_missing_column_is_refused_before_anything_is_spent(tmp_path):
    s = session(tmp_path, Budget(rho=1))
    with pytest.raises(DPError, match=r"no column\(s\) \['region'\] that this query reads"):
        s.count(people(), by="region", domains={"region": [1, 2]}, rho=Fraction(1, 4))
    assert rows(tmp_path) == [] and s.queries == () and s.spent.upper == 0


def test_the_same_query_twice_is_charged_twice_with_independent_noise(tmp_path):
    s = session(tmp_path, Budget(rho=1))
    query = dict(**AGE, noise=DiscreteGaussian(100))
    first, second = s.count(people(), **query), s.count(people(), **query)
    assert s.spent.upper == 2 * Fraction(1, 200)
    assert not first["count"].equals(second["count"])  # 100 cells, σ = 10: never all equal
    # The key is bound to its ledger: another ledger (a second cap) is refused
    # (tests/unit/release/ledger/test_key_binding.py).
    with pytest.raises(KeyBindingError, match="is bound to the ledger"):
        session(tmp_path / "other", Budget(rho=1))


def test_a_session_release_id_is_single_use(tmp_path):
    session(tmp_path, Budget(rho=1)).count(people(), **SEX, rho=Fraction(1, 10))
    with pytest.raises(ReleaseIdReuseError, match="'nb-1' already has 1 session query"):
        session(tmp_path, Budget(rho=1))
    # Two live sessions under one id: the second's query cannot take the first's place.
    a = session(tmp_path, Budget(rho=1), release_id="nb-2")
    b = session(tmp_path, Budget(rho=1), release_id="nb-2")
    a.count(people(), **SEX, rho=Fraction(1, 10))
    with pytest.raises(ReleaseIdReuseError, match="'nb-2/0'"):
        b.count(unreadable(), **SEX, rho=Fraction(1, 10))


def test_two_sessions_on_one_population_share_its_cap(tmp_path):
    cap = Budget(rho=1)
    first = session(tmp_path, Budget(rho=1), cap=cap, release_id="a")
    first.count(people(), **SEX, rho=Fraction(6, 10))
    second = session(tmp_path, Budget(rho=1), cap=cap, release_id="b")
    assert not second.cost.count(**SEX, rho=Fraction(6, 10)).fits_cap
    with pytest.raises(BudgetExceededError) as refused:
        second.count(unreadable(), **SEX, rho=Fraction(6, 10))
    message = str(refused.value)
    assert "refused before reading any data by the population's cap" in message
    assert "population 'people' would exceed its cap rho <= 1" in message
    largest = Fraction(message.rsplit(" is ", 1)[1].rstrip("."))
    assert Fraction(39, 100) <= largest <= Fraction(4, 10)
    second.count(people(), **SEX, rho=largest)
    # A later session reads the cap from the ledger; another cap is refused.
    assert session(tmp_path, Budget(rho=1), cap=None, release_id="c").cap == cap
    with pytest.raises(LedgerError, match="cap rho <= 2 differs from the cap rho <= 1"):
        session(tmp_path, Budget(rho=1), cap=Budget(rho=2), release_id="d")
    # A population with another name has its own cap (on other data:
    # tests/unit/release/ledger/test_key_binding.py).
    session(tmp_path, Budget(rho=1), release_id="e", population="firms").count(
        people(seed=1), **SEX, rho=Fraction(6, 10)
    )


def test_a_session_with_another_key_is_refused_by_the_ledger_before_reading(tmp_path):
    """A ledger holds one key's releases: under another key the same data would get
    other noise and its input fingerprints could not be recognised."""
    session(tmp_path, Budget(rho=1), release_id="a").count(people(), **SEX, rho=Fraction(1, 10))
    other = MasterKey(hashlib.sha256(b"another key").digest())
    stranger = session(tmp_path, Budget(rho=1), release_id="b", key=other)
    with pytest.raises(LedgerError) as refused:
        stranger.count(unreadable(), **SEX, rho=Fraction(1, 10))
    message = str(refused.value)
    assert "anchored to one key" in message and "Nothing was read or written" in message
    assert hashlib.sha256(b"another key").hexdigest() not in message


def test_a_session_spends_from_the_cap_scheduled_releases_spent(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    scheduled = PrivacyAccountant().add(DiscreteGaussian(1), 1)  # ρ = 1/2
    ledger.reserve(
        population="people", release_id="monthly-01", accountant=scheduled, fingerprint="f",
        cap=Budget(rho=1),
    )  # fmt: skip
    s = session(tmp_path, Budget(rho=1), cap=None)
    assert s.cap == Budget(rho=1)
    assert s.cost.count(**SEX, rho=Fraction(1, 2)).fits_cap
    assert not s.cost.count(**SEX, rho=Fraction(6, 10)).fits_cap
    with pytest.raises(BudgetExceededError, match="1 earlier release"):
        s.count(unreadable(), **SEX, rho=Fraction(6, 10))
    s.count(people(), **SEX, rho=Fraction(1, 2))


def test_the_default_ledger_is_dp_release_s(tmp_path, monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    s = Session(
        key=KEY, population="people", privacy_unit=None, budget=Budget(rho=1), cap=Budget(rho=1)
    )
    s.count(people(), **SEX, rho=Fraction(1, 10))
    assert [e.release_id for e in Ledger(default_ledger()).history()] == [f"{s.release_id}/0"]
    assert s.release_id.startswith("session-")
    assert default_ledger() == str(tmp_path / "home" / "ledger.sqlite")


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(epsilon=-1, delta=1e-6), "Budget.epsilon = -1: must be > 0"),
        (dict(epsilon=1, delta=1), "Budget.delta = 1: must be 0 or lie in"),
        (dict(epsilon="1", delta=1e-6), "Budget epsilon must be a number"),
        (dict(epsilon=True), "Budget epsilon must be a number"),
        (dict(rho=float("nan")), "Budget rho must be finite"),
        (dict(rho=1, epsilon=1), "give rho, or epsilon with delta, not both"),
        (dict(delta=1e-6), "needs rho, or epsilon with delta"),
        (dict(epsilon=10**4, delta=1e-6), "Budget.epsilon = 10000: must lie between 1e-6 and 1000"),
    ],
)
def test_bad_budgets_name_the_argument_and_the_rule(arguments, message):
    with pytest.raises(DPError, match=message.replace("(", r"\(")):
        Budget(**arguments)


def test_budget_floats_are_read_as_written():
    assert Budget(epsilon=0.1, delta=1e-6) == Budget(
        epsilon=Fraction(1, 10), delta=Fraction(1, 10**6)
    )


def test_bad_session_arguments_are_refused_before_anything(tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    common = dict(key=KEY, population="people", budget=Budget(rho=1), ledger=ledger)
    with pytest.raises(TypeError, match=r'Session\(\.\.\., privacy_unit="person_id"\)'):
        Session(**common, cap=Budget(rho=1))
    with pytest.raises(DPError, match="key must be a dp_pipeline MasterKey, got bytes"):
        Session(**{**common, "key": KEY_BYTES}, privacy_unit=None, cap=Budget(rho=1))
    with pytest.raises(DPError, match=r"budget must be a dp_pipeline\.Budget"):
        Session(**{**common, "budget": {"rho": 1}}, privacy_unit=None)
    with pytest.raises(DPError, match="release_id = 'a/b': must be 1-128 letters"):
        Session(**common, privacy_unit=None, cap=Budget(rho=1), release_id="a/b")
    with pytest.raises(DPError, match="population 'people' has no cap in the ledger"):
        Session(**common, privacy_unit=None)
    s = Session(**common, privacy_unit="person_id", cap=Budget(rho=1), release_id="x")
    with pytest.raises(DPError, match=r"session\.count\(\.\.\.\) takes no privacy_unit="):
        s.count(people(), **SEX, rho=1, privacy_unit="person_id")
    with pytest.raises(DPError, match="takes no key="):
        s.cost.count(**SEX, rho=1, key=KEY)
    with pytest.raises(DPError, match='on_invalid="error" is refused in a session'):
        s.count(people(), **SEX, rho=Fraction(1, 10), on_invalid="error")
    with pytest.raises(DPError, match="takes a pandas or Spark DataFrame as df, got dict"):
        s.count({"sex": ["F"]}, **SEX, rho=Fraction(1, 10))
    with pytest.raises(DPError, match=r"give noise= .* or a budget"):
        s.count(unreadable(), **SEX)
    with pytest.raises(TypeError):
        s.count(people(), **SEX, rho=1, not_an_argument=2)
    assert s.queries == () and Ledger(ledger).history() == []


def test_the_key_never_shows(tmp_path):
    s = session(tmp_path, Budget(rho=Fraction(1, 10)))
    secret = KEY_BYTES.hex()
    texts = [repr(s), str(s), repr(s.cost)]
    for attempt in (
        lambda: s.count(unreadable(), **SEX, rho=1),
        lambda: s.count(people(), by="nope", domains={"nope": [1]}, rho=Fraction(1, 100)),
        lambda: pickle.dumps(s),
    ):
        with pytest.raises(DPError) as raised:
            attempt()
        texts.append(str(raised.value))
    assert all(secret not in text and secret[:16] not in text for text in texts)
    assert "cannot be pickled" in texts[-1]


def test_session_is_exported_with_its_budget():
    assert dp_pipeline.Session is Session and dp_pipeline.Budget is Budget
    assert "Session" in dp_pipeline.__all__ and "Budget" in dp_pipeline.__all__


@pytest.mark.parametrize("verb", ["count", "sum", "mean", "quantile", "median", "top_k"])
def test_the_verbs_take_df_dp_s_arguments_less_what_the_session_holds(verb, tmp_path):
    accessor = inspect.signature(getattr(dp_pipeline.accessor.DPAccessor, verb)).parameters
    held = ("key", "release_id", "table", "privacy_unit")
    expected = [name for name in accessor if name not in held]
    expected.insert(1, "df")  # after self
    assert list(inspect.signature(getattr(Session, verb)).parameters) == expected
    cost = inspect.signature(getattr(session(tmp_path, Budget(rho=1)).cost, verb)).parameters
    assert list(cost) == [name for name in expected if name not in ("self", "df")]
    for name in expected[2:]:
        assert (
            accessor[name].default
            == inspect.signature(getattr(Session, verb)).parameters[name].default
        )
