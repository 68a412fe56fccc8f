"""Summaries that cannot be misread: every (ε, δ) shown is one valid pair, rounded outward.

The ledger measures a spend at two points (ε at the cap's δ, δ at the cap's ε); the
job's summary line, ``dp-release ledger`` and the ledger's refusals write each as a
phrase of its own ("ε 1.88 of 8 at δ = 1e-8", "δ 3.2e-201 at ε = 8"); ``--json`` keeps
its keys and adds ``cumulative_at_cap`` naming each figure's point. A session's dry run
and queries are one short line, δ as a short decimal, a mean saying it is two measures.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from release_specs import SMALL_SPEC

from dp_pipeline import Budget, BudgetExceededError, MasterKey, Session
from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.phrases import delta_text, rounded, spend_phrase

KEY_HEX = hashlib.sha256(b"summaries").hexdigest()
# Two figures side by side without the point each is taken at: the misreadable form.
MIXED_PAIR = re.compile(r"epsilon=[0-9.e+-]+, delta=[0-9.e+-]+(?![0-9/])")


@pytest.fixture
def published(tmp_path, monkeypatch, capsys):
    """The small spec (cap ε = 8, δ = 1e-8) run once; its folder and printed lines."""
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    spec_file = tmp_path / "small.toml"
    spec_file.write_text(SMALL_SPEC.format(tmp=tmp_path))
    assert main(["run", str(spec_file)]) == 0
    return tmp_path, spec_file, capsys.readouterr().out


def test_the_job_summary_writes_epsilon_at_the_caps_delta_as_one_phrase(published):
    _, _, out = published
    line = next(text for text in out.splitlines() if text.startswith("cumulative"))
    assert re.fullmatch(
        r"cumulative for population small-people: ε [0-9.]+ of 8 at δ = 1e-8; "
        r"δ [0-9.e-]+ at ε = 8",
        line,
    ), line
    assert not MIXED_PAIR.search(out)


def test_the_ledger_listing_names_the_point_of_every_figure(published, capsys):
    folder, _, _ = published
    assert main(["ledger", "--ledger", str(folder / "ledger.sqlite")]) == 0
    out = capsys.readouterr().out
    assert not MIXED_PAIR.search(out), out
    row = next(text for text in out.splitlines() if text.strip().startswith("small-1"))
    assert re.search(r"ε [0-9.]+ of 8 at δ = 1e-8; δ [0-9.e-]+ at ε = 8$", row), row
    table = out.splitlines()[1]  # the summary table's row
    assert "(ε = 8, δ = 1e-8)" in table and re.search(r"ε [0-9.]+ at δ = 1e-8", table)
    assert re.search(r"ε [0-9.]+ of 8 spent at δ = 1e-8, [0-9.]+ left; δ [0-9.e-]+ at ε = 8", out)


def test_json_keeps_its_keys_and_adds_the_point_of_each_figure(published, capsys):
    folder, spec_file, _ = published
    assert main(["run", str(spec_file), "--json", "--quiet"]) == 3  # already committed
    line = json.loads(capsys.readouterr().out)
    cumulative, points = line["cumulative"], line["cumulative_at_cap"]
    assert {"epsilon", "delta", "epsilon_lower", "delta_lower"} <= set(cumulative)
    assert points["epsilon"] == {
        "upper": cumulative["epsilon"],
        "lower": cumulative["epsilon_lower"],
        "at_delta": "1/100000000",
    }
    assert points["delta"]["at_epsilon"] == "8" and points["delta"]["upper"] == cumulative["delta"]
    assert points["text"].startswith("ε ") and "of 8 at δ = 1e-8" in points["text"]
    assert main(["ledger", "--ledger", str(folder / "ledger.sqlite"), "--json"]) == 0
    population = json.loads(capsys.readouterr().out)["populations"][0]
    assert population["spent_at_cap"]["epsilon"]["at_delta"] == "1/100000000"
    assert population["spent"]["epsilon"] == population["spent_at_cap"]["epsilon"]["upper"]


def test_a_refusal_over_the_cap_writes_each_figure_with_its_point(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    spec_file = tmp_path / "small.toml"
    text = SMALL_SPEC.format(tmp=tmp_path).replace(
        "epsilon = 8, delta = 1e-8", "epsilon = 2.2, delta = 1e-8"
    )
    spec_file.write_text(text)
    assert main(["run", str(spec_file), "--quiet"]) == 0
    code = main(["run", str(spec_file), "--release-id", "small-2", "--quiet"])
    err = capsys.readouterr().err
    assert code != 0 and "would exceed its cap" in err, err
    assert not MIXED_PAIR.search(err) and not re.search(r"epsilon [0-9.]+, delta", err)
    alone = r"this release alone: ε [0-9.]+ of 2.2 at δ = 1e-8; δ [0-9.e-]+ at ε = 2.2"
    assert re.search(alone, err), err


@pytest.mark.parametrize(
    "value", [1.873371, 3.21e-201, 0.5, 2.0, 1 / 3, 123456.7, Fraction(2, 3), 9.99e-5]
)
def test_figures_are_rounded_outward(value):
    up, down = Fraction(rounded(value, up=True)), Fraction(rounded(value, up=False))
    assert down <= Fraction(value) <= up
    assert up - down <= Fraction(value) / 50  # three significant digits


def test_a_delta_is_exact_when_short_and_rounded_up_otherwise():
    assert delta_text(Fraction(1, 10**9)) == "1e-9"
    assert delta_text(Fraction(25, 10**8)) == "2.5e-7"
    assert delta_text(Fraction(1, 3 * 10**7)) == "3.34e-8"
    # The float 1e-7, read down, is an odd fraction: shown as 1e-7 (rounded up).
    read_down = min(Fraction(repr(1e-7)), Fraction(1e-7))
    assert read_down < Fraction(1, 10**7) and delta_text(read_down) == "1e-7"
    cap = {"rho": None, "epsilon": "10", "delta": "1/1000000000"}
    spend = {"epsilon": 1.87337, "delta": 3.21e-201}
    assert spend_phrase(spend, cap) == "ε 1.88 of 10 at δ = 1e-9; δ 3.22e-201 at ε = 10"


# ----------------------------------------------------------------------------- session


def people(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(1)  # test data only
    return pd.DataFrame(
        {
            "person_id": np.arange(n),
            "sex": rng.choice(["F", "M"], n),
            "income": rng.integers(0, 100, n),
        }
    )


def test_session_reprs_are_one_short_line_with_details_on_demand(tmp_path):
    budget = Budget(epsilon=2, delta=Decimal("1e-6"))
    session = Session(
        key=MasterKey(bytes.fromhex(KEY_HEX)),
        population="people",
        privacy_unit="person_id",
        budget=budget,
        cap=budget,
        ledger=tmp_path / "ledger.sqlite",
        release_id="nb",
    )
    sex = dict(by="sex", domains={"sex": ["F", "M"]})
    cost = session.cost.mean("income", bounds=(0, 100), **sex, epsilon=Fraction(1, 2), delta=1e-7)
    shown = repr(cost)
    assert "\n" not in shown and len(shown) < 400, shown
    assert "mean: one query of 2 noisy measures (sum and count)" in shown
    assert "at δ = 1e-6" in shown and "fits the budget and the cap" in shown
    assert "margin ±" in shown and ".details() for all" in shown
    assert "sigma2" in cost.details() and "alone = SpendBounds(" in cost.details()
    session.count(people(), **sex, epsilon=Fraction(1, 2), delta=1e-7)
    record = repr(session.queries[0])
    assert "\n" not in record and len(record) < 200, record
    assert re.search(r"#0 count, committed \(pandas\), ε ≤ [0-9.]+ at δ = 1e-7", record)
    assert re.fullmatch(
        r"SpendBounds\(ε (≤ [0-9.]+|in \[[0-9.]+, [0-9.]+\]) at δ = 1e-6, method='\w+'\)",
        repr(session.spent),
    ), repr(session.spent)
    assert repr(budget) == "Budget(epsilon=2, delta=1e-6)"
    with pytest.raises(BudgetExceededError) as refused:
        session.count(people(), **sex, epsilon=5, delta=Fraction(1, 10**7))
    assert re.search(
        r"spent ε (≤ [0-9.]+|in \[[0-9., ]+\]) at δ = 1e-6; this query alone ε",
        str(refused.value),
    )


def test_a_value_margin_wider_than_the_raw_one_says_why():
    from dp_pipeline.release.report.postprocess import postprocessing_description

    report = {
        "postprocessing": {
            "method": "wls+topdown-nonnegative-integer",
            "consistent": True,
            "nonnegative": True,
            "integer": True,
            "tables": ["county_sex", "state_sex"],
            "value_margin_of_error": {"county_sex": 14, "state_sex": 11},
        }
    }
    rows = postprocessing_description(report, {"county_sex": 9, "state_sex": 18})
    wider = next(row for row in rows if "<td>county_sex</td>" in row)
    narrower = next(row for row in rows if "<td>state_sex</td>" in row)
    assert "<td>±9</td><td>±14</td><td>wider than raw_value&#x27;s because it adds" in wider
    assert "not the typical error" in wider
    assert narrower.endswith("<td>±18</td><td>±11</td><td></td></tr>")


def test_the_html_report_writes_the_cumulative_figures_at_their_points(published):
    folder, _, _ = published
    report = (folder / "out" / "small-1" / "report.html").read_text()
    line = next(part for part in report.split("<p>") if part.startswith("Cumulative"))
    assert re.search(r"; ε = [0-9.]+ \(lower bound [0-9.]+\) at the cap's δ = 1e-8", line), line
    assert re.search(r"; δ = [0-9.e-]+ \(lower bound [0-9.e-]+\) at the cap's ε = 8", line), line
