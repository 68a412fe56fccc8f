"""Budgets in the notebook API: epsilon/delta or rho instead of noise, calibrated per query."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import DiscreteGaussian, DiscreteLaplace, MasterKey
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.query.budget import QueryBudget
from dp_pipeline.query.spec import QuerySpec

KEY = MasterKey(bytes(range(32)))
PEOPLE = pd.DataFrame({"g": np.arange(60) % 3, "u": np.arange(60) // 2, "v": np.arange(60.0)})
CELLS = dict(by="g", domains={"g": range(3)}, key=KEY, release_id="r", table="t")
PER_ROW = dict(CELLS, privacy_unit=None)


def _delta(mechanisms_and_vectors, epsilon) -> Fraction:
    accountant = PrivacyAccountant()
    for mechanism, vector in mechanisms_and_vectors:
        accountant.add(mechanism, sensitivity=list(vector), count=1)
    return Fraction(accountant.delta(epsilon).upper)


def test_epsilon_delta_gives_the_least_discrete_gaussian_meeting_it():
    counts = PEOPLE.dp.count(
        **CELLS, privacy_unit="u", max_cells=2, epsilon=1, delta=Fraction(1, 10**6)
    )
    (measure,) = counts.dp.info.measures
    assert isinstance(measure.mechanism, DiscreteGaussian)
    assert measure.sensitivity == (1, 1)
    assert _delta([(measure.mechanism, measure.sensitivity)], 1) <= Fraction(1, 10**6)
    smaller = DiscreteGaussian(measure.mechanism.sigma2 * Fraction(99, 100))
    assert _delta([(smaller, measure.sensitivity)], 1) > Fraction(1, 10**6)  # least within 1%
    assert counts.dp.margin_of_error == {"count": measure.margin_of_error}
    assert counts.dp.info.delta == Fraction(1, 10**6)


def test_rho_gives_sigma2_from_the_zcdp_identity_rounded_up():
    total = PEOPLE.dp.sum("v", bounds=(0, 100), **PER_ROW, rho=Fraction(1, 2))
    (measure,) = total.dp.info.measures
    assert measure.mechanism == DiscreteGaussian(10_000)  # Δ²/(2ρ) = 100²/1
    assert total.dp.info.rho == Fraction(1, 2)
    assert set(total.dp.margin_of_error) == {"sum"}


def test_epsilon_alone_gives_pure_discrete_laplace_and_a_mean_splits_it():
    mean = PEOPLE.dp.mean("v", bounds=(0, 100), **PER_ROW, epsilon=Fraction(1, 2))
    sum_measure, count_measure = mean.dp.info.measures
    assert sum_measure.mechanism == DiscreteLaplace(400)  # Δ₁ / (ε/2) = 100 / (1/4)
    assert count_measure.mechanism == DiscreteLaplace(4)
    pure = sum(Fraction(sum(m.sensitivity)) / m.mechanism.scale for m in mean.dp.info.measures)
    assert pure == Fraction(1, 2)
    assert set(mean.dp.margin_of_error) == {"sum", "count"}
    assert mean.dp.margin_of_error["sum"] > mean.dp.margin_of_error["count"]


def test_a_float_budget_is_read_down():
    budget = QueryBudget.build(epsilon=0.1)
    assert budget.epsilon <= Fraction(1, 10) and budget.epsilon <= Fraction(0.1)


def test_a_budget_query_is_the_same_query_as_its_noise():
    from_budget = QuerySpec.build("count", **PER_ROW, rho=Fraction(1, 8))
    from_noise = QuerySpec.build("count", **PER_ROW, noise=DiscreteGaussian(4))
    assert from_budget.noise == DiscreteGaussian(4)
    assert from_budget.stream_labels("count", 0) == from_noise.stream_labels("count", 0)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({}, ValueError, r"give noise= \(a DiscreteGaussian or DiscreteLaplace\) or a budget"),
        (
            {"noise": DiscreteGaussian(4), "epsilon": 1},
            ValueError,
            r"give either noise= or a budget, not both: got noise=.* and epsilon=1",
        ),
        ({"epsilon": 1, "rho": 1}, ValueError, r"epsilon= \(and delta=\) or rho=, not both"),
        ({"epsilon": -1}, ValueError, r"epsilon must be > 0, got -1"),
        ({"epsilon": 0}, ValueError, r"epsilon must be > 0, got 0"),
        ({"epsilon": float("nan")}, ValueError, r"epsilon must be finite, got nan"),
        ({"rho": float("inf")}, ValueError, r"rho must be finite, got inf"),
        ({"epsilon": True}, TypeError, r"epsilon must be a number .* got True \(bool\)"),
        ({"epsilon": "1"}, TypeError, r"epsilon must be a number .* got '1' \(str\)"),
        ({"rho": "1/2"}, TypeError, r"rho must be a number .* got '1/2' \(str\)"),
        ({"rho": -2}, ValueError, r"rho must be > 0, got -2"),
        ({"epsilon": 1, "delta": 1}, ValueError, r"delta must be in \(0, 1\), got 1"),
        ({"epsilon": 1, "delta": 0}, ValueError, r"delta must be in \(0, 1\), got 0"),
        ({"epsilon": 1, "delta": False}, TypeError, r"delta must be a number .* \(bool\)"),
    ],
)
def test_bad_budgets_are_refused_naming_argument_value_and_rule(arguments, error, message):
    with pytest.raises(error, match=message):
        PEOPLE.dp.count(**PER_ROW, **arguments)


def test_count_noise_with_a_budget_is_refused():
    with pytest.raises(ValueError, match=r"count_noise=DiscreteLaplace.* with a budget"):
        PEOPLE.dp.mean("v", bounds=(0, 1), **PER_ROW, epsilon=1, count_noise=DiscreteLaplace(3))


def test_margin_of_error_needs_a_dp_result():
    with pytest.raises(ValueError, match=r"carries no attrs\['dp'\]"):
        _ = PEOPLE.dp.margin_of_error


@pytest.mark.spark
def test_spark_functions_take_the_same_budgets(spark):
    from dp_pipeline.spark import dp_mean

    query = dp_mean("v", bounds=(0, 100), **PER_ROW, epsilon=1, delta=Fraction(1, 10**8))
    local = PEOPLE.dp.mean("v", bounds=(0, 100), **PER_ROW, epsilon=1, delta=Fraction(1, 10**8))
    assert query.info.margin_of_error == local.dp.margin_of_error
    released = query(spark.createDataFrame(PEOPLE)).toPandas().sort_values("g")
    assert released["sum"].tolist() == local["sum"].tolist()


def test_selections_take_rho_as_the_largest_pure_epsilon_within_it():
    people = pd.DataFrame({"age": np.arange(200) % 90, "county": np.arange(200) % 4})
    common = dict(key=KEY, release_id="r", table="s", privacy_unit=None)
    median = people.dp.median("age", bounds=(0, 100), granularity=1, rho=Fraction(1, 8), **common)
    epsilon = median.dp.info.epsilon
    assert epsilon**2 / 8 <= Fraction(1, 8) and epsilon > Fraction(99, 100)  # ε ≈ 1
    top = people.dp.top_k("county", 2, candidates=range(4), rho=Fraction(1, 2), **common)
    assert top.dp.info.epsilon**2 / (8 * 2) <= Fraction(1, 2)  # 2 rounds at ε/2
    one_shot = people.dp.top_k(
        "county", 2, candidates=range(4), rho=Fraction(1, 2), method="one_shot", **common
    )
    (shift,) = one_shot.dp.info.sensitivity
    scale = one_shot.dp.info.mechanism.scale
    assert Fraction(shift) ** 2 / (2 * scale**2) <= Fraction(1, 2)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, r"a selection needs a budget: epsilon= \(pure ε\) or rho= \(zCDP\)"),
        ({"epsilon": 1, "rho": 1}, r"give epsilon= or rho=, not both: got epsilon=1, rho=1"),
        ({"rho": -1}, r"rho must be > 0, got -1"),
        ({"rho": "1/8"}, r"rho must be a number .* got '1/8' \(str\)"),
    ],
)
def test_bad_selection_budgets_are_refused_by_name(arguments, message):
    people = pd.DataFrame({"age": [1, 2, 3]})
    with pytest.raises((ValueError, TypeError), match=message):
        people.dp.median(
            "age",
            bounds=(0, 10),
            granularity=1,
            key=KEY,
            release_id="r",
            table="s",
            privacy_unit=None,
            **arguments,
        )
    with pytest.raises((ValueError, TypeError), match=message):
        people.dp.top_k(
            "age",
            1,
            candidates=range(5),
            key=KEY,
            release_id="r",
            table="s",
            privacy_unit=None,
            **arguments,
        )
