"""``--release-id`` templates with the run date, and ``dp-release ledger`` per population."""

from __future__ import annotations

import json
from datetime import date

import pytest
from release_specs import SMALL_SPEC

from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.phrases import rounded
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.release_ids import render_release_id, run_date
from dp_pipeline.release.spec.model import SpecError

KEY_HEX = "7c3e9f1a5b8d2e6c0a4f7b1d9e3c5a8f2b6d0e4a7c1f9b3d5e8a2c6f0b4d7e1a"
MARCH = date(2026, 3, 17)


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("labour-{date:%Y-%m}", "labour-2026-03"),
        ("labour-{date}", "labour-2026-03-17"),
        ("q-{date:%Y}.{date:%m}", "q-2026.03"),
        ("plain-id", "plain-id"),
    ],
)
def test_a_template_gives_the_release_id_of_its_date(template, expected):
    assert render_release_id(template, MARCH) == expected


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("labour-{month}", "unknown field {month}; the only field is {date}"),
        ("labour-{date.year}", "unknown field {date.year}"),
        ("labour-{}", "unknown field {}"),
        ("labour-{date!r}", "no !conversion"),
        ("labour-{date:{x}}", "no nested field"),
        ("labour-{date:%Y", "a brace does not close"),
        ("labour {date:%Y-%m}", "gives 'labour 2026-03' on 2026-03-17, not a release id"),
        ("{date:%Y/%m}", "gives '2026/03' on 2026-03-17, not a release id"),
    ],
)
def test_a_bad_template_is_refused_naming_the_rule(template, fragment):
    with pytest.raises(SpecError) as info:
        render_release_id(template, MARCH)
    assert fragment in str(info.value)
    assert info.value.source == "command line"


def test_the_run_date_is_utc_today():
    assert isinstance(run_date(), date)


def test_the_cli_renders_the_template_before_reading_anything(tmp_path, capsys):
    spec_file = tmp_path / "small.toml"
    spec_file.write_text(SMALL_SPEC.format(tmp=tmp_path))
    assert main(["plan", str(spec_file), "--release-id", "m-{date:%Y-%m}", "--json"]) == 0
    expected = f"m-{run_date():%Y-%m}"
    assert json.loads(capsys.readouterr().out)["release_id"] == expected
    arguments = ["--release-id", "m-{date:%Y-%m}", "--date", "2025-11-30", "--quiet", "--json"]
    assert main(["run", str(spec_file), *arguments]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["release_id"] == "m-2025-11" and (tmp_path / "out" / "m-2025-11").is_dir()
    # Checked before the spec is read: a missing spec file is not what is reported.
    missing = str(tmp_path / "missing.toml")
    for bad in (["--release-id", "m-{month}"], ["--date", "2025-11-30"], ["--date", "30/11/2025"]):
        assert main(["run", missing, *bad, "--json", "--quiet"]) == 2
        captured = capsys.readouterr()
        assert "missing.toml" not in captured.err
        assert json.loads(captured.out)["status"] == "spec_error"
    assert main(["plan", str(spec_file), "--date", "2025-11-30"]) == 2
    assert "only a --release-id template uses it" in capsys.readouterr().err


def test_the_ledger_reports_each_population_as_a_table_and_as_json(tmp_path, capsys):
    spec_file = tmp_path / "small.toml"
    spec_file.write_text(SMALL_SPEC.format(tmp=tmp_path))
    for month in ("01", "02"):
        assert main(["run", str(spec_file), "--quiet", "--release-id", f"m-2026-{month}"]) == 0
    capsys.readouterr()
    ledger = str(tmp_path / "ledger.sqlite")
    assert main(["ledger", "--ledger", ledger]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == [
        "population",
        "cap",
        "spent",
        "left",
        "committed",
        "open",
        "aborted",
    ]
    row = table[1]
    assert row.startswith("small-people") and row.split()[-3:] == ["2", "0", "0"]
    assert main(["ledger", "--ledger", ledger, "--json"]) == 0
    (population,) = json.loads(capsys.readouterr().out)["populations"]
    assert population["population"] == "small-people"
    assert population["cap"] == {"rho": None, "epsilon": "8", "delta": "1/100000000"}
    assert population["releases"] == {"committed": 2, "open": 0, "aborted": 0}
    spent = population["spent"]
    assert 0 < spent["epsilon_lower"] <= spent["epsilon"] < 8
    assert population["left"]["epsilon"] == pytest.approx(8 - spent["epsilon"])
    # ε spent rounded up, with the δ it is taken at (dp_pipeline.release.ledger.phrases).
    assert f"ε {rounded(spent['epsilon'], up=True)} at δ = 1e-8" in row
    assert [entry["release_id"] for entry in population["history"]] == ["m-2026-01", "m-2026-02"]
    Ledger(tmp_path / "empty.sqlite").close()
    assert main(["ledger", "--ledger", str(tmp_path / "empty.sqlite"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["populations"] == []
