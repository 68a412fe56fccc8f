"""Sums are exact or refused before any data is read: never wrapped, no data-dependent errors."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.engines.bounding import BoundingSalt, bound_contributions
from dp_pipeline.engines.pandas.aggregate import aggregate_pandas
from dp_pipeline.errors import InternalError
from dp_pipeline.query.exact_sums import (
    SUM_LIMIT,
    CellTotals,
    cell_totals,
    saturating_add,
)
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.randomness import derive_stream
from dp_pipeline.udfs.noise import noisy_partition, release_columns

KEY = MasterKey.from_hex("77" * 32)
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def params(**overrides):
    out = dict(
        by=["k"],
        domains={"k": range(0, 2)},
        noise=DiscreteGaussian(9),
        key=KEY,
        release_id="sums",
        table="t",
        column="v",
        bounds=(0, 2**53),
        noise_partitions=1,
        privacy_unit=None,
    )
    out.update(overrides)
    return out


def attack_frame():
    return pd.DataFrame({"k": np.zeros(1030, dtype=np.int64), "v": np.full(1030, 2.0**53)})


LIMIT_MESSAGE = (
    r"bounds \(0, 9007199254740992\) with granularity 1: the largest \|bound\| is "
    r"9,007,199,254,740,992 granularity units, above the limit: a summed value may be at most "
    r"2\*\*31 = 2,147,483,648 granularity units in absolute value, so that the sum of any cell "
    r"of fewer than 2\*\*31 rows is exact \(totals are clamped into ±2\*\*62 before noise\); "
    r"use a coarser granularity or tighter bounds"
)


# --- refusal before any data is read -------------------------------------------------------


@pytest.mark.parametrize("statistic", ["sum", "mean"])
def test_the_wrapped_sum_attack_is_refused_by_df_dp_before_reading_data(statistic):
    # 1,030 rows of 2**53 with bounds (0, 2**53) used to be released as -9.17e18.
    df = attack_frame()
    arguments = {k: v for k, v in params().items() if k != "column"}
    with pytest.raises(ValueError, match=LIMIT_MESSAGE):
        getattr(df.dp, statistic)("v", **arguments)
    # Refused from the spec alone: a frame without the column gives the same error.
    with pytest.raises(ValueError, match=LIMIT_MESSAGE):
        getattr(df[["k"]].dp, statistic)("v", **arguments)


def test_the_spark_functions_refuse_the_same_bounds():
    pytest.importorskip("pyspark")
    from dp_pipeline.spark import dp_mean, dp_sum

    for function in (dp_sum, dp_mean):
        with pytest.raises(ValueError, match=LIMIT_MESSAGE):
            function(**params())


def test_bounds_at_the_limit_are_accepted_and_one_unit_beyond_refused():
    QuerySpec.build("sum", **params(bounds=(-(2**31), 2**31)))
    QuerySpec.build("sum", **params(bounds=(-(2**32), 2**32), granularity=2))
    QuerySpec.build("mean", **params(bounds=("-1/4", "1/4"), granularity=f"1/{2**33}"))
    beyond = [((0, 2**31 + 1), 1), ((-(2**31) - 1, 0), 1), ((0, 1), f"1/{2**32}")]
    for bounds, granularity in beyond:
        with pytest.raises(ValueError, match=r"granularity units, above the limit: a summed value"):
            QuerySpec.build("sum", **params(bounds=bounds, granularity=granularity))


def test_one_units_sum_in_a_cell_above_2_62_is_refused_with_a_privacy_unit():
    arguments = params(bounds=(-(2**31), 2**30), privacy_unit="u", max_per_cell=2**31)
    assert QuerySpec.build("sum", **arguments).sum_sensitivity() == (2**62,)
    message = (
        r"max_per_cell 2147483649 with bounds \(-2147483648, 1073741824\) and granularity 1: "
        r"max_per_cell x the largest \|bound\| is 4,611,686,020,574,871,552 granularity units, "
        r"above the limit: one privacy unit's sum in one cell may be at most 2\*\*62 = "
        r"4,611,686,018,427,387,904 granularity units, so that it is summed exactly in int64; "
        r"lower max_per_cell, use tighter bounds or a coarser granularity"
    )
    with pytest.raises(ValueError, match=message):
        QuerySpec.build("mean", **{**arguments, "max_per_cell": 2**31 + 1})
    # Without a privacy unit each row is its own unit: max_per_cell is not used.
    QuerySpec.build("sum", **params(bounds=(0, 2**31), max_per_cell=2**40))


def release_document(**table):
    from decimal import Decimal

    income = {
        "name": "income",
        "keys": ["sex"],
        "statistic": "sum",
        "value": "income",
        "lower": 0,
        "upper": 100,
        "share": Decimal("1"),
    }
    income.update(table)
    return {
        "release": {"id": "r-1"},
        "population": {"name": "people", "cap": {"rho": 1}},
        "privacy_unit": {"column": "person_id"},
        "budget": {"rho": 1},
        "domains": {"sex": ["F", "M"]},
        "tables": [income],
    }


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            dict(upper=2**53),
            "tables[0].upper = 9007199254740992: the largest |bound| is 9,007,199,254,740,992 "
            "granularity units, above the limit: a summed value may be at most 2**31",
        ),
        (
            dict(lower=-(2**31) - 1, upper=0),
            "tables[0].lower = -2147483649: the largest |bound| is 2,147,483,649 granularity "
            "units, above the limit",
        ),
        (
            dict(upper=2**31, max_per_cell=2**31 + 1),
            "tables[0].max_per_cell = 2147483649 with |upper| = 2147483648: max_per_cell x the "
            "largest |bound| is 4,611,686,020,574,871,552 granularity units, above the limit: "
            "one privacy unit's sum in one cell may be at most 2**62",
        ),
    ],
)
def test_release_specs_refuse_the_sum_limits_at_parse_time(table, message):
    from dp_pipeline.release.spec.load import parse_spec
    from dp_pipeline.release.spec.model import SpecError

    parse_spec(release_document(upper=2**31, max_per_cell=2**31))  # at the limits: accepted
    with pytest.raises(SpecError) as raised:
        parse_spec(release_document(**table))
    assert message in str(raised.value), str(raised.value)
    assert "use tighter bounds" in str(raised.value)


def test_the_attack_through_a_release_spec_file_is_refused_before_the_ledger(tmp_path):
    from release_specs import SMALL_SPEC

    from dp_pipeline.release.run import run_release
    from dp_pipeline.release.spec.load import load_spec
    from dp_pipeline.release.spec.model import SpecError

    text = SMALL_SPEC.format(tmp=tmp_path).replace("upper = 200000", f"upper = {2**53}")
    path = tmp_path / "attack.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=re.escape("tables[2].upper = 9007199254740992: the")):
        run_release(load_spec(path))
    assert not (tmp_path / "ledger.sqlite").exists()
    assert not (tmp_path / "out").exists()


# --- exact accumulation --------------------------------------------------------------------


def reference_sums(cells, weights, total):
    out = [0] * total
    for cell, weight in zip(cells.tolist(), weights.tolist(), strict=True):
        out[cell] += weight
    return out


@pytest.mark.parametrize(
    ("scale", "limbs"),
    [(2**20, False), (2**45, False), (2**62, True), (2**63 - 1, True)],
    ids=["float bincount", "int64", "limbs one-signed", "limbs full int64"],
)
def test_cell_totals_are_exact_on_every_path_against_python_ints(scale, limbs):
    rng = np.random.default_rng(scale % 1000)
    cells = rng.integers(0, 7, 3000)
    weights = rng.integers(-scale, scale, 3000, dtype=np.int64, endpoint=True)
    if scale == 2**62:
        weights = np.abs(weights)  # one-signed: totals far beyond 2**63
    totals = cell_totals(cells, weights, 7)
    expected = reference_sums(cells, weights, 7)
    assert totals.exact() == expected
    assert (totals.high is not None) == limbs
    clamped = [min(max(v, -SUM_LIMIT), SUM_LIMIT) for v in expected]
    assert totals.clamped().dtype == np.int64
    assert totals.clamped().tolist() == clamped
    if scale == 2**62:
        assert min(expected) > 2**63


def test_the_limb_path_recombines_beyond_2_63_and_clamps_at_2_62():
    cells = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3], dtype=np.int64)
    weights = np.array(
        [2**62] * 5 + [-(2**62)] * 3 + [2**62, 2**62, -(2**62) + 7] + [5], dtype=np.int64
    )
    totals = cell_totals(cells, weights, 5)
    assert totals.exact() == [5 * 2**62, -3 * 2**62, 2**62 + 7, 5, 0]
    assert totals.clamped().tolist() == [SUM_LIMIT, -SUM_LIMIT, SUM_LIMIT, 5, 0]
    # Just inside the limbs' clamp boundaries.
    edge = cell_totals(np.array([0, 0, 1, 1]), np.array([2**62, -1, -(2**62), -1]), 2)
    assert edge.exact() == [2**62 - 1, -(2**62) - 1]
    assert edge.clamped().tolist() == [2**62 - 1, -(2**62)]


def test_merged_partials_stay_exact_beyond_int64():
    # What the Parquet pass's treeReduce does with its tasks' vectors.
    parts = [cell_totals(np.array([0, 1]), np.array([2**62, -(2**61)]), 2) for _ in range(9)]
    merged = CellTotals.zeros(2)
    for part in parts:
        merged.add(part)
    assert merged.exact() == [9 * 2**62, -9 * 2**61]
    assert merged.clamped().tolist() == [SUM_LIMIT, -SUM_LIMIT]
    # Plain partials whose bounds sum below 2**63 stay plain int64.
    small = CellTotals.zeros(2)
    small.add(cell_totals(np.array([0, 1]), np.array([3, -4]), 2))
    small.add(cell_totals(np.array([0]), np.array([2**40]), 2))
    assert small.high is None and small.exact() == [2**40 + 3, -4]


def test_table_partial_merge_is_exact_beyond_int64():
    from dp_pipeline.engines.spark.parquet_pass import TablePartial

    spec = QuerySpec.build("sum", **params(bounds=(0, 2**31)))
    first, second = TablePartial(spec), TablePartial(spec)
    for partial in (first, second):
        partial.s = cell_totals(np.array([1]), np.array([2**62 + 1]), 2)
    first.merge(second)
    assert first.s.exact() == [0, 2**63 + 2]
    assert first.s.clamped().tolist() == [0, SUM_LIMIT]


def test_bounding_refuses_pair_sums_that_could_wrap():
    salt = BoundingSalt.derive(KEY, "r", "t")
    arrays = [np.zeros(2, dtype=np.int64)] * 3
    with pytest.raises(InternalError, match=r"max_per_cell 4294967296 x 2147483648 units could"):
        bound_contributions(*arrays, np.full(2, 2**31, dtype=np.int64), 1, 2**32, salt)


ROWS = 2**22 + 2**19  # with values of 2**31 units, cell 0's sum exceeds 2**53


def big_frame():
    """Cell 0: 15/16 of ROWS rows near the 2**31 bound; cell 1 the rest (some clamped)."""
    index = np.arange(ROWS, dtype=np.int64)
    k = (index % 16 == 15).astype(np.int64)
    v = (2**31 - index % 3).astype(np.float64)
    v[index % 7 == 0] = 2.0**40  # clamped into the bound
    return pd.DataFrame({"k": k, "v": v})


def expected_big_sums(df):
    units = np.minimum(df["v"].to_numpy(), 2**31).astype(np.int64)
    out = []
    for cell in (0, 1):
        values, counts = np.unique(units[df["k"].to_numpy() == cell], return_counts=True)
        out.append(sum(int(v) * int(c) for v, c in zip(values, counts, strict=True)))
    assert out[0] > 2**53
    return out


def test_pandas_sums_at_the_bound_limit_beyond_2_53_are_exact():
    df = big_frame()
    spec = QuerySpec.build("sum", **params(bounds=(0, 2**31)))
    true, _, diagnostics = aggregate_pandas(df, spec)
    assert true["sum"].tolist() == expected_big_sums(df)
    assert diagnostics.rows_clamped == len(range(0, ROWS, 7))


def test_pandas_bounded_pair_sums_beyond_2_53_are_exact():
    # 600 units x 7,000 rows in cell 0, all kept: the pair sums are 7,000 x 2**31 units.
    units = np.repeat(np.arange(600, dtype=np.int64), 7000)
    df = pd.DataFrame({"k": np.zeros(units.size, np.int64), "u": units, "v": 2.0**31})
    spec = QuerySpec.build(
        "sum", **params(bounds=(-(2**31), 2**31), privacy_unit="u", max_per_cell=7000)
    )
    true, _, _ = aggregate_pandas(df, spec)
    assert true["sum"].tolist() == [600 * 7000 * 2**31, 0]
    assert 600 * 7000 * 2**31 > 2**53


# --- the pre-noise clamp and the noise add -------------------------------------------------


def test_noisy_partition_clamps_true_values_at_2_62_then_adds_the_stream_noise():
    spec = QuerySpec.build("sum", **params(bounds=(-(2**31), 2**31), domains={"k": range(4)}))
    values = np.array([INT64_MAX, INT64_MIN, 2**62 + 1, -5], dtype=np.int64)
    noisy = noisy_partition(spec, 0, {"sum": values})["sum"]
    noise = spec.noise.sample(4, derive_stream(KEY, *spec.stream_labels("sum", 0)))
    expected = np.array([SUM_LIMIT, -SUM_LIMIT, SUM_LIMIT, -5]) + noise
    assert noisy.tolist() == expected.tolist()
    # Exact Python-int totals beyond int64 are clamped the same way.
    exact = np.array([2**70, -(2**70), 2**62 + 1, -5], dtype=object)
    assert noisy_partition(spec, 0, {"sum": exact})["sum"].tolist() == expected.tolist()


def test_the_noise_add_saturates_at_the_int64_ends_instead_of_wrapping():
    values = np.array([SUM_LIMIT, -SUM_LIMIT, 7, SUM_LIMIT, 0], dtype=np.int64)
    noise = np.array([INT64_MAX, INT64_MIN, -9, -(2**61), INT64_MIN], dtype=np.int64)
    assert saturating_add(values, noise).tolist() == [INT64_MAX, INT64_MIN, -2, 2**61, INT64_MIN]
    rng = np.random.default_rng(4)
    values = rng.integers(-SUM_LIMIT, SUM_LIMIT, 5000, endpoint=True, dtype=np.int64)
    noise = rng.integers(INT64_MIN, INT64_MAX, 5000, endpoint=True, dtype=np.int64)
    exact = [
        min(max(int(v) + int(z), INT64_MIN), INT64_MAX) for v, z in zip(values, noise, strict=True)
    ]
    assert saturating_add(values, noise).tolist() == exact
    wide = np.array([2**70, -(2**70), 3], dtype=object)
    assert saturating_add(np.array([1, 1, 1]), wide).tolist() == [INT64_MAX, INT64_MIN, 4]
    with pytest.raises(TypeError, match="true values must be int64, got float64"):
        saturating_add(np.array([1.0]), np.array([1]))


def test_noise_beyond_int64_is_released_clamped_not_an_error():
    # sigma = 2**100: the sampler's exact draws leave int64; the release saturates.
    spec = QuerySpec.build("sum", **params(bounds=(0, 2**31), noise=DiscreteGaussian(2**200)))
    values = np.array([SUM_LIMIT, 3], dtype=np.int64)
    noisy = noisy_partition(spec, 0, {"sum": values})["sum"]
    draws = spec.noise.sample(2, derive_stream(KEY, *spec.stream_labels("sum", 0)))
    expected = [
        min(max(int(v) + int(z), INT64_MIN), INT64_MAX) for v, z in zip(values, draws, strict=True)
    ]
    assert noisy.tolist() == expected
    assert all(abs(v) >= 2**63 - 1 for v in noisy.tolist())  # |noise| ~ 2**100


def test_an_integer_granularity_scales_the_noisy_sum_with_int64_saturation():
    spec = QuerySpec.build("mean", **params(bounds=(-400, 400), granularity=4))
    noisy = {
        "sum": np.array([2**62, -(2**62), 2**61 - 1, -3], dtype=np.int64),
        "count": np.array([1, 1, 1, 1], dtype=np.int64),
    }
    out = release_columns(spec, noisy)
    assert out["sum"].tolist() == [INT64_MAX, INT64_MIN, 2**63 - 4, -12]
    assert out["mean"].tolist() == [400.0, -400.0, 400.0, -12.0]


# --- Spark: the SQL path and the Parquet pass ----------------------------------------------


def collected_sums(aggregates, total):
    import pyarrow as pa

    if not isinstance(aggregates, pa.Table):
        frame = aggregates
        aggregates = frame.select("_cell", "s", "true_s").toArrow()
        frame.unpersist()
    assert aggregates.schema.field("s").type == pa.int64()
    dense = [0] * total
    cells, sums = aggregates.column("_cell").to_pylist(), aggregates.column("s").to_pylist()
    for cell, value in zip(cells, sums, strict=True):
        if cell >= 0:
            dense[cell] = value
    return dense


@pytest.mark.spark
def test_spark_sql_sums_at_the_bound_limit_beyond_2_53_are_exact(spark, parquet_pass_calls):
    from pyspark.sql import functions as sf

    from dp_pipeline.engines.spark.aggregate import aggregate_queries

    df = big_frame()
    index = sf.col("id")
    sdf = spark.range(ROWS).select(
        (index % 16 == 15).cast("long").alias("k"),
        sf.when(index % 7 == 0, sf.lit(2.0**40))
        .otherwise((sf.lit(2**31) - index % 3).cast("double"))
        .alias("v"),
    )
    spec = QuerySpec.build("sum", **params(bounds=(0, 2**31)))
    aggregates, _ = aggregate_queries(sdf, [spec], collect=True)
    assert parquet_pass_calls == [False]  # the Spark SQL path
    assert collected_sums(aggregates, 2) == expected_big_sums(df)


@pytest.mark.spark
def test_the_parquet_pass_sums_at_the_bound_limit_beyond_2_53_are_exact(
    spark, tmp_path, parquet_pass_calls
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dp_pipeline.engines.spark.aggregate import aggregate_queries

    df = big_frame()
    folder = tmp_path / "big"
    folder.mkdir()
    half = len(df) // 2
    for index, part in enumerate((df.iloc[:half], df.iloc[half:])):
        table = pa.Table.from_pandas(part, preserve_index=False)
        pq.write_table(table, folder / f"part-{index}.parquet", row_group_size=2**20)
    spec = QuerySpec.build("sum", **params(bounds=(0, 2**31)))
    aggregates, _ = aggregate_queries(spark.read.parquet(str(folder)), [spec], collect=True)
    assert parquet_pass_calls == [True]
    assert collected_sums(aggregates, 2) == expected_big_sums(df)


@pytest.mark.spark
def test_spark_sql_bounded_pairs_sum_exactly_at_the_bound_limit(spark):
    from dp_pipeline.engines.spark.aggregate import aggregate_queries

    # 40 units x 300 rows of 2**31 in cell 0 (max_per_cell 200 keeps 200 of each) and
    # single-row units in cell 1: the deferred rows' decimal sums meet the direct ones.
    units = np.concatenate([np.repeat(np.arange(40), 300), np.arange(100, 150)])
    k = np.concatenate([np.zeros(12000, np.int64), np.ones(50, np.int64)])
    df = pd.DataFrame({"k": k, "u": units.astype(np.int64), "v": 2.0**31})
    spec = QuerySpec.build(
        "sum", **params(bounds=(-(2**31), 2**31), privacy_unit="u", max_per_cell=200)
    )
    aggregates, _ = aggregate_queries(spark.createDataFrame(df), [spec])
    expected = [40 * 200 * 2**31, 50 * 2**31]
    assert collected_sums(aggregates, 2) == expected
    assert aggregate_pandas(df, spec)[0]["sum"].tolist() == expected


@pytest.mark.spark
def test_the_spark_clamp_of_decimal_totals(spark):
    from pyspark.sql import functions as sf

    from dp_pipeline.engines.spark_sql.coding import EXACT_TYPE, clamped_sum, exact_sum

    # Long partials whose total leaves int64 (a bigint sum would raise or wrap).
    longs = spark.createDataFrame(
        [(0, 2**62)] * 5 + [(1, -(2**62))] * 3 + [(2, 7)], "k long, v long"
    )
    sums = longs.groupBy("k").agg(
        exact_sum(sf.col("v")).alias("exact"), clamped_sum(exact_sum(sf.col("v"))).alias("c")
    )
    rows = {row["k"]: (int(row["exact"]), row["c"]) for row in sums.collect()}
    assert rows == {0: (5 * 2**62, SUM_LIMIT), 1: (-3 * 2**62, -SUM_LIMIT), 2: (7, 7)}

    values = [2**70, -(2**70), 2**62 + 1, -(2**62) - 1, 2**62, 12345]
    frame = spark.createDataFrame([(str(v),) for v in values], "v string")
    clamped = frame.select(clamped_sum(sf.col("v").cast(EXACT_TYPE)).alias("c")).collect()
    assert [row["c"] for row in clamped] == [
        SUM_LIMIT,
        -SUM_LIMIT,
        SUM_LIMIT,
        -SUM_LIMIT,
        SUM_LIMIT,
        12345,
    ]


# --- the Spark SQL path's limb sums (two longs) and their DECIMAL(38,0) fallback -------------

# Every value at a limb boundary: ±2**31 units (the bound), around ±2**16 (the low limb's
# width) and -1 (high limb -1, low limb 2**16 - 1).
LIMB_EDGES = [2**31, -(2**31), 2**31 - 1, -(2**31) + 1, 2**16, 2**16 - 1, -(2**16), -1, 0, 1]


def limb_frame():
    """Cell 0: units with several rows of every edge value; cell 1: single-row units at ±2**31."""
    rows = []
    for unit in range(30):
        for value in LIMB_EDGES:
            rows += [(0, unit, float(value))] * 3
    for unit in range(100, 140):
        rows.append((1, unit, float(2**31 if unit % 3 else -(2**31))))
    return pd.DataFrame(rows, columns=["k", "u", "v"])


def limb_spec(**overrides):
    return QuerySpec.build(
        "sum",
        **params(bounds=(-(2**31), 2**31), privacy_unit="u", max_per_cell=20, **overrides),
    )


def spark_sql_sums(spark, df, spec):
    """The Spark SQL jobs' sums (the one-pass Arrow pass, which sums in numpy, stands aside)."""
    import dp_pipeline.engines.spark.aggregate as spark_aggregate

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spark_aggregate, "arrow_pass", lambda *arguments: None)
        aggregates, _ = spark_aggregate.aggregate_queries(spark.createDataFrame(df), [spec])
    rows = aggregates.select("_cell", "s", "true_s").collect()
    aggregates.unpersist()
    return {row["_cell"]: (row["s"], row["true_s"]) for row in rows if row["_cell"] >= 0}


@pytest.mark.spark
def test_spark_sql_limb_sums_at_the_bound_equal_python_ints_and_the_numpy_rule(spark):
    df = limb_frame()
    spec = limb_spec()
    # Each unit has 30 rows in cell 0: max_per_cell 20 keeps 20 of them (keyed choice).
    sums = spark_sql_sums(spark, df, spec)
    true_sums = [sum(int(v) for v in df["v"][df["k"] == cell].astype(np.int64)) for cell in (0, 1)]
    assert [sums[cell][1] for cell in (0, 1)] == true_sums
    expected = aggregate_pandas(df, spec)[0]["sum"].tolist()
    assert [sums[cell][0] for cell in (0, 1)] == expected
    assert expected[1] == true_sums[1] == (27 - 13) * 2**31


@pytest.mark.spark
def test_spark_sql_sums_beyond_int64_recombine_the_limbs_exactly(spark):
    from pyspark.sql import functions as sf

    from dp_pipeline.engines.spark_sql.coding import SumRule, clamped_sum

    # Long partials summed as limbs: the totals leave int64 on both sides, then clamp.
    partials = spark.createDataFrame(
        [(0, 2**62)] * 5 + [(1, -(2**62))] * 3 + [(2, -(2**31))] * 4 + [(3, 2**31)],
        "k long, v long",
    )
    rule = SumRule.limbs()
    high, low = rule.terms(sf.col("v"))
    high_sum, low_sum = rule.sums(high, low)
    sums = partials.groupBy("k").agg(high_sum.alias("h"), low_sum.alias("l"))
    exact = rule.exact(sf.col("h"), sf.col("l"))
    rows = sums.select("k", exact.alias("exact"), clamped_sum(exact).alias("c")).collect()
    assert {row["k"]: (int(row["exact"]), row["c"]) for row in rows} == {
        0: (5 * 2**62, SUM_LIMIT),
        1: (-3 * 2**62, -SUM_LIMIT),
        2: (-4 * 2**31, -4 * 2**31),
        3: (2**31, 2**31),
    }


@pytest.mark.spark
@pytest.mark.parametrize("privacy_unit", ["u", None])
def test_inputs_beyond_the_limb_row_limit_are_summed_again_as_decimals(
    spark, monkeypatch, privacy_unit
):
    import dp_pipeline.engines.spark.aggregate as spark_aggregate
    from dp_pipeline.engines.spark.aggregate import aggregate_queries

    df = limb_frame()
    if privacy_unit is None:
        spec = QuerySpec.build("sum", **params(bounds=(-(2**31), 2**31)))
    else:
        spec = limb_spec()
    limbs = spark_sql_sums(spark, df, spec)
    # The limit as if the input had more rows than two long limbs sum exactly.
    monkeypatch.setattr(spark_aggregate, "LIMB_ROWS", len(df) - 1)
    decimals = spark_sql_sums(spark, df, spec)
    assert decimals == limbs
    assert [decimals[cell][0] for cell in (0, 1)] == aggregate_pandas(df, spec)[0]["sum"].tolist()
    if privacy_unit is None:  # no deferred rows: the first aggregates are the result
        monkeypatch.setattr(spark_aggregate, "arrow_pass", lambda *arguments: None)
        aggregates, _ = aggregate_queries(spark.createDataFrame(df), [spec])
        assert dict(aggregates.dtypes)["_dp_s_high"] == "decimal(38,0)"
        aggregates.unpersist()
        monkeypatch.setattr(spark_aggregate, "LIMB_ROWS", len(df))
        aggregates, _ = aggregate_queries(spark.createDataFrame(df), [spec])
        assert dict(aggregates.dtypes)["_dp_s_high"] == "bigint"
        aggregates.unpersist()
