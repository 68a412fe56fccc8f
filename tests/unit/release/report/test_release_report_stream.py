"""The report's accuracy from batches: exact, the same however a table is split, as before."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from release_specs import operator_paths

from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.report.accuracy import TableAccuracy, accuracy_summary, table_accuracies
from dp_pipeline.release.report.exact_errors import ErrorTally, exact_float_sums, histogram_counts
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.tables.on_pandas import full_index

ROOT = Path(__file__).resolve().parents[4]

SPEC = """
[release]
id = "acc-1"

[population]
name = "acc-people"
cap = {{ epsilon = 8, delta = 1e-8 }}

[privacy_unit]
column = "person_id"

[budget]
epsilon = 2
delta = 1e-9

[input]
synthetic_persons = 1000

[output]
dir = "{tmp}/out"

[run]
engine = "pandas"
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
name = "sex"
keys = ["sex"]
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


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("accuracy")
    shutil.copy(ROOT / "conf" / "census_demo_counties.csv", folder / "counties.csv")
    (folder / "acc.toml").write_text(SPEC.format(tmp=folder))
    return plan_release(load_spec(folder / "acc.toml", **operator_paths(folder)))


def released(plan, name: str, seed: int, fractional: bool = False) -> pd.DataFrame:
    """A table's released rows in cell order, with made-up noise (test data)."""
    rng = np.random.default_rng(seed)
    table_plan = next(t for t in plan.tables if t.table.name == name)
    keys = list(table_plan.table.keys)
    frame = full_index(plan.spec, keys).to_frame(index=False)
    truth = rng.poisson(20, len(frame)).astype(np.int64)
    noisy = truth + rng.integers(-40, 41, len(frame))
    frame["value"] = noisy
    frame["true_value"] = truth
    if name in plan.spec.postprocess.tables:
        frame["raw_value"] = noisy
        if fractional:
            frame["value"] = noisy + rng.normal(0, 3, len(frame))
        else:
            frame["value"] = np.maximum(noisy + rng.integers(-3, 4, len(frame)), 0)
    return frame


def in_batches(frame: pd.DataFrame, seed: int) -> list[pd.DataFrame]:
    """Uneven batches: some of one row, one empty, the rest of random sizes."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, len(frame)), size=min(25, len(frame) - 1)))
    cuts = np.unique(np.concatenate([[1, 2], cuts, [len(frame)]]))
    starts = np.concatenate([[0], cuts[:-1]])
    batches = [frame.iloc[start:stop] for start, stop in zip(starts, cuts, strict=True)]
    return [batches[0], frame.iloc[0:0], *batches[1:]]


def accuracy_of(plan, name: str, batches) -> TableAccuracy:
    accuracy = TableAccuracy(plan, next(t for t in plan.tables if t.table.name == name))
    for batch in batches:
        accuracy.add(batch)
    return accuracy


def reference_row(plan, name: str, frame: pd.DataFrame) -> dict:
    """The whole-table float formulas (numpy over all cells at once)."""
    table_plan = next(t for t in plan.tables if t.table.name == name)
    truth = frame["true_value"].to_numpy(np.int64)

    def figures(column: str) -> dict:
        error = frame[column].to_numpy(np.float64) - truth
        return {
            "mean_abs_error": float(np.abs(error).mean()),
            "rmse": float(np.sqrt((error**2).mean())),
            "max_abs_error": float(np.abs(error).max()),
            "within_margin": float((np.abs(error) <= table_plan.margin_of_error).mean()),
        }

    row = {"table": name, "cells": len(frame), **figures("value")}
    if "raw_value" in frame:
        row["raw"] = figures("raw_value")
        keys = list(table_plan.table.keys)
        shape = [len(plan.spec.domains[k]) for k in keys]
        parents = np.asarray(plan.spec.hierarchy.parents[0])
        row["margins"] = {}
        for label, column in (("raw", "raw_value"), ("consistent", "value")):
            error = (frame[column].to_numpy(np.float64) - truth).reshape(shape)
            row["margins"][label] = {"national_abs_error": float(abs(error.sum()))}
            if keys[0] not in ("state", "county"):
                continue
            by_state = error.sum(axis=tuple(range(1, len(keys))))
            if keys[0] == "county":
                rolled = np.zeros(parents.max() + 1)
                np.add.at(rolled, parents, by_state)
                by_state = rolled
            row["margins"][label]["state_rmse"] = float(np.sqrt((by_state**2).mean()))
    return row


def test_integer_errors_equal_the_whole_table_formulas(plan):
    for seed, name in enumerate(("county_sex", "state_sex", "sex", "state_income")):
        frame = released(plan, name, seed)
        row = accuracy_of(plan, name, [frame]).summary()
        expected = reference_row(plan, name, frame)
        assert {k: row[k] for k in expected} == expected
        assert isinstance(row["max_abs_error"], int)
        table_plan = next(t for t in plan.tables if t.table.name == name)
        assert row["sigma"] == table_plan.noise_sd
        assert row["margin_of_error"] == table_plan.margin_of_error
        assert ("margins" in row) == (name in plan.spec.postprocess.tables)


@pytest.mark.parametrize("fractional", [False, True])
def test_summary_and_histogram_do_not_depend_on_the_batches(plan, fractional):
    for seed, name in enumerate(("county_sex", "state_sex", "sex", "state_income")):
        frame = released(plan, name, seed, fractional)
        whole = accuracy_of(plan, name, [frame])
        split = accuracy_of(plan, name, in_batches(frame, seed))
        shuffled = accuracy_of(plan, name, in_batches(frame.sample(frac=1, random_state=seed), 7))
        assert split.summary() == whole.summary() == shuffled.summary()
        one, many = whole.histogram(), split.histogram()
        assert set(one) == set(many)
        for part in one:
            assert np.array_equal(one[part], many[part])


def test_fractional_estimates_are_summed_exactly(plan):
    frame = released(plan, "county_sex", 3, fractional=True)
    row = accuracy_of(plan, "county_sex", in_batches(frame, 3)).summary()
    truth = frame["true_value"].to_numpy(np.int64)
    errors = [Fraction(float(e)) for e in frame["value"].to_numpy(np.float64) - truth]
    assert row["mean_abs_error"] == float(sum(abs(e) for e in errors) / len(errors))
    assert row["rmse"] == float(np.sqrt(float(sum(e * e for e in errors) / len(errors))))
    expected = reference_row(plan, "county_sex", frame)  # float sums: equal up to rounding
    assert row["rmse"] == pytest.approx(expected["rmse"], rel=1e-12)
    for label in ("raw", "consistent"):
        assert row["margins"][label] == pytest.approx(expected["margins"][label], rel=1e-9)


def test_histogram_counts_are_numpys_over_the_whole_table(plan):
    frame = released(plan, "county_sex", 5)
    histogram = accuracy_of(plan, "county_sex", in_batches(frame, 5)).histogram()
    truth = frame["true_value"].to_numpy(np.int64)
    raw = frame["raw_value"].to_numpy(np.float64) - truth
    consistent = frame["value"].to_numpy(np.float64) - truth
    edges = np.histogram_bin_edges(np.concatenate([raw, consistent]), bins=60)
    assert np.array_equal(histogram["edges"], edges)
    assert np.array_equal(histogram["raw"], np.histogram(raw, bins=edges)[0])
    assert np.array_equal(histogram["consistent"], np.histogram(consistent, bins=edges)[0])
    sums = released(plan, "state_income", 6)  # not post-processed: one histogram
    single = accuracy_of(plan, "state_income", [sums]).histogram()
    errors = sums["value"].to_numpy(np.float64) - sums["true_value"].to_numpy(np.int64)
    assert set(single) == {"edges", "consistent"}
    assert np.array_equal(single["consistent"], np.histogram(errors, bins=60)[0])


def test_histogram_counts_of_a_distribution_match_numpy_on_edge_values():
    rng = np.random.default_rng(11)
    errors = rng.normal(0, 5, 2000).round(1)
    values, counts = np.unique(errors, return_counts=True)
    edges = np.histogram_bin_edges(errors, bins=60)
    assert np.array_equal(histogram_counts(values, counts, edges), np.histogram(errors, edges)[0])
    constant = np.full(5, 3.0)  # one distinct value: numpy's bins are value ± 0.5
    edges = np.histogram_bin_edges(constant, bins=60)
    assert np.array_equal(
        histogram_counts(np.array([3.0]), np.array([5]), edges), np.histogram(constant, edges)[0]
    )


def test_float_sums_are_exact_rationals_over_every_exponent():
    rng = np.random.default_rng(2)
    values = rng.normal(0, 1, 3000) * 2.0 ** rng.integers(-1070, 1000, 3000)
    values[:3] = [5e-324, -5e-324, 0.0]  # subnormals and zero
    groups = rng.integers(0, 4, values.size)
    sums = exact_float_sums(values, groups, 4)
    for group in range(4):
        assert sums[group] == sum(Fraction(float(v)) for v in values[groups == group])
    halves = [
        exact_float_sums(part, g, 4)
        for part, g in ((values[:7], groups[:7]), (values[7:], groups[7:]))
    ]
    assert [a + b for a, b in zip(*halves, strict=True)] == sums


def test_integer_tallies_do_not_overflow():
    errors = np.array([2**61, -(2**61), 2**61 - 1, 2**61] * 4, dtype=np.int64)
    tally = ErrorTally(margin=10)
    tally.add(errors)
    tally.add(errors[:3])
    everything = [int(e) for e in errors] + [int(e) for e in errors[:3]]
    assert tally.sum_abs == sum(abs(e) for e in everything)
    assert tally.sum_squares == sum(e * e for e in everything)
    assert tally.total == sum(everything)
    assert tally.max_abs == 2**61 and tally.within == 0


def test_float_squares_are_exact():
    rng = np.random.default_rng(4)
    errors = rng.normal(0, 1e3, 500)
    tally = ErrorTally(margin=10)
    tally.add(errors)
    assert tally.sum_squares == sum(Fraction(float(e)) ** 2 for e in errors)


def test_selections_are_summarized_from_their_rows(tmp_path):
    from dp_pipeline.release.run import apply_overrides

    spec = apply_overrides(
        load_spec(ROOT / "conf" / "census_selections.toml"),
        output_dir=str(tmp_path / "out"),
        ledger_path=str(tmp_path / "ledger.sqlite"),
        key_file=str(tmp_path / "master.key"),
    )
    plan = plan_release(spec)
    rng = np.random.default_rng(9)
    results = {}
    for table_plan in plan.tables:
        table = table_plan.table
        if table.statistic == "top_k":
            results[table.name] = pd.DataFrame({"in_true_top_k": rng.random(table.k) < 0.7})
        elif table.statistic in ("quantile", "median"):
            groups = max(table.cells, 1)
            results[table.name] = pd.DataFrame({"rank_error": rng.integers(0, 200, groups)})
        else:
            results[table.name] = released_counts(plan, table_plan, rng)
    whole = accuracy_summary(plan, table_accuracies(plan, results))
    split = {}
    for table_plan in plan.tables:
        frame = results[table_plan.table.name]
        pieces = [frame.iloc[:1], frame.iloc[1:]] if len(frame) > 1 else [frame]
        split[table_plan.table.name] = accuracy_of(plan, table_plan.table.name, pieces)
    assert accuracy_summary(plan, split) == whole
    rows = {row["table"]: row for row in whole}
    for table_plan in plan.tables:
        table = table_plan.table
        row, frame = rows[table.name], results[table.name]
        if table.statistic == "top_k":
            assert row == {
                "table": table.name,
                "statistic": "top_k",
                "k": table.k,
                "precision": float(frame["in_true_top_k"].mean()),
            }
        elif table.statistic in ("quantile", "median"):
            errors = frame["rank_error"].to_numpy(np.float64)
            assert row["groups"] == len(frame)
            assert row["mean_rank_error"] == float(errors.mean())
            assert row["max_rank_error"] == float(errors.max())
            assert row["within_margin"] == float((errors < table_plan.margin_of_error).mean())


def released_counts(plan, table_plan, rng) -> pd.DataFrame:
    frame = full_index(plan.spec, list(table_plan.table.keys)).to_frame(index=False)
    frame["true_value"] = rng.poisson(20, len(frame))
    frame["value"] = frame["true_value"] + rng.integers(-9, 10, len(frame))
    return frame


def test_tables_fed_in_batches_join_the_whole_ones(plan):
    frames = {t.table.name: released(plan, t.table.name, 4) for t in plan.tables}
    whole = table_accuracies(plan, frames)
    mixed = dict(
        frames, county_sex=accuracy_of(plan, "county_sex", in_batches(frames["county_sex"], 4))
    )
    mixed = table_accuracies(plan, mixed)
    assert mixed["county_sex"] is not whole["county_sex"]
    assert accuracy_summary(plan, mixed) == accuracy_summary(plan, whole)
    assert [row["table"] for row in accuracy_summary(plan, whole)] == [
        t.table.name for t in plan.tables
    ]


def test_real_input_has_no_accuracy(plan):
    frames = {t.table.name: released(plan, t.table.name, 1) for t in plan.tables}
    real = {name: frame.drop(columns="true_value") for name, frame in frames.items()}
    accuracies = table_accuracies(plan, real)
    assert accuracy_summary(plan, accuracies) == []
    assert all(accuracy.histogram() is None for accuracy in accuracies.values())


# ------------------------------------------------------------------------------ bad input


def test_a_missing_estimate_is_refused(plan):
    frame = released(plan, "state_sex", 1)
    frame["value"] = frame["value"].astype("Int64")
    frame.loc[3, "value"] = pd.NA
    with pytest.raises(ValueError, match="table 'state_sex': column 'value' has missing values"):
        accuracy_of(plan, "state_sex", [frame])


def test_a_non_finite_estimate_is_refused(plan):
    frame = released(plan, "state_sex", 1, fractional=True)
    frame["value"] = frame["value"].astype(np.float64)
    frame.loc[5, "value"] = np.inf
    with pytest.raises(
        ValueError, match="table 'state_sex': column 'value' has inf; estimates must be finite"
    ):
        accuracy_of(plan, "state_sex", [frame])


def test_a_key_outside_its_domain_is_refused(plan):
    frame = released(plan, "county_sex", 1)
    frame.loc[0, "county"] = 9999
    with pytest.raises(
        ValueError, match="table 'county_sex': column 'county' has 9999, which is not in its"
    ):
        accuracy_of(plan, "county_sex", [frame])


def test_a_table_with_missing_rows_is_refused(plan):
    frame = released(plan, "state_sex", 1)
    accuracy = accuracy_of(plan, "state_sex", [frame.iloc[:50]])
    with pytest.raises(
        ValueError, match="table 'state_sex': the accuracy saw 50 rows; the table has 102 cells"
    ):
        accuracy.summary()


def test_batches_with_different_columns_are_refused(plan):
    frame = released(plan, "state_sex", 1)
    accuracy = accuracy_of(plan, "state_sex", [frame.iloc[:10]])
    with pytest.raises(ValueError, match="table 'state_sex': a batch has no 'raw_value' column"):
        accuracy.add(frame.iloc[10:].drop(columns="raw_value"))
    with pytest.raises(
        ValueError,
        match="table 'state_sex': a batch has no 'true_value' column and earlier ones did;",
    ):
        accuracy.add(frame.iloc[10:].drop(columns="true_value"))
    with pytest.raises(ValueError, match="table 'state_sex': a batch has no 'state' column"):
        accuracy.add(frame.iloc[10:].drop(columns="state"))
    accuracy.add(frame.iloc[10:])  # the refused batches left no trace
    assert accuracy.summary() == accuracy_of(plan, "state_sex", [frame]).summary()
    real = accuracy_of(plan, "state_sex", [frame.iloc[:10].drop(columns="true_value")])
    with pytest.raises(
        ValueError, match="a batch has 'true_value' column and earlier ones did not"
    ):
        real.add(frame.iloc[10:])


def test_a_bad_batch_leaves_the_tallies_unchanged(plan):
    frame = released(plan, "state_sex", 2)
    accuracy = accuracy_of(plan, "state_sex", [frame.iloc[:40]])
    bad = frame.iloc[40:].copy()
    bad["raw_value"] = bad["raw_value"].astype("Int64")
    bad.loc[bad.index[-1], "raw_value"] = pd.NA  # the second column checked
    with pytest.raises(ValueError, match="column 'raw_value' has missing values"):
        accuracy.add(bad)
    accuracy.add(frame.iloc[40:])
    assert accuracy.summary() == accuracy_of(plan, "state_sex", [frame]).summary()


def test_a_fractional_truth_is_refused(plan):
    frame = released(plan, "state_sex", 1)
    frame["true_value"] = frame["true_value"] + 0.5
    with pytest.raises(
        ValueError, match="table 'state_sex': column 'true_value' has dtype float64; true cell"
    ):
        accuracy_of(plan, "state_sex", [frame])


def test_the_html_report_is_the_same_from_batches(plan, tmp_path, monkeypatch):
    from dp_pipeline.release.report.writer import html_report
    from dp_pipeline.release.run import Progress, run_release

    monkeypatch.setenv(
        "DP_PIPELINE_MASTER_KEY", "a7d393ef6fecbbd9712b118e67aee439871402fd15b4ba05fd5f5db5b4d22ede"
    )
    shutil.copy(ROOT / "conf" / "census_demo_counties.csv", tmp_path / "counties.csv")
    (tmp_path / "acc.toml").write_text(SPEC.format(tmp=tmp_path))
    result = run_release(load_spec(tmp_path / "acc.toml"), progress=Progress(quiet=True))
    frames = {t.table.name: released(plan, t.table.name, 8) for t in plan.tables}
    whole = table_accuracies(plan, frames)
    batched = {
        name: accuracy_of(plan, name, in_batches(frame, 8)) for name, frame in frames.items()
    }
    page = html_report(result.plan, result.report, whole, accuracy_summary(plan, whole))
    assert page == html_report(result.plan, result.report, batched, accuracy_summary(plan, batched))
    assert "alt='errors' src='data:image/png;base64," in page
    assert "Post-processing: raw noisy counts and consistent estimates" in page


def test_a_missing_true_value_is_refused(plan):
    frame = released(plan, "state_income", 1)
    frame["true_value"] = frame["true_value"].astype("Int64")
    frame.loc[0, "true_value"] = pd.NA
    with pytest.raises(
        ValueError, match="table 'state_income': column 'true_value' has missing values"
    ):
        accuracy_of(plan, "state_income", [frame])


def test_a_key_outside_a_listed_domain_is_refused(plan):
    frame = released(plan, "county_sex", 1)
    frame["county"] = frame["county"].astype(str)  # '1' is not the domain's 1
    with pytest.raises(ValueError, match="table 'county_sex': column 'county' has '1', which"):
        accuracy_of(plan, "county_sex", [frame])


def test_a_non_finite_value_has_no_exact_sum():
    with pytest.raises(ValueError, match="a value of nan is not finite; exact sums need finite"):
        exact_float_sums(np.array([1.0, np.nan]), np.zeros(2, dtype=np.int64), 1)


def test_selection_batches_with_different_columns_are_refused(tmp_path):
    from dp_pipeline.release.run import apply_overrides

    spec = apply_overrides(
        load_spec(ROOT / "conf" / "census_selections.toml"),
        output_dir=str(tmp_path / "out"),
        ledger_path=str(tmp_path / "ledger.sqlite"),
        key_file=str(tmp_path / "master.key"),
    )
    plan = plan_release(spec)
    name = next(t.table.name for t in plan.tables if t.table.statistic == "median")
    accuracy = accuracy_of(plan, name, [pd.DataFrame({"rank_error": [1, 2]})])
    with pytest.raises(
        ValueError,
        match=f"table '{name}': a batch has no 'rank_error' column and earlier ones did;",
    ):
        accuracy.add(pd.DataFrame({"value": [3]}))
