"""``dp-release run conf/census_statistics.toml``: means, variances, standard deviations
and a sum in thousands, end to end on a SQLite ledger, on pandas and on Spark (the
driver path and the one Parquet pass), byte for byte the same release."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from release_specs import operator_home

from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.read import read_release

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "conf" / "census_statistics.toml"
KEY_HEX = "3b1f9c7e5a2d8f4c6e0b9a7d3f5c1e8b2a6d4f0c9e7b5a3d1f8c6e4b2a0d9f7c"
STATISTICS = ("mean_income_by_state", "age_variance_by_sex", "age_spread_by_tenure")


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def run_cli(capsys, folder: Path, engine: str) -> Path:
    """``dp-release run`` of the example on ``engine`` in its own home and SQLite ledger."""
    folder.mkdir(parents=True)
    operator_home(folder)
    ledger = folder / "ledger.sqlite"
    capsys.readouterr()
    arguments = ["run", str(SPEC), "--engine", engine, "--persons", "4000"]
    arguments += ["--output", str(folder / "out"), "--ledger", str(ledger), "--json", "--quiet"]
    status = main(arguments)
    line = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert status == 0, line
    assert ledger.is_file()
    return folder / "out" / "census-statistics-2026"


def digests(output: Path) -> dict[str, str]:
    """The published tables' and accuracy.json's digests (the other reports carry times)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted([*output.glob("*.parquet"), output / "accuracy.json"])
    }


@pytest.fixture(scope="module")
def pandas_release(tmp_path_factory):
    """The example run once on pandas (its own home), shared by the tests of this module."""
    folder = tmp_path_factory.mktemp("pandas")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
        patch.setenv("DP_PIPELINE_HOME", str(folder / "home"))
        patch.setenv("HOME", str(folder / "home" / "user"))  # a user of its own
        (folder / "home").mkdir()
        arguments = ["run", str(SPEC), "--engine", "pandas", "--persons", "4000", "--quiet"]
        arguments += ["--output", str(folder / "out"), "--ledger", str(folder / "ledger.sqlite")]
        assert main(arguments) == 0
    return folder


def test_pandas_publishes_every_statistic_with_its_margins(pandas_release):
    output = pandas_release / "out" / "census-statistics-2026"
    released = read_release(output)
    assert set(released) == {
        "state_sex",
        *STATISTICS,
        "income_thousands_by_state",
    }
    means = released["mean_income_by_state"]
    assert list(means.columns) == ["state", "value"] and len(means) == 51
    assert means["value"].dtype == np.float64
    assert means["value"].between(0, 250_000).all()  # a mean is clipped into its bounds
    variance = released["age_variance_by_sex"]["value"]
    assert len(variance) == 2 and variance.between(0, 50**2).all()  # ((upper - lower)/2)**2
    spread = released["age_spread_by_tenure"]["value"]
    assert len(spread) == 3 and spread.between(0, 50).all()
    thousands = released["income_thousands_by_state"]["value"]
    assert thousands.dtype == np.int64 and (thousands % 1000 == 0).all()

    report = json.loads((output / "privacy_report.json").read_text())
    tables = {t["name"]: t for t in report["tables"]}
    assert [m["value"] for m in tables["age_spread_by_tenure"]["measures"]] == [
        "centered_sum",
        "count",
        "centered_sum_of_squares",
    ]
    assert tables["age_spread_by_tenure"]["granularity"] == "1/2"
    assert [m["value"] for m in tables["mean_income_by_state"]["measures"]] == ["sum", "count"]
    # count + mean (2) + var (3) + std (3) + sum: every aggregate is in the composition.
    assert len(report["accountant"]["events"]) == 1 + 2 + 3 + 3 + 1
    assert report["guarantee"]["epsilon_tight"]["upper"] <= 1
    html = (output / "report.html").read_text()
    assert "centred squares ±" in html and "mean of income in [0, 250000] step 100" in html
    accuracy = json.loads((output / "accuracy.json").read_text())["accuracy_vs_truth"]
    # The count against its truth; each ratio against the ratio of its bounded true
    # aggregates, beside its aggregates' margins; the sum in thousands has no integer truth.
    rows = {row["table"]: row for row in accuracy}
    assert list(rows) == ["state_sex", *STATISTICS]
    variance = rows["age_variance_by_sex"]
    assert variance["released_cells"] == 2 and variance["max_abs_error"] <= 50**2
    assert variance["margins_of_error"] == {
        m["value"]: m["margin_of_error"] for m in tables["age_variance_by_sex"]["measures"]
    }
    assert rows["mean_income_by_state"]["released_cells"] == 51
    assert "aggregates' margins: sum ±" in html

    entries = Ledger(pandas_release / "ledger.sqlite").history()
    assert [(e.release_id, e.status) for e in entries] == [("census-statistics-2026", "committed")]


@pytest.mark.spark
def test_spark_parquet_pass_publishes_the_same_bytes(
    pandas_release, tmp_path, capsys, spark, parquet_pass_calls
):
    output = run_cli(capsys, tmp_path / "spark", "spark")
    # The count, mean and sum in the one pass; each variance's derived columns then take
    # the Spark SQL aggregation (the pass declines a frame that is not a bare scan).
    assert parquet_pass_calls == [True, False, False]
    expected = digests(pandas_release / "out" / "census-statistics-2026")
    assert digests(output) == expected and len(expected) == 6


@pytest.mark.spark
@pytest.mark.driver_aggregation
def test_spark_driver_path_publishes_the_same_bytes(pandas_release, tmp_path, capsys, spark):
    output = run_cli(capsys, tmp_path / "spark", "spark")
    assert digests(output) == digests(pandas_release / "out" / "census-statistics-2026")
