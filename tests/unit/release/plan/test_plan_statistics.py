"""Planning mean, var, std tables and sums of any granularity in a release spec.

Each noisy aggregate is an event of the engines' own query (the same sensitivity
vectors), the table's share is split equally across them, the accountant composes
every one, and each aggregate has a margin of error in units of the value.
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction

import pytest

from dp_pipeline.accounting import PrivacyAccountant, margin_of_error
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.query.aggregations import aggregation_query
from dp_pipeline.query.variance import VarianceSpec
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.plan.release_plan import CONFIDENCE, plan_release
from dp_pipeline.release.plan.text import format_plan
from dp_pipeline.release.spec.load import parse_spec


def document(*tables: dict, budget=None, noise="discrete_gaussian", neighbouring="add_remove"):
    return {
        "release": {"id": "r-1", "noise": noise, "neighbouring": neighbouring},
        "population": {"name": "people", "cap": {"epsilon": 20, "delta": Decimal("1e-6")}},
        "privacy_unit": {"column": "person_id", "max_cells_per_table": 2, "max_per_cell": 3},
        "budget": budget or {"rho": Decimal("0.1")},
        "domains": {"state": {"start": 1, "stop": 4}, "sex": ["F", "M"]},
        "tables": list(tables),
    }


COUNT = {"name": "state_count", "keys": ["state"], "share": "1/4"}
MEAN = {
    "name": "mean_income",
    "statistic": "mean",
    "keys": ["state"],
    "value": "income",
    "lower": -100,
    "upper": 1000,
    "granularity": 10,
    "share": "1/4",
}
VAR = {
    "name": "age_var",
    "statistic": "var",
    "keys": ["sex"],
    "value": "age",
    "lower": 0,
    "upper": 100,
    "granularity": "1/2",
    "share": "1/4",
}
SUM = {
    "name": "income_quarters",
    "statistic": "sum",
    "keys": ["state", "sex"],
    "value": "income",
    "lower": Decimal("-2.5"),
    "upper": Decimal("7.5"),
    "granularity": "1/4",
    "share": "1/4",
}
TABLES = (COUNT, MEAN, VAR, SUM)


def engine_arguments(spec, table) -> dict:
    return dict(
        by=list(table.keys),
        domains={key: spec.domains[key] for key in table.keys},
        max_cells=table.max_cells,
        max_per_cell=table.max_per_cell,
        privacy_unit=spec.privacy_unit,
        neighbouring=spec.neighbouring,
    )


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
def test_each_aggregate_is_an_event_of_the_engines_own_query(neighbouring):
    spec = parse_spec(document(*TABLES, neighbouring=neighbouring))
    plan = plan_release(spec)
    mean, var = plan.table("mean_income"), plan.table("age_var")
    assert [m.name for m in mean.measures] == ["sum", "count"]
    assert [m.name for m in var.measures] == ["centered_sum", "count", "centered_sum_of_squares"]

    noise = DiscreteGaussian(1)
    engine_mean = aggregation_query(
        "mean",
        column="income",
        bounds=(-100, 1000),
        granularity=10,
        noise=noise,
        **engine_arguments(spec, mean.table),
    )
    assert [m.event.sensitivity for m in mean.measures] == [
        e.sensitivity for e in engine_mean.events()
    ]
    engine_var = VarianceSpec.build(
        "var",
        "age",
        bounds=(0, 100),
        granularity="1/2",
        noise=noise,
        key=MasterKey(bytes(32)),
        release_id="r-1",
        table="age_var",
        **engine_arguments(spec, var.table),
    )
    assert [m.event.sensitivity for m in var.measures] == [
        e.sensitivity for e in engine_var.events()
    ]
    # Centred on 50: W = (100 - 0) / (1/2) = 200 half-units; L∞ = 3, L0 = 2 cells.
    width, linf = 200, 3
    centred, count, squares = (m.event.sensitivity for m in var.measures)
    if neighbouring == "add_remove":
        assert centred == (linf * width,) * 2 and count == (linf,) * 2
    else:
        # 2·L0 = 4 coordinates, capped at the table's 2 cells; each twice as wide.
        assert centred == (linf * 2 * width,) * 2 and count == (linf,) * 2
    assert set(squares) == {linf * width * width}
    # The sum's bounds in quarters: -10 and 30 (replace: up to upper - lower = 40 of them).
    largest = 30 if neighbouring == "add_remove" else 40
    assert set(plan.table("income_quarters").sensitivity) == {linf * largest}


def test_a_table_share_is_split_equally_in_rho_and_every_event_is_composed():
    spec = parse_spec(document(*TABLES))
    plan = plan_release(spec)
    total = Fraction(1, 10)
    for name, parts in (("mean_income", 2), ("age_var", 3)):
        table = plan.table(name)
        target = total / 4 / parts
        for measure in table.measures:
            rho = Fraction(PrivacyAccountant().add_event(measure.event).rho())
            assert rho <= target and float(rho) == pytest.approx(float(target), rel=1e-6)
        assert table.rho == sum(
            Fraction(PrivacyAccountant().add_event(m.event).rho()) for m in table.measures
        )
    events = plan.accountant.to_dict()["events"]
    assert len(events) == 1 + 2 + 3 + 1
    assert plan.rho == sum(t.rho for t in plan.tables) <= total


def test_discrete_laplace_splits_each_tables_epsilon_across_its_aggregates():
    budget = {"epsilon": 2, "delta": 0}
    spec = parse_spec(document(*TABLES, budget=budget, noise="discrete_laplace"))
    plan = plan_release(spec)
    var = plan.table("age_var")
    assert all(isinstance(m.event.mechanism, DiscreteLaplace) for m in var.measures)
    for measure in var.measures:
        epsilon = PrivacyAccountant().add_event(measure.event).pure_epsilon()
        assert epsilon <= Fraction(2) / 4 / 3
        assert float(epsilon) == pytest.approx(2 / 12, rel=1e-6)
    assert plan.delta_tight.upper == 0


def test_an_explicit_sigma2_is_every_aggregates_noise():
    tables = [dict(t, sigma2=400) for t in TABLES]
    for table in tables:
        del table["share"]
    raw = document(*tables)
    del raw["budget"]
    plan = plan_release(parse_spec(raw))
    for name in ("mean_income", "age_var"):
        mechanisms = {m.event.mechanism for m in plan.table(name).measures}
        assert mechanisms == {DiscreteGaussian(400)}


def test_margins_are_in_units_of_the_value():
    plan = plan_release(parse_spec(document(*TABLES)))
    units = {
        ("mean_income", "sum"): Fraction(10),
        ("mean_income", "count"): Fraction(1),
        ("age_var", "centered_sum"): Fraction(1, 4),  # granularity / 2
        ("age_var", "count"): Fraction(1),
        ("age_var", "centered_sum_of_squares"): Fraction(1, 16),
    }
    for (name, measure_name), unit in units.items():
        (measure,) = [m for m in plan.table(name).measures if m.name == measure_name]
        assert (
            measure.margin_of_error == margin_of_error(measure.event.mechanism, CONFIDENCE) * unit
        )
    assert plan.table("mean_income").margin_of_error is None
    quarters = plan.table("income_quarters")
    expected = margin_of_error(quarters.mechanism, CONFIDENCE) * Fraction(1, 4)
    assert quarters.margin_of_error == expected


def test_the_plan_lists_every_aggregate_and_its_margin():
    plan = plan_release(parse_spec(document(*TABLES)))
    tables = {t["name"]: t for t in json.loads(json.dumps(plan.to_dict()))["tables"]}
    var = tables["age_var"]
    assert (var["value"], var["lower"], var["upper"], var["granularity"]) == (
        "age",
        "0",
        "100",
        "1/2",
    )
    assert [m["value"] for m in var["measures"]] == [
        "centered_sum",
        "count",
        "centered_sum_of_squares",
    ]
    assert var["margin_of_error"] is None
    assert "none for the ratio" in var["margin_of_error_meaning"]
    assert tables["income_quarters"]["granularity"] == "1/4"
    assert "measures" not in tables["state_count"] and "value" not in tables["state_count"]
    text = format_plan(plan)
    assert "centred sum ±" in text and "centred squares ±" in text and "sum ±" in text


def test_a_sum_of_granularity_one_plans_as_before():
    """No granularity field: the plan's entry has no new key, its margin is an integer."""
    plain = {k: v for k, v in SUM.items() if k != "granularity"}
    plain.update(lower=-2, upper=8)
    plan = plan_release(parse_spec(document(COUNT, MEAN, VAR, plain)))
    entry = {t["name"]: t for t in plan.to_dict()["tables"]}["income_quarters"]
    assert "granularity" not in entry and isinstance(entry["margin_of_error"], int)
