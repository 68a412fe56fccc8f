"""Releases with [hierarchy] and [postprocess]: consistent published tables on both engines."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from release_specs import operator_home, operator_paths

from dp_pipeline.postprocess.margins import NOISY_CLASSES
from dp_pipeline.release.ledger.records import ReleaseIdReuseError
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.run import Progress, read_release, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.tables.consistency import least_squares_margins

ROOT = Path(__file__).resolve().parents[4]
QUIET = Progress(quiet=True)

SPEC = """
[release]
id = "geo-1"
noise_partitions = 3

[population]
name = "geo-people"
cap = {{ epsilon = 8, delta = 1e-8 }}

[privacy_unit]
column = "person_id"

[budget]
epsilon = 2
delta = 1e-9

[input]
synthetic_persons = 4000

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
tenure = ["owned", "rented", "group_quarters"]

[hierarchy]
levels = ["state", "county"]
mapping = "counties.csv"

[postprocess]
consistent = true

[[tables]]
name = "county_sex"
keys = ["county", "sex"]
share = "1/4"

[[tables]]
name = "state_sex"
keys = ["state", "sex"]
share = "1/4"

[[tables]]
name = "state_tenure"
keys = ["state", "tenure"]
share = "1/4"

[[tables]]
name = "state_income"
keys = ["state"]
statistic = "sum"
value = "income"
lower = 0
upper = 100000
share = "1/4"
"""


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv(
        "DP_PIPELINE_MASTER_KEY", "a7d393ef6fecbbd9712b118e67aee439871402fd15b4ba05fd5f5db5b4d22ede"
    )


def geo_spec(folder: Path, engine: str = "pandas", mapping: Path | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(mapping or ROOT / "conf" / "census_demo_counties.csv", folder / "counties.csv")
    (folder / "geo.toml").write_text(SPEC.format(tmp=folder, engine=engine))
    # The folder is its run's operator home: one key, one ledger per home (key binding).
    operator_home(folder)
    return load_spec(folder / "geo.toml", **operator_paths(folder))


def state_of_county() -> np.ndarray:
    return np.arange(3143) * 51 // 3143


def check_consistent(tables) -> None:
    county = tables["county_sex"]["value"].to_numpy().reshape(3143, 2)
    state = tables["state_sex"]["value"].to_numpy().reshape(51, 2)
    tenure = tables["state_tenure"]["value"].to_numpy().reshape(51, 3)
    by_state = np.zeros((51, 2), dtype=county.dtype)
    np.add.at(by_state, state_of_county(), county)
    assert np.array_equal(by_state, state)  # counties sum to their state's cells
    assert np.array_equal(state.sum(axis=1), tenure.sum(axis=1))  # same state totals
    assert county.sum() == state.sum() == tenure.sum()  # one national total
    for name in ("county_sex", "state_sex", "state_tenure"):
        frame = tables[name]
        assert frame["value"].dtype.kind == "i" and (frame["value"] >= 0).all()
        assert frame["raw_value"].dtype.kind == "i"
        assert list(frame.columns)[-2:] == ["value", "raw_value"]
    # The raw noisy counts do not agree (that is why post-processing exists).
    raw = tables["county_sex"]["raw_value"].to_numpy().reshape(3143, 2)
    assert (raw < 0).any()
    assert "raw_value" not in tables["state_income"]


def test_published_margins_agree_exactly_and_cost_no_privacy(tmp_path):
    spec = geo_spec(tmp_path)
    result = run_release(spec, progress=QUIET)
    tables = read_release(result.output)
    check_consistent(tables)
    report = json.loads((result.output / "privacy_report.json").read_text())
    assert report["postprocessing"]["tables"] == ["county_sex", "state_sex", "state_tenure"]
    assert report["postprocessing"]["privacy_cost"].startswith("none: post-processing")
    accuracy = json.loads((result.output / "accuracy.json").read_text())["accuracy_vs_truth"]
    rows = {row["table"]: row for row in accuracy}
    for name in ("county_sex", "state_sex", "state_tenure"):
        assert rows[name]["raw"]["rmse"] > 0 and rows[name]["rmse"] > 0
        assert "state_rmse" in rows[name]["margins"]["consistent"]
    assert "raw" not in rows["state_income"]
    html = (result.output / "report.html").read_text()
    assert "Post-processing: raw noisy counts and consistent estimates" in html
    assert "costs no privacy" in html


def test_value_has_a_margin_of_error_that_covers_it(tmp_path):
    """privacy_report.json gives each post-processed table the 95% margin of ``value``;
    accuracy.json checks it (and the RMSE) by class of true count; the report shows it
    beside the raw margin."""
    spec = geo_spec(tmp_path)
    result = run_release(spec, progress=QUIET)
    tables = read_release(result.output)
    report = json.loads((result.output / "privacy_report.json").read_text())
    margins = report["postprocessing"]["value_margin_of_error"]
    assert set(margins) == {"county_sex", "state_sex", "state_tenure"}
    raw = {t["name"]: t["margin_of_error"] for t in report["tables"]}
    plans = {p.table.name: p for p in plan_release(spec).tables}
    least_squares = least_squares_margins(spec, plans, list(margins))
    for name, margin in margins.items():
        # The least squares' own margin, from its exact variance: at most the raw one.
        assert least_squares[name] <= raw[name]
        moved = np.abs(tables[name]["value"] - tables[name]["raw_value"])
        assert isinstance(margin, int) and int(least_squares[name]) <= margin
        assert margin <= raw[name] + int(moved.max()) + 1
    meaning = report["postprocessing"]["value_margin_of_error_meaning"]
    assert "union bound" in meaning and "not a guarantee" in meaning
    accuracy = json.loads((result.output / "accuracy.json").read_text())["accuracy_vs_truth"]
    rows = {row["table"]: row for row in accuracy}
    classes = rows["county_sex"]["by_true_count"]
    assert classes[0]["true_count"] == "0"
    assert sum(c["cells"] for c in classes) == 3143 * 2
    for c in classes:
        assert c["value_margin_of_error"] == margins["county_sex"]
        if c["cells"] >= 300:
            assert c["within_value_margin"] >= 0.9
    import pyarrow.parquet as pq

    schema = pq.read_schema(result.output / "county_sex.parquet")
    assert b"value_margin" not in b"".join((schema.metadata or {}).values())
    html = (result.output / "report.html").read_text()
    assert "value margin (95%" in html and f"±{margins['county_sex']:,}" in html
    assert "by the union bound at least 90% of a table's cells expected within it" in html
    assert "value within its margin" in html
    # Margins per class of the noisy value: each from the moves of that class's cells.
    by_class = report["postprocessing"]["value_margin_of_error_by_noisy_count"]
    assert set(by_class) == set(margins)
    for name, per_class in by_class.items():
        raw_values = tables[name]["raw_value"].to_numpy()
        present = {
            label
            for label, pick in zip(
                NOISY_CLASSES,
                (raw_values <= 20, (raw_values > 20) & (raw_values <= 100), raw_values > 100),
                strict=True,
            )
            if pick.any()
        }
        assert set(per_class) == present, name
        assert all(int(least_squares[name]) <= m for m in per_class.values())
    assert "By class of the noisy value" in html and "raw_value 20 or less (95%)" in html


def test_rerunning_a_committed_release_publishes_the_same_files(tmp_path):
    spec = geo_spec(tmp_path)
    first = run_release(spec, progress=QUIET)
    before = {p.name: p.read_bytes() for p in first.output.iterdir()}
    again = run_release(spec, progress=QUIET)
    assert again.outcome == "already_committed"
    assert {p.name: p.read_bytes() for p in again.output.iterdir()} == before


def test_a_committed_release_id_with_a_changed_mapping_is_refused(tmp_path):
    spec = geo_spec(tmp_path)
    run_release(spec, progress=QUIET)
    moved = tmp_path / "moved.csv"
    lines = (ROOT / "conf" / "census_demo_counties.csv").read_text().splitlines()
    lines[1] = "1,2"  # county 1 now in state 2
    moved.write_text("\n".join(lines) + "\n")
    changed = geo_spec(tmp_path, mapping=moved)
    with pytest.raises(ReleaseIdReuseError, match="these parts differ: hierarchy changed"):
        run_release(changed, progress=QUIET)


@pytest.mark.spark
def test_pandas_and_spark_publish_the_same_consistent_tables_bit_for_bit(tmp_path, spark):
    pandas_run = run_release(geo_spec(tmp_path / "p"), progress=QUIET)
    spark_run = run_release(geo_spec(tmp_path / "s", engine="spark"), progress=QUIET, spark=spark)
    pandas_tables, spark_tables = read_release(pandas_run.output), read_release(spark_run.output)
    check_consistent(spark_tables)
    for name, frame in pandas_tables.items():
        for column in frame.columns:
            assert frame[column].astype(object).tolist() == (
                spark_tables[name][column].astype(object).tolist()
            ), (name, column)


def test_discrete_laplace_tables_are_weighted_by_their_exact_variance(tmp_path):
    from dp_pipeline.mechanisms import DiscreteLaplace
    from dp_pipeline.release.plan.release_plan import plan_release
    from dp_pipeline.release.tables.consistency import noise_variance

    spec = geo_spec(tmp_path)
    text = (
        (tmp_path / "geo.toml")
        .read_text()
        .replace("noise_partitions = 3", 'noise_partitions = 3\nnoise = "discrete_laplace"')
    )
    (tmp_path / "geo.toml").write_text(text)
    spec = load_spec(tmp_path / "geo.toml")
    plan = plan_release(spec)
    table = plan.tables[0]
    assert isinstance(table.mechanism, DiscreteLaplace)
    q = np.exp(-1 / float(table.mechanism.scale))
    assert float(noise_variance(table)) == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-12)
    check_consistent(read_release(run_release(spec, progress=QUIET).output))


@pytest.mark.parametrize("nonnegative", [True, False])
def test_consistent_estimates_without_rounding_are_published_as_floats(tmp_path, nonnegative):
    spec = geo_spec(tmp_path)
    text = (tmp_path / "geo.toml").read_text()
    flags = f"consistent = true\ninteger = false\nnonnegative = {str(nonnegative).lower()}"
    (tmp_path / "geo.toml").write_text(text.replace("consistent = true", flags))
    spec = load_spec(tmp_path / "geo.toml")
    tables = read_release(run_release(spec, progress=QUIET).output)
    county = tables["county_sex"]["value"].to_numpy().reshape(3143, 2)
    state = tables["state_sex"]["value"].to_numpy().reshape(51, 2)
    assert county.dtype == np.float64 and tables["county_sex"]["raw_value"].dtype.kind == "i"
    by_state = np.zeros((51, 2))
    np.add.at(by_state, state_of_county(), county)
    np.testing.assert_allclose(by_state, state, atol=1e-6)  # margins agree, unrounded
    assert (county >= 0).all() if nonnegative else (county < 0).any()
    assert not np.array_equal(county, np.round(county))
    assert tables["state_income"]["value"].dtype.kind == "i"  # not post-processed


def test_noise_variances_too_far_apart_for_the_solver_are_refused_at_plan_time(tmp_path):
    """A national table with a tiny share: σ² 2,500 times the county table's. The solve
    with a national table is accurate to a ratio of 1,000, so the plan step refuses it,
    before the ledger or any data is touched (it used to fail after the noise)."""
    from dp_pipeline.release.plan.release_plan import plan_release
    from dp_pipeline.release.spec.model import SpecError

    text = SPEC.replace(
        'name = "state_tenure"\nkeys = ["state", "tenure"]\nshare = "1/4"',
        (
            'name = "state_tenure"\nkeys = ["state", "tenure"]\nshare = "2499/10000"\n\n'
            '[[tables]]\nname = "sex"\nkeys = ["sex"]\nshare = "1/10000"'
        ),
    )
    folder = tmp_path / "ratio"
    folder.mkdir()
    shutil.copy(ROOT / "conf" / "census_demo_counties.csv", folder / "counties.csv")
    (folder / "geo.toml").write_text(text.format(tmp=folder, engine="pandas"))
    spec = load_spec(folder / "geo.toml", **operator_paths(folder))
    with pytest.raises(SpecError) as refused:
        plan_release(spec)
    message = str(refused.value)
    assert "postprocess: the noise variance of table 'sex'" in message
    assert "2.5e+03 times that of table 'county_sex'" in message
    assert "accurate up to a ratio of 1,000" in message and "closer budget shares" in message
    assert not (folder / "ledger.sqlite").exists()


def test_the_report_describes_the_post_processing_without_the_truth():
    """Real input has no accuracy section; the report still says what was done to
    ``value`` and gives its margins beside the raw ones, from the privacy report alone."""
    from dp_pipeline.release.report.postprocess import postprocessing_description

    report = {
        "postprocessing": {
            "method": "wls+topdown-nonnegative-integer",
            "consistent": True,
            "nonnegative": True,
            "integer": True,
            "tables": ["county_sex", "state_sex"],
            "value_margin_of_error": {"county_sex": 14, "state_sex": 21},
            "value_margin_of_error_meaning": "95% margin of error of each cell's value",
        }
    }
    html = "\n".join(postprocessing_description(report, {"county_sex": 9, "state_sex": 18}))
    assert "weighted least squares" in html and "closest non-negative table" in html
    assert "biases cells whose true count is near 0 upwards" in html
    assert "<td>county_sex</td><td>±9</td><td>±14</td>" in html
    assert "<td>state_sex</td><td>±18</td><td>±21</td>" in html
    assert postprocessing_description({}, {}) == []


def test_tables_with_sigma2_below_one_are_weighted_by_their_true_variance(tmp_path):
    """The state_sex table's σ² is ~0.07, its noise variance ~0.002: weighted by σ², the least
    squares pulled the other tables' noise into it (RMSE 0.025 where the raw counts were
    exact); weighted by the variance of the noise drawn, it stays within a tenth of its
    noise's standard deviation of the raw counts, and no table's RMSE exceeds its raw one by
    more than that."""
    from dp_pipeline.accounting.noise_variance import discrete_gaussian_variance
    from dp_pipeline.release.plan.release_plan import plan_release
    from dp_pipeline.release.tables.consistency import noise_variance

    geo_spec(tmp_path)
    text = (tmp_path / "geo.toml").read_text()
    text = text.replace("epsilon = 8,", "epsilon = 100,").replace("epsilon = 2\n", "epsilon = 30\n")
    text = text.replace(
        "consistent = true", "consistent = true\ninteger = false\nnonnegative = false"
    )
    for share in ("1/16", "7/8", "1/32", "1/32"):
        text = text.replace('share = "1/4"', f'share = "{share}"', 1)
    (tmp_path / "geo.toml").write_text(text)
    spec = load_spec(tmp_path / "geo.toml")
    plans = {p.table.name: p for p in plan_release(spec).tables}
    small = plans["state_sex"]
    assert small.mechanism.sigma2 < Fraction(1, 10)
    assert noise_variance(small) == discrete_gaussian_variance(small.mechanism.sigma2)
    assert noise_variance(small) < small.mechanism.sigma2 / 20
    result = run_release(spec, progress=QUIET)
    accuracy = json.loads((result.output / "accuracy.json").read_text())["accuracy_vs_truth"]
    rows = {row["table"]: row for row in accuracy}
    for name in ("county_sex", "state_sex", "state_tenure"):
        sd = float(noise_variance(plans[name])) ** 0.5
        assert rows[name]["rmse"] <= rows[name]["raw"]["rmse"] + sd / 10, name
    assert rows["state_sex"]["rmse"] < 0.005


def input_breaking_the_hierarchy(
    folder: Path, persons: int = 100_000, null_counties: float = 0.02
) -> pd.DataFrame:
    """Synthetic persons with 5% of their states not their county's and 2% null counties."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dp_pipeline.datasets.synthetic import census_chunk

    frame = census_chunk(2026, 0, persons).to_pandas()
    rng = np.random.default_rng(23)  # test data only
    wrong = rng.random(persons) < 0.05
    frame.loc[wrong, "state"] = frame.loc[wrong, "state"] % 51 + 1  # the next state
    frame["county"] = pd.array(frame["county"], dtype="Int32")
    frame.loc[~wrong & (rng.random(persons) < null_counties), "county"] = pd.NA
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), folder / "input.parquet")
    return frame


def hierarchy_spec(folder: Path, engine: str = "pandas"):
    geo_spec(folder, engine)
    text = (folder / "geo.toml").read_text()
    text = text.replace("synthetic_persons = 4000", f'path = "{folder}/input.parquet"')
    (folder / "geo.toml").write_text(text)
    return load_spec(folder / "geo.toml")


def rmse_against_valid_rows(tables, frame: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """(RMSE of the consistent value, of the raw noisy count) against the persons whose
    geography agrees with the mapping: the persons every table of the set describes."""
    valid = frame["county"].notna().to_numpy(bool).copy()  # pandas 3: a read-only view
    county = frame["county"].fillna(1).to_numpy(np.int64)
    valid &= frame["state"].to_numpy() == state_of_county()[county - 1] + 1
    persons = frame[valid]
    out = {}
    for name, keys in (
        ("county_sex", ["county", "sex"]),
        ("state_sex", ["state", "sex"]),
        ("state_tenure", ["state", "tenure"]),
    ):
        table = tables[name]
        truth = (
            persons.groupby(keys, observed=True)
            .size()
            .reindex(
                pd.MultiIndex.from_frame(table[keys].astype(persons[keys].dtypes)), fill_value=0
            )
            .to_numpy()
        )
        errors = [table[column].to_numpy(np.float64) - truth for column in ("value", "raw_value")]
        out[name] = tuple(float(np.sqrt(np.mean(e**2))) for e in errors)
    return out


def test_rows_that_break_the_hierarchy_leave_every_table_describing_the_same_persons(tmp_path):
    """5% of states wrong and 2% of counties null. The state tables used to count persons
    the county tables did not (their raw counts off the persons the county tables describe
    by 10-30x the noise, and least squares spread that into every county); every combined
    table now drops those rows, so each raw table is at its noise level against the same
    persons and the consistent tables are no worse than the raw ones."""
    from dp_pipeline.release.plan.release_plan import plan_release

    frame = input_breaking_the_hierarchy(tmp_path)
    spec = hierarchy_spec(tmp_path)
    plan = plan_release(spec)
    tables = read_release(run_release(spec, progress=QUIET).output)
    check_consistent(tables)
    for name, (consistent, raw) in rmse_against_valid_rows(tables, frame).items():
        assert raw <= 1.25 * plan.table(name).noise_sd, (name, raw)
        assert consistent <= raw, (name, consistent, raw)


@pytest.mark.spark
@pytest.mark.parametrize("path", ["parquet_pass", "spark_sql"])
def test_pandas_and_spark_drop_the_same_rows_breaking_the_hierarchy(
    tmp_path, spark, monkeypatch, path
):
    from dp_pipeline.engines.spark import parquet_plan

    if path == "spark_sql":
        monkeypatch.setattr(parquet_plan, "ONE_PASS_CELLS", 0)  # the Spark SQL jobs
    input_breaking_the_hierarchy(tmp_path / "p", persons=20_000)
    shutil.copytree(tmp_path / "p", tmp_path / "s")
    pandas_run = run_release(hierarchy_spec(tmp_path / "p"), progress=QUIET)
    spark_run = run_release(hierarchy_spec(tmp_path / "s", "spark"), progress=QUIET, spark=spark)
    pandas_tables, spark_tables = read_release(pandas_run.output), read_release(spark_run.output)
    check_consistent(spark_tables)
    for name, frame in pandas_tables.items():
        for column in frame.columns:
            assert frame[column].astype(object).tolist() == (
                spark_tables[name][column].astype(object).tolist()
            ), (name, column)
    assert pandas_run.diagnostics == spark_run.diagnostics
    for name in ("county_sex", "state_sex", "state_tenure"):
        assert spark_run.diagnostics[name].rows_hierarchy_mismatch > 0


@pytest.mark.parametrize("engine", ["pandas", pytest.param("spark", marks=pytest.mark.spark)])
def test_rows_breaking_the_hierarchy_enter_the_noisy_invalid_row_count(tmp_path, request, engine):
    """Under on_invalid = "error" rows that break the mapping are invalid rows like the
    others: they enter the noisy, accounted count, and the refusal names no column."""
    from dp_pipeline.release.ledger.store import Ledger
    from dp_pipeline.release.tables.invalid_rows import InvalidRowsRefusedError

    spark = request.getfixturevalue("spark") if engine == "spark" else None
    input_breaking_the_hierarchy(tmp_path, persons=2_000, null_counties=0)
    hierarchy_spec(tmp_path, engine)
    text = (tmp_path / "geo.toml").read_text().replace('share = "1/4"', 'share = "1/5"')
    fields = 'on_invalid = "error"\ninvalid_share = "1/5"\ninvalid_threshold = 0\n'
    (tmp_path / "geo.toml").write_text(text.replace("[input]\n", "[input]\n" + fields))
    spec = load_spec(tmp_path / "geo.toml")
    with pytest.raises(InvalidRowsRefusedError) as info:
        run_release(spec, progress=QUIET, spark=spark)
    message = str(info.value)
    assert "the noisy count of privacy units with an invalid row is " in message
    assert "above input.invalid_threshold = 0" in message
    assert "county" not in message and "state" not in message
    # Read, so charged: the reservation stays, nothing is published.
    assert Ledger(spec.ledger_path).entry(spec.release_id).status == "reserved"
    assert not (tmp_path / "out" / spec.release_id).exists()
