"""Planning before data: σ² per table from the budget, proven guarantee, CLI plan and ledger."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import pytest

from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.release.cli import main
from dp_pipeline.release.costs import sensitivity_vector
from dp_pipeline.release.plan import PlanError, plan_release
from dp_pipeline.release.spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[1]


def small_document(**budget) -> dict:
    return {
        "release": {"id": "r-1", "noise_partitions": 2},
        "population": {"name": "people", "cap": {"rho": 1}},
        "privacy_unit": {"column": "person_id"},
        "budget": budget or {"rho": "1/8"},
        "domains": {"age": {"start": 0, "stop": 9}, "sex": ["F", "M"]},
        "tables": [
            {"name": "age_sex", "keys": ["age", "sex"], "share": "3/4"},
            {
                "name": "income",
                "keys": ["sex"],
                "statistic": "sum",
                "value": "income",
                "lower": -10,
                "upper": 100,
                "share": "1/4",
            },
        ],
    }


def test_rho_budget_splits_by_share_and_is_met_exactly():
    plan = plan_release(parse_spec(small_document(rho="1/8")))
    # rho_t = share_t * rho with rho_t = ||Δ_t||² / (2 σ_t²) (CKS Prop. 5).
    assert plan.table("age_sex").rho == Fraction(3, 32)
    assert plan.table("income").rho == Fraction(1, 32)
    assert plan.rho == Fraction(1, 8)
    assert plan.table("age_sex").mechanism == DiscreteGaussian(Fraction(16, 3))
    assert plan.table("income").sensitivity == (100,)
    assert plan.epsilon_zcdp is not None
    assert float(plan.epsilon_tight.upper) <= plan.epsilon_zcdp


def test_epsilon_delta_budget_is_proven():
    plan = plan_release(parse_spec(small_document(epsilon=1, delta="1/1000000000")))
    assert plan.delta_tight is not None
    assert Fraction(plan.delta_tight.upper) <= Fraction(1, 10**9)
    assert plan.tables[0].margin_of_error > 0


def test_explicit_sigma2_above_budget_is_refused_before_data():
    document = small_document(rho="1/100")
    for table in document["tables"]:
        del table["share"]
        table["sigma2"] = 1
    with pytest.raises(PlanError, match=r"above budget\.rho = 1/100"):
        plan_release(parse_spec(document))


def test_sensitivity_vectors():
    spec = parse_spec(small_document())
    replace = dataclasses.replace(spec, neighbouring="replace")
    count, total = spec.table("age_sex"), spec.table("income")
    assert sensitivity_vector(spec, count) == (1,)
    assert sensitivity_vector(replace, count) == (1, 1)
    assert sensitivity_vector(spec, total) == (100,)
    # Replace within one cell can move a sum from -10 to 100: 110 in one coordinate.
    assert sensitivity_vector(replace, total) == (110, 110)


def test_replace_never_counts_more_coordinates_than_cells():
    document = small_document()
    document["domains"]["one"] = ["x"]
    document["tables"][0].update(keys=["one"])
    spec = dataclasses.replace(parse_spec(document), neighbouring="replace")
    table = spec.table("age_sex")
    assert table.cells == 1
    assert sensitivity_vector(spec, table) == (1,)  # leaving and entering the same cell


def test_noise_sd_is_the_standard_deviation_of_the_noise():
    import numpy as np

    plan = plan_release(parse_spec(dict(small_document(), budget={"rho": "1/8"})))
    assert plan.table("age_sex").noise_sd == pytest.approx(float(Fraction(16, 3)) ** 0.5)
    document = small_document(epsilon=1)
    document["release"]["noise"] = "discrete_laplace"
    table = plan_release(parse_spec(document)).table("age_sex")
    scale = float(table.mechanism.scale)
    support = np.arange(-2000, 2001)
    pmf = np.exp(-np.abs(support) / scale)
    pmf /= pmf.sum()
    assert table.noise_sd == pytest.approx(float(np.sqrt((pmf * support**2).sum())), rel=1e-9)


def test_census_demo_plans_with_the_tight_accountant():
    plan = plan_release(load_spec(ROOT / "conf" / "census_demo.toml"))
    assert len(plan.tables) == 6
    assert Fraction(plan.delta_tight.upper) <= Fraction(1, 10**10)
    shares = {t.table.name: t.rho / plan.rho for t in plan.tables}
    assert shares["county_age_sex"] == Fraction(1, 2)


def test_cli_plan(capsys):
    assert main(["plan", str(ROOT / "conf" / "census_demo.toml")]) == 0
    out = capsys.readouterr().out
    assert "county_age_sex" in out and "729176" in out
    assert "zCDP conversion" in out and "before reading any data" in out
    assert main(["plan", str(ROOT / "conf" / "monthly_example.toml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["guarantee"]["rho"] == "1/100"


def test_cli_reports_spec_errors_with_status_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        (ROOT / "conf" / "monthly_example.toml").read_text().replace('"1/2"', '"2/3"', 1)
    )
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "shares sum to 7/6" in err


def test_cli_ledger_empty_and_unknown_population(tmp_path, capsys):
    ledger = str(tmp_path / "l.sqlite")
    assert main(["ledger", "--ledger", ledger]) == 0
    assert "no releases yet" in capsys.readouterr().out
    assert main(["ledger", "--ledger", ledger, "--population", "x"]) == 2
    assert "--population 'x': not in the ledger" in capsys.readouterr().err
