"""The Spark engine against the pandas engine: identical releases, real PySpark local mode."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from dp_pipeline import DiscreteGaussian, DiscreteLaplace, MasterKey
from dp_pipeline.engines.bounding import BoundingSalt, spark_xxhash64, unit_keys
from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.spark import run_spark

pytestmark = pytest.mark.spark

KEY = MasterKey.from_hex("55" * 32)


def data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "state": rng.integers(-1, 6, n),
            "sex": rng.choice(["f", "m", "x"], n).astype(object),
            "unit": rng.integers(0, 40, n),
            "income": rng.normal(50, 40, n),
        }
    )
    df.loc[::37, "income"] = np.nan
    return df


def spec(statistic, **overrides):
    params = dict(
        by=["state", "sex"],
        domains={"state": range(0, 5), "sex": ["f", "m"]},
        noise=DiscreteGaussian(16),
        key=KEY,
        release_id="rel",
        table="t",
        noise_partitions=4,
        privacy_unit=None,
    )
    if statistic != "count":
        params.update(column="income", bounds=(-20, 100), granularity="1/4")
    params.update(overrides)
    return QuerySpec.build(statistic, **params)


def spark_release(spark, df, query_spec, **kwargs):
    noisy, diagnostics = run_spark(spark.createDataFrame(df), query_spec, **kwargs)
    out = noisy.toPandas().sort_values(list(query_spec.cells.columns)).reset_index(drop=True)
    return out, diagnostics


def pandas_release(df, query_spec):
    out, diagnostics = run_pandas(df, query_spec)
    return out.sort_values(list(query_spec.cells.columns)).reset_index(drop=True), diagnostics


def assert_same(a: pd.DataFrame, b: pd.DataFrame):
    assert list(a.columns) == list(b.columns)
    for column in a.columns:
        assert a[column].astype(object).tolist() == b[column].astype(object).tolist(), column


def test_numpy_xxhash64_and_unit_key_equal_spark(spark):
    from pyspark.sql import functions as sf

    rng = np.random.default_rng(7)
    a = rng.integers(-(2**63), 2**63 - 1, 200, dtype=np.int64)
    b = rng.integers(-(2**63), 2**63 - 1, 200, dtype=np.int64)
    sdf = spark.createDataFrame(pd.DataFrame({"a": a, "b": b, "u": [f"p{i}" for i in range(200)]}))
    salt = BoundingSalt.derive(KEY, "rel", "t")
    digest = sf.sha2(sf.concat(sf.lit(salt.unit_salt + "|"), sf.col("u")), 256)
    got = sdf.select(
        sf.xxhash64(sf.lit(salt.seed_cells).cast("long"), "a", "b").alias("h"),
        sf.conv(sf.substring(digest, 1, 15), 16, 10).cast("long").alias("k"),
    ).toPandas()
    assert np.array_equal(got["h"].to_numpy(), spark_xxhash64(salt.seed_cells, a, b))
    _, keys = unit_keys(np.array([f"p{i}" for i in range(200)], dtype=object), salt)
    assert np.array_equal(got["k"].to_numpy(), keys)


@pytest.mark.parametrize(
    ("statistic", "overrides"),
    [
        ("count", {}),
        ("count", dict(privacy_unit="unit", max_cells=3, max_per_cell=2)),
        ("sum", {}),
        ("sum", dict(privacy_unit="unit", max_cells=2, max_per_cell=3)),
        ("mean", dict(privacy_unit="unit", max_cells=2, count_noise=DiscreteLaplace(3))),
    ],
)
def test_spark_and_pandas_releases_are_bit_identical(spark, statistic, overrides):
    df = data()
    query_spec = spec(statistic, **overrides)
    expected, expected_diagnostics = pandas_release(df, query_spec)
    got, diagnostics = spark_release(spark, df, query_spec)
    assert len(got) == query_spec.cells.total
    assert_same(got, expected)
    assert diagnostics == expected_diagnostics


def test_determinism_across_shuffle_partitions_and_a_retried_noise_task(spark, tmp_path):
    df = data(seed=3)
    query_spec = spec("sum", privacy_unit="unit", max_cells=2)
    expected, _ = pandas_release(df, query_spec)
    marker = str(tmp_path / "failed-once")

    def fail_once(function):
        def wrapped(table):
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("injected one-time noise task failure")
            return function(table)

        return wrapped

    for partitions in (1, 7):
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
        try:
            got, _ = spark_release(spark, df, query_spec)
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", "4")
        assert_same(got, expected)
    got, _ = spark_release(spark, df, query_spec, wrap_udf=fail_once)
    assert os.path.exists(marker)
    assert_same(got, expected)


def test_spark_bad_input_errors_name_column_and_value(spark):
    df = data()
    with pytest.raises(ValueError, match=r"column 'state': some rows have a key outside"):
        run_spark(spark.createDataFrame(df), spec("count", on_invalid="error"))
    with pytest.raises(TypeError, match="key column 'state' has Spark type string but its"):
        run_spark(spark.createDataFrame(df.astype({"state": str})), spec("count"))
    with pytest.raises(ValueError, match="key column 'sex' is not in the DataFrame"):
        run_spark(spark.createDataFrame(df.drop(columns="sex")), spec("count"))


def mixed_units_data(n=900, seed=11):
    """Mostly one-row units (the fast path), some units with several rows, null units."""
    rng = np.random.default_rng(seed)
    units = np.arange(n).astype(object)
    repeated = rng.random(n) < 0.3
    units[repeated] = rng.integers(0, 25, repeated.sum())  # collide with one-row ids 0..24
    units[rng.random(n) < 0.02] = None
    df = pd.DataFrame(
        {
            "state": rng.integers(-1, 6, n),
            "sex": rng.choice(["f", "m", "x"], n).astype(object),
            "code": rng.choice([f"c{i:03d}" for i in range(110)], n).astype(object),
            "unit": pd.array(units, dtype="Int64"),
            "income": rng.normal(50, 40, n),
        }
    )
    df.loc[::41, "income"] = np.nan
    df.loc[::53, "sex"] = None
    return df


def release_queries(unit):
    """Four queries of one release sharing the privacy unit, with different bounds."""
    codes = [f"c{i:03d}" for i in range(100)]  # 100 values: looked up by a broadcast join
    common = dict(privacy_unit=unit) if unit else {}
    return [
        spec("count", table="by_state_sex", **common),
        spec(
            "count",
            table="by_code",
            by=["code"],
            domains={"code": codes},
            **(dict(common, max_cells=3, max_per_cell=2) if unit else {}),
        ),
        spec("sum", table="income", **(dict(common, max_cells=2, max_per_cell=3) if unit else {})),
        spec("mean", table="mean_income", count_noise=DiscreteLaplace(3), **common),
    ]


def assert_queries_equal_pandas(spark, df, specs, sdf=None):
    """run_queries on ``df`` (or ``sdf``, the same rows read by Spark) gives, query by query,
    the pandas engine's release and diagnostics."""
    from dp_pipeline.spark import run_queries

    results = run_queries(spark.createDataFrame(df) if sdf is None else sdf, specs)
    assert len(results) == len(specs)
    diagnostics_list = []
    for query_spec, (noisy, diagnostics) in zip(specs, results, strict=True):
        got = noisy.toPandas().sort_values(list(query_spec.cells.columns)).reset_index(drop=True)
        expected, expected_diagnostics = pandas_release(df, query_spec)
        assert len(got) == query_spec.cells.total
        assert_same(got, expected)
        assert diagnostics == expected_diagnostics
        diagnostics_list.append(diagnostics)
    return diagnostics_list


@pytest.mark.parametrize("unit", ["unit", None])
def test_queries_run_together_equal_each_query_alone_in_pandas(spark, unit):
    df = mixed_units_data()
    for diagnostics in assert_queries_equal_pandas(spark, df, release_queries(unit)):
        if unit:
            assert diagnostics.rows_null_unit > 0


def test_fused_aggregates_report_true_values_before_bounding(spark):
    from pyspark.sql import functions as sf

    from dp_pipeline.engines.pandas.aggregate import aggregate_pandas
    from dp_pipeline.engines.spark.aggregate import TABLE_COLUMN, aggregate_queries
    from dp_pipeline.udfs.noise import CELL_COLUMN

    df = mixed_units_data(seed=5)
    specs = release_queries("unit")
    aggregates, _ = aggregate_queries(spark.createDataFrame(df), specs)
    rows = aggregates.filter(sf.col(CELL_COLUMN) >= 0).toPandas()
    unbounded = release_queries(None)
    for index, query_spec in enumerate(unbounded):
        mine = rows[rows[TABLE_COLUMN] == index]
        true_n = np.zeros(query_spec.cells.total, dtype=np.int64)
        true_n[mine[CELL_COLUMN].to_numpy()] = mine["true_n"].to_numpy()
        # Without a privacy unit nothing is bounded: pandas' counts are the truth, except
        # for rows with a null unit, which the bounded queries drop.
        kept = df[df["unit"].notna()]
        values, _, _ = aggregate_pandas(kept, query_spec)
        assert np.array_equal(true_n, values["count"]), query_spec.table
        bounded_n = np.zeros(query_spec.cells.total, dtype=np.int64)
        bounded_n[mine[CELL_COLUMN].to_numpy()] = mine["n"].to_numpy()
        assert (bounded_n <= true_n).all()
    aggregates.unpersist()


def test_queries_run_together_refuse_mixed_units_and_shared_streams(spark):
    from dp_pipeline.spark import run_queries

    sdf = spark.createDataFrame(mixed_units_data(n=50))
    mixed = [spec("count", table="a", privacy_unit="unit"), spec("count", table="b")]
    with pytest.raises(ValueError, match="must share the privacy unit column; got"):
        run_queries(sdf, mixed)
    twins = [spec("count", table="a"), spec("sum", table="a")]
    with pytest.raises(ValueError, match="use release_id 'rel' and table 'a'"):
        run_queries(sdf, twins)


def test_queries_run_together_raise_on_the_invalid_table_before_noise(spark):
    from dp_pipeline.spark import run_queries

    df = mixed_units_data(n=200)
    specs = release_queries("unit")
    specs[2] = spec("sum", table="income", privacy_unit="unit", max_cells=2, on_invalid="error")
    with pytest.raises(ValueError, match=r"column 'state': some rows have a key outside"):
        run_queries(spark.createDataFrame(df), specs)
    valid_state = df[df["state"].between(0, 4)]
    with pytest.raises(ValueError, match=r"column 'sex': some rows have a null key"):
        run_queries(spark.createDataFrame(valid_state), specs)


@pytest.mark.parametrize("path", ["window over all rows", "one-row units only"])
def test_every_deferral_path_gives_the_same_release(spark, monkeypatch, path):
    import dp_pipeline.engines.spark.units as spark_units

    df = mixed_units_data(seed=8)
    if path == "window over all rows":
        # More units with several rows than the broadcast lookup takes.
        monkeypatch.setattr(spark_units, "BROADCAST_UNITS", 3)
    else:
        df = df.assign(unit=pd.array(np.arange(len(df)), dtype="Int64"))
        df.loc[::29, "unit"] = None
    assert_queries_equal_pandas(spark, df, release_queries("unit"))


def test_sorted_unit_check_proves_uniqueness_only_when_it_holds(spark):
    from dp_pipeline.engines.spark.units import sorted_and_unique

    def frame(*partitions):
        # One Spark partition per list, rows in list order.
        rows = spark.sparkContext.parallelize(partitions, len(partitions))
        return spark.createDataFrame(rows.flatMap(lambda p: [(v,) for v in p]), "unit long")

    assert sorted_and_unique(frame([0, 1, 5, None, 9], [10, 11, None]), "unit") == (True, True)
    assert sorted_and_unique(frame([20, 21], [0, 3]), "unit") == (True, False)  # any order
    # Increasing within each partition, but the ranges overlap: 3 may occur twice.
    assert sorted_and_unique(frame([0, 3, 6], [1, 3, 4]), "unit")[0] is False
    assert sorted_and_unique(frame([0, 1, 1, 2]), "unit")[0] is False  # a repeat in a run
    assert sorted_and_unique(frame([0, 2, 1]), "unit")[0] is False  # not sorted: unproven
    assert sorted_and_unique(frame([None, None], [4]), "unit") == (True, True)


def test_consecutive_unit_check_proves_uniqueness_only_when_it_holds(spark):
    from dp_pipeline.engines.spark.units import check_units, consecutive_and_unique

    def frame(*partitions):
        # One Spark partition per list, rows in list order.
        rows = spark.sparkContext.parallelize(partitions, len(partitions))
        return spark.createDataFrame(rows.flatMap(lambda p: [(v,) for v in p]), "unit long")

    assert consecutive_and_unique(frame([0, 1, 2], [3, 4]), "unit") == (True, False)
    assert consecutive_and_unique(frame([7, 8], [], [0, 1]), "unit") == (True, False)
    # A null takes its row's place: 0, 1, _, 3 are still numbered in row order.
    assert consecutive_and_unique(frame([0, 1, None, 3], [None]), "unit") == (True, True)
    lowest = -(2**63)
    for unproven in (
        frame([0, 1, 1]),  # a repeat
        frame([0, 1, 2], [2, 3]),  # ranges overlap: 2 twice
        frame([0, 2, 4]),  # sorted with gaps: another proof's job
        frame([0, 1, None, 2]),  # the null's row number is skipped
        frame([2, 1, 0]),
        frame([lowest, lowest + 1]),  # no offset without overflow: proves nothing
    ):
        assert consecutive_and_unique(unproven, "unit")[0] is False
    # Where it proves nothing the sorted-run proof still does, then the window finds repeats.
    for proven, nulls in ((frame([0, 2, 4]), False), (frame([0, 1, None, 2]), True)):
        check = check_units(proven, "unit")
        assert (check.deferral, check.has_nulls) == ("none", nulls)
    check = check_units(frame([0, 1, 1], [5, None]), "unit")
    assert (check.deferral, check.has_nulls) == ("lookup", True)
    assert [row["_dp_unit"] for row in check.lookup.collect()] == [1]


def test_a_non_deterministic_input_is_evaluated_once_for_the_unit_check(spark):
    from pyspark.sql import functions as sf

    from dp_pipeline.engines.spark.aggregate import stable_input
    from dp_pipeline.spark import run_queries

    specs = release_queries("unit")
    stable = spark.createDataFrame(mixed_units_data(n=60))
    assert stable_input(stable, specs) is stable  # deterministic: read as is
    # Units drawn by rand(): a second evaluation would give other units.
    shaky = stable.withColumn("unit", (sf.rand() * 5).cast("long"))
    once = stable_input(shaky, specs)
    assert once is not shaky
    assert once._jdf.queryExecution().analyzed().deterministic()
    first = sorted((tuple(row) for row in once.collect()), key=repr)
    assert sorted((tuple(row) for row in once.collect()), key=repr) == first
    assert set(once.columns) == {"state", "sex", "code", "unit", "income"}
    # Bounding holds on the rows the check saw: at most max_cells cells per unit.
    results = run_queries(once, specs)
    position = once.columns.index("unit")
    units = len({row[position] for row in first if row[position] is not None})
    assert results[0][1].rows_used <= units * specs[0].max_cells


def test_string_units_with_several_rows_take_the_lookup_path(spark):
    df = mixed_units_data(seed=12)
    df["unit"] = df["unit"].map(lambda u: None if pd.isna(u) else f"person-{u}").astype(object)
    for diagnostics in assert_queries_equal_pandas(spark, df, release_queries("unit")):
        assert diagnostics.rows_removed_max_cells + diagnostics.rows_removed_max_per_cell > 0


@pytest.mark.parametrize("unit", ["unit", None])
def test_driver_noise_equals_the_spark_noise_job(spark, unit):
    from dp_pipeline.engines.spark.aggregate import aggregate_queries
    from dp_pipeline.spark import collect_noisy_cells

    specs = release_queries(unit)
    aggregates, _ = aggregate_queries(spark.createDataFrame(mixed_units_data(seed=3)), specs)
    try:
        local, local_truth = collect_noisy_cells(aggregates, specs, spark, truth=True)
        job, job_truth = collect_noisy_cells(aggregates, specs, spark, truth=True, driver_cells=0)
    finally:
        aggregates.unpersist()

    def rows(table):  # values only: Spark marks its output columns non-nullable
        return table.sort_by([("_dp_table", "ascending"), ("_cell", "ascending")]).to_pydict()

    assert local.num_rows == sum(query_spec.cells.total for query_spec in specs)
    assert rows(local) == rows(job)
    assert rows(local_truth.select(job_truth.column_names)) == rows(job_truth)


def parquet_input(spark, df, folder):
    """``df`` as two Parquet files of several row groups each, read back by Spark."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    half = len(df) // 2
    for index, part in enumerate((df.iloc[:half], df.iloc[half:])):
        table = pa.Table.from_pandas(part, preserve_index=False)
        pq.write_table(table, folder / f"part-{index}.parquet", row_group_size=97)
    return spark.read.parquet(str(folder))


CASES = ["sorted units", "no unit", "unsorted unique units", "units with several rows"]


@pytest.mark.parametrize("case", CASES)
def test_the_parquet_path_equals_the_pandas_engine(spark, tmp_path, parquet_pass_calls, case):
    df = mixed_units_data(seed=21)
    if case in ("sorted units", "unsorted unique units"):
        ids = np.arange(len(df)) * 3
        if case == "unsorted unique units":  # proven unique by sorting all ids on the driver
            ids = np.random.default_rng(5).permutation(ids)
        df = df.assign(unit=pd.array(ids, dtype="Int64"))
        df.loc[::31, "unit"] = None
    specs = release_queries(None if case == "no unit" else "unit")
    sdf = parquet_input(spark, df, tmp_path / "input")
    diagnostics = assert_queries_equal_pandas(spark, df, specs, sdf)
    assert all(d.rows_null_key.get("sex", 1) > 0 for d in diagnostics)  # dropped rows counted
    assert all(d.rows_out_of_domain.get("state", 1) > 0 for d in diagnostics)
    assert diagnostics[2].rows_invalid_value > 0 and diagnostics[2].rows_clamped > 0
    # Units with several rows need the general path's bounding rule.
    assert parquet_pass_calls == [case != "units with several rows"]


def test_the_parquet_path_only_takes_bare_local_parquet_scans(spark, tmp_path):
    from pyspark.sql import functions as sf

    from dp_pipeline.engines.spark.parquet_plan import parquet_pieces

    df = mixed_units_data(n=300, seed=2)
    specs = release_queries("unit")
    sdf = parquet_input(spark, df, tmp_path / "input")
    pieces = parquet_pieces(sdf, specs, "unit")
    assert len(pieces) == 4 and {group for _, group in pieces} == {0, 1}  # 2 files x 2 groups
    assert parquet_pieces(sdf.filter(sf.col("state") > 0), specs, "unit") is None
    assert (
        parquet_pieces(sdf.select("state", "sex", "code", "unit", "income"), specs, "unit") is None
    )
    assert parquet_pieces(spark.createDataFrame(df), specs, "unit") is None
    strings = sdf.withColumn("unit", sf.col("unit").cast("string"))
    assert parquet_pieces(strings, specs, "unit") is None


@pytest.mark.parametrize("problem", ["out of domain", "null key", "invalid value", "null unit"])
def test_the_parquet_path_raises_the_general_paths_errors(spark, tmp_path, monkeypatch, problem):
    import dp_pipeline.engines.spark.parquet_plan as parquet_plan
    from dp_pipeline.spark import run_queries

    df = mixed_units_data(n=400, seed=9).assign(unit=pd.array(np.arange(400), dtype="Int64"))
    df = df[df["state"].between(0, 4) & df["sex"].notna() & df["income"].notna()]
    df = df.reset_index(drop=True)
    bad = {
        "out of domain": ("state", 7),
        "null key": ("sex", None),
        "invalid value": ("income", np.inf),
        "null unit": ("unit", None),
    }[problem]
    df.loc[[5, 40], bad[0]] = bad[1]
    specs = [
        spec("count", table="a", privacy_unit="unit", on_invalid="error"),
        spec("sum", table="b", privacy_unit="unit", on_invalid="error"),
    ]
    sdf = parquet_input(spark, df, tmp_path / "input")
    messages = []
    for cells in (parquet_plan.ONE_PASS_CELLS, 0):  # the Parquet path, then the general one
        monkeypatch.setattr(parquet_plan, "ONE_PASS_CELLS", cells)
        with pytest.raises(ValueError, match=r"some rows") as raised:
            run_queries(sdf, specs)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    with pytest.raises(ValueError) as raised:
        run_pandas(df, specs[0] if problem != "invalid value" else specs[1])
    assert str(raised.value) == messages[0]


def test_interleaved_sorted_files_are_proven_unique_and_the_id_sort_has_a_cap(
    spark, tmp_path, parquet_pass_calls, monkeypatch
):
    import dp_pipeline.engines.spark.parquet_plan as parquet_plan

    df = mixed_units_data(seed=8)
    # Each file's ids increase, but the files' ranges overlap (evens, then odds).
    ids = np.concatenate([np.arange(0, len(df), 2), np.arange(1, len(df), 2)])[: len(df)]
    df = df.assign(unit=pd.array(ids, dtype="Int64"))
    specs = release_queries("unit")
    sdf = parquet_input(spark, df, tmp_path / "input")
    assert_queries_equal_pandas(spark, df, specs, sdf)
    monkeypatch.setattr(parquet_plan, "ID_SORT_ROWS", len(df) - 1)
    assert_queries_equal_pandas(spark, df, specs, sdf)  # too many ids to sort: general path
    assert parquet_pass_calls == [True, False]


@pytest.mark.parametrize("units", ["sorted", "several rows", "out of order", "none"])
def test_the_arrow_pass_aggregates_any_dataframe_whose_ids_it_proves_unique(
    spark, tmp_path, monkeypatch, units
):
    import dp_pipeline.engines.spark.aggregate as spark_aggregate

    calls = []
    original = spark_aggregate.arrow_pass

    def recording(*args):
        result = original(*args)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(spark_aggregate, "arrow_pass", recording)
    df = mixed_units_data(n=500, seed=4)
    ids = {
        "sorted": np.arange(500),
        "several rows": np.arange(500) // 2,
        "out of order": np.arange(500)[::-1],
        "none": np.arange(500),
    }[units]
    df = df.assign(unit=pd.array(ids, dtype="Int64"))
    df.loc[[7, 300], "unit"] = None  # null units are dropped rows, not a proof's failure
    specs = release_queries(None if units == "none" else "unit")
    # A filtered scan is not a bare Parquet scan: the Parquet pass declines it.
    sdf = parquet_input(spark, df, tmp_path / "input").filter("state < 99")
    assert_queries_equal_pandas(spark, df, specs, sdf)
    # Ids in decreasing order are single-id segments, all disjoint: proven unique too.
    assert calls == [units != "several rows"]


def test_the_arrow_pass_codes_short_key_domains_in_spark_as_the_numpy_rules_do(spark):
    """Keys of range and short-list domains reach the Arrow pass's tasks coded by Spark
    (`KeyCodes`, packed into longs): their positions and null masks are the numpy rules'
    on the raw columns, for nulls, NaN, non-integers, infinities and values outside."""
    import pyarrow as pa

    from dp_pipeline.engines.spark.arrow_pass import KeyCodes
    from dp_pipeline.engines.spark.parquet_pass import ChunkAggregator

    rows = pd.DataFrame(
        {
            "state": pd.array([0, 4, 5, -1, None, 2, 3, 1], dtype="Int64"),
            "level": [0.0, 1.0, np.nan, 2.5, np.inf, 1.0, -3.0, None],
            "sex": ["f", "m", "x", None, "f", "F", "m", ""],
            "code": [f"c{i:03d}" for i in (0, 99, 5, 7, 100, 1, 2, 3)],
            "income": np.arange(8, dtype=float),
        }
    )
    specs = [
        spec("count", table="a"),
        spec("sum", table="b", by=["level", "sex"], domains={"level": [1, 2, 0], "sex": ["m"]}),
        spec("count", table="c", by=["code"], domains={"code": [f"c{i:03d}" for i in range(100)]}),
    ]
    sdf = spark.createDataFrame(rows)
    codes, packed = KeyCodes.plan(sdf, specs, keep={"income"})
    assert codes.columns == {"state", "level", "sex"}  # 100 values: left to the numpy rules
    chunk = sdf.select(*packed).toArrow()
    positions, nulls = codes.decode(chunk)

    numpy_rules = ChunkAggregator([s.without_key() for s in specs], None)
    seen = {}
    for table in numpy_rules.tables:
        table.add = lambda p, n, *rest: seen.update(positions=p, nulls=n)
    numpy_rules.add(pa.Table.from_pandas(rows, preserve_index=False))
    assert set(positions) == {s for s in seen["positions"] if s[0] != "code"}
    for signature, found in positions.items():
        missing = seen["nulls"][signature[0]]
        expected = seen["positions"][signature]
        if missing is not None:
            expected = np.where(missing, -1, expected)  # a null key's position may be anything
        assert found.tolist() == expected.tolist(), signature
    for column in codes.columns:
        expected = seen["nulls"][column]
        assert (nulls[column] is None) == (expected is None)
        if expected is not None:
            assert nulls[column].tolist() == expected.tolist()
