"""``[postprocess] sums = true``: sum tables of one clamped column made consistent too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from release_specs import operator_home, operator_paths

from dp_pipeline.release.run import Progress, read_release, run_release
from dp_pipeline.release.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[4]
QUIET = Progress(quiet=True)

SPEC = """
[release]
id = "sums-1"
noise_partitions = 3

[population]
name = "sum-people"
cap = {{ epsilon = 8, delta = 1e-8 }}

[privacy_unit]
column = "person_id"

[budget]
epsilon = 2
delta = 1e-9

[input]
synthetic_persons = 3000

[output]
dir = "{tmp}/out"

[run]
engine = "{engine}"
master = "local[1]"
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"

[domains]
county = {{ start = 1, stop = 3143 }}
state = {{ start = 1, stop = 51 }}
sex = ["F", "M"]

[hierarchy]
levels = ["state", "county"]
mapping = "counties.csv"

[postprocess]
{sums}

[[tables]]
name = "state_sex"
keys = ["state", "sex"]
share = "1/4"

[[tables]]
name = "county_income"
keys = ["county"]
statistic = "sum"
value = "income"
lower = 0
upper = 100000
share = "1/4"

[[tables]]
name = "state_income"
keys = ["state"]
statistic = "sum"
value = "income"
lower = 0
upper = 100000
share = "1/4"

[[tables]]
name = "state_sex_income"
keys = ["state", "sex"]
statistic = "sum"
value = "income"
lower = {lower}
upper = 100000
share = "1/4"
"""


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv(
        "DP_PIPELINE_MASTER_KEY", "a7d393ef6fecbbd9712b118e67aee439871402fd15b4ba05fd5f5db5b4d22ede"
    )


def sums_spec(folder: Path, engine="pandas", sums="sums = true", lower=0):
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "conf" / "census_demo_counties.csv", folder / "counties.csv")
    text = SPEC.format(tmp=folder, engine=engine, sums=sums, lower=lower)
    (folder / "sums.toml").write_text(text)
    operator_home(folder)  # its run's home: one key, one ledger per home (key binding)
    return load_spec(folder / "sums.toml", **operator_paths(folder))


def state_totals(county_values: np.ndarray) -> np.ndarray:
    totals = np.zeros(51, dtype=np.int64)
    np.add.at(totals, np.arange(3143) * 51 // 3143, county_values)
    return totals


def test_sum_tables_of_one_column_and_bounds_agree_and_are_nonnegative(tmp_path):
    spec = sums_spec(tmp_path)
    assert spec.postprocess.tables == ("state_sex",)
    assert spec.postprocess.sum_sets == (("county_income", "state_income", "state_sex_income"),)
    result = run_release(spec, progress=QUIET)
    tables = read_release(result.output)
    county = tables["county_income"]["value"].to_numpy()
    state = tables["state_income"]["value"].to_numpy()
    by_sex = tables["state_sex_income"]["value"].to_numpy().reshape(51, 2)
    assert np.array_equal(state_totals(county), state)  # counties sum to their state
    assert np.array_equal(by_sex.sum(axis=1), state)  # every table the same state sums
    for name in ("county_income", "state_income", "state_sex_income"):
        frame = tables[name]
        assert frame["value"].dtype.kind == "i" and (frame["value"] >= 0).all()
        assert list(frame.columns)[-2:] == ["value", "raw_value"]
    assert (tables["county_income"]["raw_value"] < 0).any()  # what the raw sums look like
    report = json.loads((result.output / "privacy_report.json").read_text())["postprocessing"]
    assert report["sum_sets"] == [
        {"tables": ["county_income", "state_income", "state_sex_income"], "nonnegative": True}
    ]
    assert report["tables"] == ["state_sex", "county_income", "state_income", "state_sex_income"]
    accuracy = json.loads((result.output / "accuracy.json").read_text())["accuracy_vs_truth"]
    rows = {row["table"]: row for row in accuracy}
    # Non-negativity helps most where the true sums are small (the counties).
    assert rows["county_income"]["rmse"] < rows["county_income"]["raw"]["rmse"]


def test_sums_with_other_bounds_are_another_set_and_a_negative_lower_bound_allows_negatives(
    tmp_path,
):
    spec = sums_spec(tmp_path, lower=-50000)
    assert spec.postprocess.sum_sets == (
        ("county_income", "state_income"),
        ("state_sex_income",),
    )
    result = run_release(spec, progress=QUIET)
    report = json.loads((result.output / "privacy_report.json").read_text())["postprocessing"]
    assert report["sum_sets"] == [
        {"tables": ["county_income", "state_income"], "nonnegative": True},
        {"tables": ["state_sex_income"], "nonnegative": False},
    ]
    tables = read_release(result.output)
    county = tables["county_income"]["value"].to_numpy()
    assert np.array_equal(state_totals(county), tables["state_income"]["value"].to_numpy())
    # Clamped below at -50,000, a state's true sum may be negative: no projection to >= 0,
    # but the set is still integers (its own national total), its noise left unbiased.
    alone = tables["state_sex_income"]
    assert alone["value"].dtype.kind == "i"
    assert np.abs(alone["value"] - alone["raw_value"]).max() <= 1


def test_without_sums_the_sum_tables_stay_as_released_and_the_identity_is_unchanged(tmp_path):
    spec = sums_spec(tmp_path / "off", sums="consistent = true")
    assert spec.postprocess.sum_sets == () and "sums" not in spec.postprocess.to_dict()
    tables = read_release(run_release(spec, progress=QUIET).output)
    assert "raw_value" not in tables["state_income"]
    with_sums = sums_spec(tmp_path / "on")
    # The release identity describes post-processing by to_dict: sums change it.
    assert with_sums.postprocess.to_dict()["sum_sets"] == [
        ["county_income", "state_income", "state_sex_income"]
    ]


@pytest.mark.spark
def test_pandas_and_spark_publish_the_same_consistent_sums(tmp_path, spark):
    pandas_run = run_release(sums_spec(tmp_path / "p"), progress=QUIET)
    spark_run = run_release(sums_spec(tmp_path / "s", "spark"), progress=QUIET, spark=spark)
    for path in sorted(pandas_run.output.glob("*.parquet")):
        assert path.read_bytes() == (spark_run.output / path.name).read_bytes(), path.name
