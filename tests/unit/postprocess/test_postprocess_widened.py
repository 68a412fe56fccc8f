"""Roundings that leave the floor/ceil box are counted per table, on every path.

A box admits a controlled rounding whenever the real fit meets its margins; a fit
stopped early (its projection's step limit reached, here lowered to one step) leaves
row sums that no floor/ceil rounding meets, so the rounding must widen the box. The
count of cells it set outside reaches `make_consistent`'s result, the per-group
solver's ``widened`` column (summed on Spark), and the release's privacy_report.json,
accuracy.json and report.html.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dp_pipeline.postprocess import NoisyCounts, make_consistent, two_way
from dp_pipeline.postprocess.group_solver import WIDENED_COLUMN, group_solver
from tests.support.postprocess_cases import (
    SKEWED_AGES,
    SKEWED_TABLES,
    discrete_gaussian_sample,
    skewed_geography,
    skewed_truth,
)


def _skewed_tables(names=tuple(SKEWED_TABLES)):
    hierarchy, cells = skewed_geography(states=6, empty=1, counties=60, seed=0)
    truth = skewed_truth(hierarchy, cells)
    sizes = {"county": 60, "state": 6, "age": SKEWED_AGES, "sex": 2}
    rng = np.random.default_rng(0)
    tables = []
    for name, (keys, variance) in SKEWED_TABLES.items():
        noise = discrete_gaussian_sample(rng, variance, truth[name].size)
        if name in names:
            dims = tuple(sizes[k] for k in keys)
            tables.append(NoisyCounts(name, keys, dims, truth[name] + noise, variance))
    return hierarchy, tables


# A fixed master key for the release test (test data: the key the release tests use).
TEST_KEY = "a7d393ef6fecbbd9712b118e67aee439871402fd15b4ba05fd5f5db5b4d22ede"


@pytest.fixture
def one_projection_step(monkeypatch):
    monkeypatch.setattr(two_way, "MAX_PROJECTION_STEPS", 1)


def test_a_converged_fit_rounds_every_cell_inside_its_box():
    hierarchy, tables = _skewed_tables()
    solved = make_consistent(tables, hierarchy)
    assert solved.widened == dict.fromkeys(SKEWED_TABLES, 0)


def test_an_unconverged_fit_widens_the_box_and_the_count_is_reported(one_projection_step):
    hierarchy, tables = _skewed_tables()
    solved = make_consistent(tables, hierarchy)  # every margin still exact (checked inside)
    assert set(solved.widened) == set(SKEWED_TABLES)
    assert solved.widened["county_age_sex"] > 0
    # The widened cells are at least one count from the least squares estimates they
    # started from; so many cells of the table are.
    far = np.abs(solved.values["county_age_sex"] - solved.least_squares["county_age_sex"]) >= 1
    assert np.count_nonzero(far) >= solved.widened["county_age_sex"]


def test_the_per_group_solver_reports_what_the_driver_reports(one_projection_step):
    """Spark's second pass runs `GroupSolver.fit` per group; its ``widened`` column, summed
    per table with the top step's counts, is the driver's count."""
    hierarchy, tables = _skewed_tables()
    driver = make_consistent(tables, hierarchy)
    solver = group_solver(tables, hierarchy)
    columns = solver.cells([t.values for t in tables])
    order = np.argsort(columns["top"], kind="stable")
    columns = {k: v[order] for k, v in columns.items()}
    starts = np.searchsorted(columns["top"], np.arange(solver.blocks + 1))
    parts = [
        solver.part(b, *(columns[k][starts[b] : starts[b + 1]] for k in ("table", "cell", "value")))
        for b in range(solver.blocks)
    ]
    top = solver.top({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
    widened = np.zeros(len(tables), dtype=np.int64)
    for t, n in top.widened.items():
        widened[t] += n
    for b in range(solver.blocks):
        rows = (columns[k][starts[b] : starts[b + 1]] for k in ("table", "cell", "value"))
        fitted = solver.fit(b, *rows, top)
        assert fitted[WIDENED_COLUMN].shape == fitted["value"].shape
        widened += np.bincount(fitted["table"], fitted[WIDENED_COLUMN], len(tables)).astype(
            np.int64
        )
    assert dict(zip([t.name for t in tables], widened.tolist(), strict=True)) == driver.widened


@pytest.mark.spark
def test_spark_sums_the_widened_column_per_table(spark):
    from dp_pipeline.engines.spark.postprocess import moves_and_widened

    frame = spark.createDataFrame(
        [(0, 0, 0, 2), (0, 0, 0, 0), (1, 2, 0, 3), (1, 0, 1, 0), (2, 0, 0, 0)],
        "table int, size_class long, moved long, widened long",
    )
    counts, widened = moves_and_widened(frame, 3, {1: 4})
    assert widened == [2, 7, 0]
    np.testing.assert_array_equal(counts[0], [[2], [0], [0]])  # a row per class seen
    assert counts[1].sum() == 2


def test_a_release_reports_its_widened_cells_in_every_output(
    tmp_path, monkeypatch, one_projection_step
):
    from tests.unit.release.plan import test_release_consistency as demo

    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", TEST_KEY)
    result = demo.run_release(demo.geo_spec(tmp_path), progress=demo.QUIET)
    report = json.loads((result.output / "privacy_report.json").read_text())["postprocessing"]
    widened = report["rounding_widened_cells"]
    assert set(widened) == {"county_sex", "state_sex", "state_tenure"}
    assert widened["county_sex"] > 0
    assert "no rounding inside the box met" in report["rounding_widened_cells_meaning"]
    accuracy = json.loads((result.output / "accuracy.json").read_text())["accuracy_vs_truth"]
    rows = {row["table"]: row for row in accuracy}
    for name, n in widened.items():
        assert rows[name]["rounding_widened_cells"] == n
    assert "rounding_widened_cells" not in rows["state_income"]
    html = (result.output / "report.html").read_text()
    assert f"cells per table: county_sex: {widened['county_sex']:,}" in html


def test_the_report_says_when_no_rounding_left_its_box():
    from dp_pipeline.release.report.postprocess import postprocessing_description

    settings = {"method": "m", "tables": ["a"], "rounding_widened_cells": {"a": 0, "b": 0}}
    html = "\n".join(postprocessing_description({"postprocessing": settings}, {}))
    assert "every cell of every table is the floor or the ceiling" in html
    settings["rounding_widened_cells"] = {"a": 0, "b": 1234}
    html = "\n".join(postprocessing_description({"postprocessing": settings}, {}))
    assert "cells per table: b: 1,234." in html and "a: 0" not in html
