"""Every df.dp and Spark query is per privacy unit.

Selections bound each unit's rows by the engines' keyed rule (at most ``max_per_cell``
rows in each of at most ``max_cells`` groups), the exponential mechanism's utility
sensitivity and runs account for those bounds, and a query protects single rows only
when the call says ``privacy_unit=None``: a call without ``privacy_unit`` is refused.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import BaseTwoExponential, DiscreteGaussian, MasterKey
from dp_pipeline.selection.algorithms import quantile_mechanism

KEY = MasterKey(bytes(range(40, 72)))
COMMON = dict(key=KEY, release_id="units", table="age")
GRID = dict(bounds=(0, 115), granularity=1)
PERSONS, ROWS = 5_000, 12_562


def persons() -> pd.DataFrame:
    """5,000 persons with 12,562 rows (2,562 persons with 3 rows, the others 2)."""
    rng = np.random.default_rng(12_562)  # test data only
    rows_per_person = np.where(np.arange(PERSONS) < ROWS - 2 * PERSONS, 3, 2)
    return pd.DataFrame(
        {
            "person": np.repeat(np.arange(PERSONS), rows_per_person),
            "age": rng.integers(0, 90, ROWS),
            "county": rng.choice([1, 2, 3], ROWS),
            "region": rng.choice(["n", "s", "e"], ROWS),
        }
    )


def test_a_median_counts_persons_not_rows():
    df = persons()
    assert len(df) == ROWS and df["person"].nunique() == PERSONS
    out = df.dp.median("age", **GRID, epsilon=1, privacy_unit="person", **COMMON)
    info = out.attrs["dp"]
    assert info.diagnostics.rows_in == ROWS
    assert info.diagnostics.rows_used == PERSONS  # one row per person (max_per_cell = 1)
    assert info.diagnostics.rows_removed_max_per_cell == ROWS - PERSONS
    assert info.mechanism == quantile_mechanism(1) and info.runs == 1
    # Every row of a person, with the mechanism calibrated for a rank loss moving by 3.
    every_row = df.dp.median(
        "age", **GRID, epsilon=1, privacy_unit="person", max_per_cell=3, **COMMON
    )
    info = every_row.attrs["dp"]
    assert info.diagnostics.rows_used == ROWS
    assert info.mechanism == quantile_mechanism(1, utility_sensitivity=3)
    assert info.mechanism.utility_sensitivity == 3 and info.epsilon <= 1
    summary = info.public_summary()  # the guarantee states what it protects
    assert summary["utility_sensitivity"] == "3" and summary["privacy_unit"] == "person"
    assert summary["contribution_bounds"] == {"max_cells": 1, "max_per_cell": 3}
    # Per record only when asked for: every row a unit, Δu = 1.
    per_record = df.dp.median("age", **GRID, epsilon=1, privacy_unit=None, **COMMON)
    assert per_record.attrs["dp"].diagnostics.rows_used == ROWS
    assert per_record.attrs["dp"].mechanism == quantile_mechanism(1)
    assert per_record.attrs["dp"]["privacy_unit"] is None


def test_a_quantile_per_group_releases_every_declared_group():
    df = persons()
    out = df.dp.quantile(
        "age",
        "1/4",
        **GRID,
        by="county",
        domains={"county": [1, 2, 3, 4]},
        epsilon=1,
        privacy_unit="person",
        **COMMON,
    )
    assert out.columns.tolist() == ["county", "quantile", "age"]
    assert out["county"].tolist() == [1, 2, 3, 4]  # county 4 is empty and still released
    assert (out["quantile"] == 0.25).all()
    assert out["age"].iloc[:3].between(10, 35).all()
    info = out.attrs["dp"]
    assert info.runs == 1  # a person keeps rows in one county: one group changes
    assert info.diagnostics.rows_used == PERSONS
    assert sum(info.diagnostics.rows_out_of_domain.values()) == 0


@pytest.mark.parametrize(
    ("max_cells", "neighbouring", "runs"),
    [(1, "add_remove", 1), (2, "add_remove", 2), (1, "replace", 2), (3, "replace", 4)],
)
def test_the_groups_a_unit_can_change_share_epsilon(max_cells, neighbouring, runs):
    out = persons().dp.median(
        "age",
        **GRID,
        by="county",
        domains={"county": [1, 2, 3, 4]},
        epsilon=1,
        privacy_unit="person",
        max_cells=max_cells,
        neighbouring=neighbouring,
        **COMMON,
    )
    info = out.attrs["dp"]
    assert info.runs == runs and info.event.count == runs
    assert info.mechanism == quantile_mechanism(Fraction(1, runs))
    assert info.epsilon == runs * info.mechanism.pure_epsilon <= 1


def test_a_rho_budget_covers_every_run():
    out = persons().dp.median(
        "age",
        **GRID,
        by="county",
        domains={"county": [1, 2, 3]},
        rho=Fraction(1, 8),
        privacy_unit="person",
        max_cells=2,
        **COMMON,
    )
    info = out.attrs["dp"]
    # Two runs at ε/2 cost 2·(ε/2)²/8 = ε²/16 <= 1/8: ε is the largest rational below √2.
    assert info.runs == 2 and info.epsilon**2 / 16 <= Fraction(1, 8)
    assert info.epsilon > Fraction(138, 100)  # η rounded down by at most about 2 %


def test_one_unit_moves_the_kept_rows_by_at_most_its_bounds():
    df = persons()
    intruder = pd.DataFrame(
        {"person": PERSONS, "age": 114, "county": [1, 2, 3] * 40, "region": "n"}
    )
    arguments = dict(
        **GRID,
        by="county",
        domains={"county": [1, 2, 3]},
        epsilon=1,
        privacy_unit="person",
        max_cells=2,
        max_per_cell=3,
        **COMMON,
    )
    before = df.dp.median("age", **arguments).attrs["dp"].diagnostics
    after = pd.concat([df, intruder]).dp.median("age", **arguments).attrs["dp"].diagnostics
    assert after.rows_used - before.rows_used == 2 * 3  # 120 rows, at most 3 in 2 groups


def test_invalid_rows_of_a_grouped_quantile_are_dropped_and_counted_or_refused():
    df = persons().astype({"age": float, "county": float, "person": "Int64"})
    df.loc[0, "age"] = np.nan
    df.loc[1, "county"] = 7
    df.loc[2, "county"] = np.nan
    df.loc[3, "person"] = pd.NA
    arguments = dict(**GRID, by="county", domains={"county": [1, 2, 3]}, epsilon=1, **COMMON)
    out = df.dp.median("age", privacy_unit="person", max_cells=3, max_per_cell=3, **arguments)
    diagnostics = out.attrs["dp"].diagnostics
    assert diagnostics.rows_null_key == {"county": 1}
    assert diagnostics.rows_out_of_domain == {"county": 1}
    assert diagnostics.rows_null_unit == 1 and diagnostics.rows_invalid_value == 1
    assert diagnostics.rows_used == ROWS - 4
    for frame, column, rule in [
        (df.iloc[[1, *range(4, 100)]], "county", "have a key outside the declared domain"),
        (df.iloc[1:], "county", "have a null key"),  # the first rule of the column
        (df.iloc[3:], "person", "have a null privacy unit"),
        (df.iloc[[0, *range(4, 100)]], "age", "hold null, NaN or infinite values"),
    ]:
        with pytest.raises(ValueError, match=f"column '{column}': some rows {rule}"):
            frame.dp.median("age", privacy_unit="person", on_invalid="error", **arguments)


@pytest.mark.parametrize("method", ["peeling", "one_shot"])
def test_a_top_k_per_group_releases_k_rows_for_every_declared_group(method):
    out = persons().dp.top_k(
        "region",
        2,
        candidates=["n", "s", "e", "w"],
        by="county",
        domains={"county": [1, 2, 3, 4]},
        epsilon=1,
        method=method,
        privacy_unit="person",
        max_candidates=2,
        **COMMON,
    )
    assert out["county"].tolist() == [1, 1, 2, 2, 3, 3, 4, 4]  # county 4 is empty
    assert out["rank"].tolist() == [1, 2] * 4
    assert set(out["region"]) <= {"n", "s", "e", "w"}
    info = out.attrs["dp"]
    assert info.candidates == 4 and info.epsilon <= 1
    assert info.diagnostics.rows_used <= 2 * PERSONS  # two (county, region) cells a person
    if method == "peeling":  # 2 rounds in each of the 2 groups a person can change
        assert info.runs == 4 and info.mechanism.epsilon == Fraction(1, 4)
    else:  # one noisy histogram over every cell; each group's top 2 is post-processing
        assert info.runs == 1 and out.columns.tolist()[-1] == "count"


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"by": "region", "domains": {"region": ["n"]}}, ValueError, "cannot also be a group"),
        ({"domains": {"county": [1]}}, ValueError, "domains declare the groups of by="),
        ({"k": 5}, ValueError, r"k = 5 is larger than the number of candidates \(4\)"),
    ],
)
def test_bad_top_k_groups_are_refused_by_name(arguments, error, message):
    call = dict(candidates=["n", "s", "e", "w"], k=2, epsilon=1, privacy_unit="person", **COMMON)
    call.update(arguments)
    with pytest.raises(error, match=message):
        pd.DataFrame().dp.top_k("region", **call)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"max_per_cell": 0}, ValueError, "max_per_cell must be >= 1, got 0"),
        ({"max_cells": 1.5}, TypeError, "max_cells must be a positive integer, got 1.5"),
        ({"neighbouring": "swap"}, ValueError, "neighbouring must be one of"),
        ({"privacy_unit": "age"}, ValueError, "privacy_unit 'age' cannot also be the quantile"),
        ({"by": "age", "domains": {"age": range(5)}}, ValueError, "cannot also be a group"),
        ({"by": "county"}, ValueError, "key column 'county' has no declared domain"),
        ({"domains": {"county": [1]}}, ValueError, "domains declare the groups of by="),
        (
            {"by": "county", "domains": {"county": range(100)}, "cell_limit": 10_000},
            ValueError,
            "100 groups x 116 candidates is more than cell_limit = 10000 buckets",
        ),
        (
            {"max_per_cell": 2, "epsilon": BaseTwoExponential(1, utility_sensitivity=1)},
            ValueError,
            "the quantile rank loss has sensitivity 2",
        ),
    ],
)
def test_bad_bounds_are_refused_by_name_before_the_data(arguments, error, message):
    call = dict(GRID, epsilon=1, privacy_unit="person", **COMMON)
    call.update(arguments)
    with pytest.raises(error, match=message):
        pd.DataFrame().dp.median("age", **call)


def _pandas_calls():
    cells = dict(by="county", domains={"county": [1, 2, 3]}, noise=DiscreteGaussian(4))
    return {
        "count": lambda dp, **unit: dp.count(**cells, **COMMON, **unit),
        "sum": lambda dp, **unit: dp.sum("age", bounds=(0, 99), **cells, **COMMON, **unit),
        "mean": lambda dp, **unit: dp.mean("age", bounds=(0, 99), **cells, **COMMON, **unit),
        "quantile": lambda dp, **unit: dp.quantile(
            "age", "0.9", **GRID, epsilon=1, **COMMON, **unit
        ),
        "median": lambda dp, **unit: dp.median("age", **GRID, epsilon=1, **COMMON, **unit),
        "top_k": lambda dp, **unit: dp.top_k(
            "county", 2, candidates=[1, 2, 3], epsilon=1, **COMMON, **unit
        ),
    }


@pytest.mark.parametrize("verb", list(_pandas_calls()))
def test_every_df_dp_call_without_a_privacy_unit_is_refused_showing_both_forms(verb):
    call = _pandas_calls()[verb]
    # Refused from the call alone: a frame without any column gives the same error.
    with pytest.raises(TypeError) as refused:
        call(pd.DataFrame().dp)
    message = str(refused.value)
    assert message.startswith(f"df.dp.{verb}(...) needs privacy_unit=")
    assert f'df.dp.{verb}(..., privacy_unit="person_id")' in message
    assert f"df.dp.{verb}(..., privacy_unit=None)" in message
    df = persons()
    per_unit = call(df.dp, privacy_unit="person").attrs["dp"]
    per_record = call(df.dp, privacy_unit=None).attrs["dp"]
    assert per_record.diagnostics.rows_used == ROWS and per_unit.diagnostics.rows_used <= PERSONS
    assert per_unit["privacy_unit"] == "person" and per_record["privacy_unit"] is None


@pytest.mark.parametrize(
    ("function", "arguments"),
    [
        ("dp_count", dict(by="county", domains={"county": [1]}, noise=DiscreteGaussian(4))),
        (
            "dp_sum",
            dict(
                column="age",
                bounds=(0, 9),
                by="county",
                domains={"county": [1]},
                noise=DiscreteGaussian(4),
            ),
        ),
        (
            "dp_mean",
            dict(
                column="age",
                bounds=(0, 9),
                by="county",
                domains={"county": [1]},
                noise=DiscreteGaussian(4),
            ),
        ),
    ],
)
def test_every_spark_aggregation_without_a_privacy_unit_is_refused(function, arguments):
    pytest.importorskip("pyspark")
    from dp_pipeline import spark as spark_functions

    with pytest.raises(TypeError) as refused:
        getattr(spark_functions, function)(**arguments, **COMMON)
    message = str(refused.value)
    assert f'df.transform({function}(..., privacy_unit="person_id"))' in message
    assert f"df.transform({function}(..., privacy_unit=None))" in message
    query = getattr(spark_functions, function)(**arguments, **COMMON, privacy_unit=None)
    assert query.spec.privacy_unit is None


@pytest.mark.parametrize(
    ("function", "arguments"),
    [
        ("dp_quantile", dict(column="age", q="1/2", **GRID, epsilon=1)),
        ("dp_median", dict(column="age", **GRID, epsilon=1)),
        ("dp_top_k", dict(column="county", k=1, candidates=[1, 2], epsilon=1)),
    ],
)
def test_every_spark_selection_without_a_privacy_unit_is_refused_before_the_data(
    function, arguments
):
    pytest.importorskip("pyspark")
    from dp_pipeline import spark as spark_functions

    with pytest.raises(TypeError) as refused:  # no DataFrame at all: nothing is read
        getattr(spark_functions, function)(**arguments, **COMMON)
    message = str(refused.value)
    assert f'df.transform({function}(..., privacy_unit="person_id"))' in message
    assert f"df.transform({function}(..., privacy_unit=None))" in message
    selection = getattr(spark_functions, function)(**arguments, **COMMON, privacy_unit=None)
    assert selection.info.privacy_unit is None


def test_spark_selections_per_unit_equal_pandas_for_the_same_key(spark):
    from dp_pipeline.spark import dp_count, dp_median, dp_quantile, dp_top_k

    local = persons().astype({"age": float, "county": float, "person": "Int64"})
    local.loc[0, "age"] = np.nan
    local.loc[1, "county"] = 7
    local.loc[2, "person"] = pd.NA
    df = spark.createDataFrame(local)
    groups = dict(by="county", domains={"county": [1, 2, 3, 4]})

    def same(selection, pandas_result):
        rows = df.transform(selection).toPandas()
        pd.testing.assert_frame_equal(rows, pandas_result, check_dtype=False)
        assert selection.info == pandas_result.dp.info  # info and diagnostics
        assert selection.diagnostics == pandas_result.attrs["dp"].diagnostics

    median = dict(**GRID, epsilon=1, privacy_unit="person", **COMMON)
    same(dp_median("age", **median), local.dp.median("age", **median))
    assert local.dp.median("age", **median).attrs["dp"].diagnostics.rows_used == PERSONS
    grouped = dict(median, **groups, max_cells=2, max_per_cell=2, q="0.9")
    same(
        dp_quantile("age", **grouped),
        local.dp.quantile("age", **grouped),
    )
    per_record = dict(median, **groups, privacy_unit=None)
    same(dp_median("age", **per_record), local.dp.median("age", **per_record))
    top = dict(candidates=["n", "s", "e"], epsilon=1, privacy_unit="person", max_candidates=2)
    same(
        dp_top_k("region", 2, **top, **COMMON),
        local.dp.top_k("region", 2, **top, **COMMON),
    )
    for method in ("peeling", "one_shot"):
        grouped_top = dict(top, **groups, method=method, **COMMON)
        same(
            dp_top_k("region", 2, **grouped_top),
            local.dp.top_k("region", 2, **grouped_top),
        )
    counts = dict(**groups, noise=DiscreteGaussian(4), privacy_unit="person", **COMMON)
    query = dp_count(**counts)
    on_spark = df.transform(query).toPandas()
    pd.testing.assert_frame_equal(on_spark, local.dp.count(**counts), check_dtype=False)
    assert query.diagnostics == local.dp.count(**counts).attrs["dp"].diagnostics
