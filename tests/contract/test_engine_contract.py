"""The engine contract: every engine path bounds, drops, completes the domain and noises alike.

One suite, run on each path that aggregates a release: the pandas engine, the
Spark SQL jobs and the one Parquet pass. Each test states its expected values
once (exact integers, or the j-th draw of a stream) and every path must meet
them, so the paths also agree bit for bit with each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

import numpy as np
import pandas as pd
import pytest
from engine_queries import DOMAINS, KEY, make_spec

from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.engines.backend import aggregate as backend_aggregate
from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.randomness import derive_stream


def frame(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "state": pd.array(rng.integers(0, 4, n), dtype="Int64"),
            "sex": rng.choice(["f", "m"], n).astype(object),
            "unit": rng.integers(0, 50, n),
            "income": rng.uniform(-20, 120, n),
        }
    )


def adversary(n_rows=1000, n_cells=50, seed=1):
    """One unit ("mallory") with ``n_rows`` rows spread over ``n_cells`` cells."""
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, n_cells, n_rows)
    return pd.DataFrame(
        {
            "unit": ["mallory"] * n_rows,
            "state": cells // 2,
            "sex": np.where(cells % 2, "m", "f").astype(object),
            "income": rng.uniform(0, 1000, n_rows),
        }
    )


def spec_domains(spec):
    return {
        d.column: range(d.start, d.stop) if d.is_range else list(d.values)
        for d in spec.cells.domains
    }


@dataclass
class Engine:
    """One engine path behind the two calls the contract needs.

    ``aggregate(df, specs)``: (the true bounded aggregates of each query as dense
    int64 vectors by cell index, ``{"count": ..., "sum": ... or None}``; the
    diagnostics of each query). The queries share the privacy unit.
    ``release(df, spec)``: the released table as a pandas frame, one row per
    declared cell in cell order (a Spark release is sorted by its key columns,
    which is cell order for the sorted domains used here).
    """

    name: str
    aggregate: object
    release: object


def unpack(aggregates) -> tuple[list[dict], list]:
    """The backend's `CellAggregates` as (vectors, diagnostics) lists."""
    return [a.vectors() for a in aggregates], [a.diagnostics for a in aggregates]


def pandas_engine() -> Engine:
    def aggregate(df, specs):
        return unpack(backend_aggregate(df, specs))

    def release(df, spec):
        out, _ = run_pandas(df, spec)
        return out

    return Engine("pandas", aggregate, release)


def spark_engine(name, spark, to_spark, check_path, spark_calls) -> Engine:
    """A Spark path: ``to_spark(df)`` gives its input, ``check_path(df, specs, calls)``
    asserts that the path meant to run did (``calls``: the new entries of ``spark_calls``,
    the `parquet_pass` recorder)."""
    from dp_pipeline.spark import run_queries

    def aggregate(df, specs):
        before = len(spark_calls)
        result = unpack(backend_aggregate(to_spark(df), specs))
        check_path(df, specs, spark_calls[before:])
        return result

    def release(df, spec):
        before = len(spark_calls)
        ((noisy, _),) = run_queries(to_spark(df), [spec])
        out = noisy.toPandas()
        check_path(df, [spec], spark_calls[before:])
        return out.sort_values(list(spec.cells.columns)).reset_index(drop=True)

    return Engine(name, aggregate, release)


def one_row_units(df, specs) -> bool:
    """Can the Parquet pass prove every unit has one row (no unit, or unique integer ids)?"""
    (unit,) = {spec.privacy_unit for spec in specs}
    if unit is None:
        return True
    ids = df[unit]
    return pd.api.types.is_integer_dtype(ids.dtype) and ids.dropna().is_unique


def sorted_ids(df, specs) -> bool:
    """Can the Arrow pass prove every unit has one row (no unit, or increasing ids)?"""
    (unit,) = {spec.privacy_unit for spec in specs}
    if unit is None:
        return True
    ids = df[unit].dropna()
    return pd.api.types.is_integer_dtype(ids.dtype) and bool((ids.diff().iloc[1:] > 0).all())


@pytest.fixture(
    params=[
        "pandas",
        pytest.param("spark_sql", marks=pytest.mark.spark),
        pytest.param("arrow_pass", marks=pytest.mark.spark),
        pytest.param("parquet_pass", marks=pytest.mark.spark),
    ]
)
def engine(request, tmp_path, monkeypatch):
    if request.param == "pandas":
        return pandas_engine()  # no Spark fixture: the core install has no PySpark
    spark = request.getfixturevalue("spark")
    parquet_pass_calls = request.getfixturevalue("parquet_pass_calls")
    files = count()

    if request.param == "arrow_pass":
        import dp_pipeline.engines.spark.aggregate as spark_aggregate

        arrow_calls = []
        original = spark_aggregate.arrow_pass

        def recording(*args):
            result = original(*args)
            arrow_calls.append(result is not None)
            return result

        monkeypatch.setattr(spark_aggregate, "arrow_pass", recording)

        def to_spark(df):
            return spark.createDataFrame(df)  # any DataFrame: the Arrow pass, if ids are sorted

        def check_path(df, specs, calls):
            assert calls == [False], f"the Parquet pass ran: {calls}"
            taken = arrow_calls[-1]
            if not sorted_ids(df, specs):
                assert not taken, "the Arrow pass must decline ids it cannot prove unique"

        return spark_engine(request.param, spark, to_spark, check_path, parquet_pass_calls)

    if request.param == "spark_sql":
        from dp_pipeline.engines.spark import parquet_plan

        monkeypatch.setattr(parquet_plan, "ONE_PASS_CELLS", 0)  # neither one-pass path

        def to_spark(df):
            return spark.createDataFrame(df)  # not a bare Parquet scan: the Spark SQL jobs

        def check_path(df, specs, calls):
            assert calls == [False], f"the Spark SQL path must run, Parquet pass calls: {calls}"

    else:

        def to_spark(df):
            import pyarrow as pa
            import pyarrow.parquet as pq

            path = tmp_path / f"input-{next(files)}.parquet"
            table = pa.Table.from_pandas(df, preserve_index=False)
            pq.write_table(table, path, row_group_size=97)
            return spark.read.parquet(str(path))

        def check_path(df, specs, calls):
            # Units with several rows need the general rule: the pass declines them.
            assert calls == [one_row_units(df, specs)], f"Parquet pass calls: {calls}"

    return spark_engine(request.param, spark, to_spark, check_path, parquet_pass_calls)


def released(frame_: pd.DataFrame) -> dict[str, list]:
    """A release's columns as plain value lists (dtypes differ by engine, values must not)."""
    return {column: frame_[column].astype(object).tolist() for column in frame_.columns}


def test_every_declared_cell_is_released_in_cell_order_zero_counts_included(engine):
    df = pd.DataFrame({"state": pd.array([1, 1, 3], dtype="Int64"), "sex": ["m", "m", "f"]})
    spec = make_spec(domains={"state": range(0, 5), "sex": ["f", "m", "x"]})
    (true,), _ = engine.aggregate(df, [spec])
    expected = np.zeros(15, dtype=np.int64)
    expected[1 * 3 + 1] = 2
    expected[3 * 3 + 0] = 1
    assert np.array_equal(true["count"], expected)
    out = engine.release(df, spec)
    assert len(out) == 15
    assert out["state"].tolist() == [s for s in range(5) for _ in range(3)]
    assert out["sex"].tolist() == ["f", "m", "x"] * 5


def test_noise_is_the_jth_draw_of_the_partition_stream(engine):
    df = frame()
    spec = make_spec(noise_partitions=3)
    (true,), _ = engine.aggregate(df, [spec])
    out = engine.release(df, spec)
    noise = out["count"].to_numpy() - true["count"]
    for partition in range(3):
        cells = np.arange(partition, 8, 3)
        stream = derive_stream(KEY, *spec.stream_labels("count", partition))
        assert spec.stream_labels("count", partition)[1:3] == ("rel-1", "persons")
        expected = spec.noise.sample(cells.size, stream)
        assert np.array_equal(noise[cells], np.asarray(expected, dtype=np.int64))


def test_release_is_deterministic_and_keyed_by_release_id(engine):
    df = frame()
    a = engine.release(df, make_spec())
    b = engine.release(df.sample(frac=1, random_state=3), make_spec())
    c = engine.release(df, make_spec(release_id="rel-2"))
    assert released(a) == released(b)
    assert released(a)["count"] != released(c)["count"]


@pytest.mark.parametrize(
    ("statistic", "overrides"),
    [
        ("count", dict(privacy_unit="unit", max_cells=3, max_per_cell=2)),
        (
            "mean",
            dict(
                privacy_unit="unit",
                max_cells=2,
                max_per_cell=3,
                granularity="1/4",
                count_noise=DiscreteGaussian(4),
            ),
        ),
        ("sum", {}),
    ],
)
def test_released_values_equal_the_pandas_engine_bit_for_bit(engine, statistic, overrides):
    df = frame(seed=4)
    df.loc[::23, "income"] = np.nan
    spec = make_spec(statistic, **overrides)
    out = engine.release(df, spec)
    reference, _ = run_pandas(df, spec)
    assert released(out) == released(reference)


def test_diagnostics_count_each_dropped_row_once(engine):
    df = pd.DataFrame(
        {
            "state": pd.array([0, None, 9, 1, None, 2, 3], dtype="Int64"),
            "sex": [None, "f", "m", "q", "m", "f", "m"],
            "income": [1.0, 2.0, 3.0, 4.0, 5.0, np.nan, np.inf],
        }
    )
    _, (diagnostics,) = engine.aggregate(df, [make_spec("sum")])
    assert diagnostics.rows_in == 7
    assert diagnostics.rows_null_key == {"state": 2, "sex": 1}
    assert diagnostics.rows_out_of_domain == {"state": 1, "sex": 1}
    assert diagnostics.rows_invalid_value == 2
    assert diagnostics.rows_used == 0
    assert diagnostics.rows_dropped == 7


def test_a_float_integer_key_holding_nan_and_non_integers_gives_invalid_rows(engine):
    # An integer column with a missing value is float64 in pandas and in Parquet files
    # pandas writes: NaN is a null key; 1.5, inf and 1e300 are outside the domain.
    df = pd.DataFrame(
        {
            "state": [0.0, 1.0, np.nan, 1.5, 3.0, np.inf, -np.inf, 1e300, 9.0, 2.0, np.nan],
            "sex": ["f", "m", "f", "m", "m", "f", "f", "m", "f", None, "m"],
            "income": [5.0, 7.0, 1.0, 1.0, 50.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        }
    )
    (true,), (diagnostics,) = engine.aggregate(df, [make_spec("sum")])
    assert diagnostics.rows_in == 11
    assert diagnostics.rows_null_key == {"state": 2, "sex": 1}
    assert diagnostics.rows_out_of_domain == {"state": 5, "sex": 0}
    assert diagnostics.rows_used == 3
    expected = np.zeros(8, dtype=np.int64)
    expected[[0 * 2 + 0, 1 * 2 + 1, 3 * 2 + 1]] = 1
    assert np.array_equal(true["count"], expected)
    assert true["sum"][[0, 3, 7]].tolist() == [5, 7, 50]
    out = engine.release(df, make_spec("sum"))
    assert out["state"].tolist() == [s for s in range(4) for _ in range(2)]
    assert out["state"].dtype == np.int64  # keys from the domain, not the float input


def test_a_float_integer_key_with_only_integers_is_released_like_an_integer_key(engine):
    rng = np.random.default_rng(3)
    integers = pd.DataFrame(
        {"state": rng.integers(0, 4, 200), "sex": rng.choice(["f", "m"], 200).astype(object)}
    )
    floats = integers.assign(state=integers["state"].astype(np.float64))
    spec = make_spec()
    assert released(engine.release(floats, spec)) == released(engine.release(integers, spec))


def test_null_units_are_dropped_and_counted(engine):
    df = pd.DataFrame(
        {
            "state": pd.array([0, 0, 1, 2, None, 3], dtype="Int64"),
            "sex": ["f", "f", "m", "f", "m", "m"],
            "unit": pd.array([4, None, None, 7, None, 9], dtype="Int64"),
        }
    )
    (true,), (diagnostics,) = engine.aggregate(df, [make_spec(privacy_unit="unit")])
    # The null key is counted first; the two other null-unit rows are dropped as such.
    assert diagnostics.rows_null_key == {"state": 1, "sex": 0}
    assert diagnostics.rows_null_unit == 2
    assert diagnostics.rows_used == 3
    expected = np.zeros(8, dtype=np.int64)
    expected[[0 * 2 + 0, 2 * 2 + 0, 3 * 2 + 1]] = 1
    assert np.array_equal(true["count"], expected)


@pytest.mark.parametrize(
    ("df", "statistic", "message"),
    [
        (
            pd.DataFrame({"state": pd.array([0, None], dtype="Int64"), "sex": ["f", "m"]}),
            "count",
            "column 'state': some rows have a null key (on_invalid='error'; the message quotes "
            "no count or value from the data",
        ),
        (
            pd.DataFrame({"state": pd.array([0, 7], dtype="Int64"), "sex": ["f", "m"]}),
            "count",
            "column 'state': some rows have a key outside the declared domain "
            "Domain('state', range(0, 4)) (on_invalid='error'",
        ),
        (
            pd.DataFrame({"state": [0, 1], "sex": ["f", "m"], "income": [1.0, np.nan]}),
            "sum",
            "column 'income': some rows hold null, NaN or infinite values (on_invalid",
        ),
        (
            pd.DataFrame({"state": [0, 1], "sex": ["f", "m"], "income": [np.inf, 1.0]}),
            "sum",
            "column 'income': some rows hold null, NaN or infinite values (on_invalid",
        ),
        (
            pd.DataFrame(
                {"state": [0, 1], "sex": ["f", "m"], "unit": pd.array([3, None], dtype="Int64")}
            ),
            "count",
            "column 'unit': some rows have a null privacy unit (on_invalid",
        ),
    ],
)
def test_on_invalid_error_names_column_and_rule_but_no_data(engine, df, statistic, message):
    unit = dict(privacy_unit="unit") if "unit" in df.columns else {}
    spec = make_spec(statistic, on_invalid="error", **unit)
    with pytest.raises(ValueError) as info:
        engine.aggregate(df, [spec])
    assert message in str(info.value)
    assert not any(figure in str(info.value) for figure in ("1 row", "e.g.", "nan", " 7"))
    with pytest.raises(ValueError) as pandas_info:
        run_pandas(df, spec)
    assert str(info.value) == str(pandas_info.value)  # the same message on every path


def test_sums_are_clamped_and_rounded_to_granularity(engine):
    df = pd.DataFrame({"state": [0] * 5, "sex": ["f"] * 5, "income": [-3.0, 0.26, 0.24, 7.75, 1e9]})
    spec = make_spec("sum", bounds=(0, 10), granularity="1/2")
    (true,), (diagnostics,) = engine.aggregate(df, [spec])
    # units of 1/2: -3 -> 0 (clamped), 0.26 -> 1, 0.24 -> 0, 7.75 -> 16 (half-even), 1e9 -> 20
    assert true["sum"][0] == 0 + 1 + 0 + 16 + 20
    assert true["count"][0] == 5
    assert diagnostics.rows_clamped == 2
    out = engine.release(df, spec)
    assert out["sum"].dtype == np.float64


@pytest.mark.parametrize(("max_cells", "max_per_cell"), [(1, 1), (3, 2), (7, 5)])
def test_contribution_bounds_hold_on_adversarial_data(engine, max_cells, max_per_cell):
    df = adversary()
    domains = {"state": range(25), "sex": ["f", "m"]}
    for statistic in ("count", "sum"):
        spec = make_spec(
            statistic,
            domains=domains,
            privacy_unit="unit",
            max_cells=max_cells,
            max_per_cell=max_per_cell,
            bounds=(0, 100) if statistic == "sum" else None,
            column="income" if statistic == "sum" else None,
        )
        (true,), (diagnostics,) = engine.aggregate(df, [spec])
        counts = true["count"]
        assert (counts > 0).sum() == max_cells
        assert counts.max() <= max_per_cell
        assert diagnostics.rows_used == counts.sum() == max_cells * max_per_cell
        assert diagnostics.unit_cells_removed_max_cells == 50 - max_cells
        assert (
            diagnostics.rows_used
            + diagnostics.rows_removed_max_per_cell
            + diagnostics.rows_removed_max_cells
            == 1000
        )
        if statistic == "sum":
            assert true["sum"].max() <= max_per_cell * 100
            assert diagnostics.rows_clamped > 0


def test_bounded_aggregates_are_exactly_what_the_rule_keeps(engine):
    # Two units: "a" has 3 rows in cell 0 and 1 in cell 1; "b" has 2 rows in cell 2.
    df = pd.DataFrame(
        {
            "unit": ["a", "a", "a", "a", "b", "b"],
            "state": [0, 0, 0, 0, 1, 1],
            "sex": ["f", "f", "f", "m", "f", "f"],
            "income": [10.0, 20.0, 30.0, 40.0, 5.0, 7.0],
        }
    )
    spec = make_spec("sum", privacy_unit="unit", max_cells=2, max_per_cell=2)
    (true,), (diagnostics,) = engine.aggregate(df, [spec])
    # Both units are within max_cells; "a" keeps 2 of its 3 rows of cell 0.
    assert true["count"].tolist() == [2, 1, 2, 0, 0, 0, 0, 0]
    assert diagnostics.rows_removed_max_per_cell == 1
    assert diagnostics.rows_removed_max_cells == 0
    kept = true["sum"][0]
    assert kept in (10 + 20, 10 + 30, 20 + 30)
    assert true["sum"].tolist()[1:3] == [40, 12]
    assert true["sum"][3:].tolist() == [0] * 5


def test_bounding_choice_depends_only_on_the_units_own_rows_and_the_key(engine):
    mallory = adversary(200, 20)
    others = frame(300, seed=5)[["unit", "state", "sex", "income"]]
    others = others.assign(unit=others["unit"].astype(str))
    spec = make_spec(
        domains={"state": range(10), "sex": ["f", "m"]}, privacy_unit="unit", max_cells=2
    )
    (alone,), _ = engine.aggregate(mallory, [spec])
    mixed = pd.concat([others, mallory]).sample(frac=1, random_state=2)
    (with_others,), _ = engine.aggregate(mixed, [spec])
    (others_only,), _ = engine.aggregate(others, [spec])
    assert np.array_equal(with_others["count"] - others_only["count"], alone["count"])
    other_key = make_spec(
        domains=spec_domains(spec),
        privacy_unit="unit",
        max_cells=2,
        key=MasterKey.from_hex("44" * 32),
    )
    (moved,), _ = engine.aggregate(mallory, [other_key])
    # A different key chooses different cells (2 of 20: equal with probability ~1/190).
    assert not np.array_equal(np.flatnonzero(alone["count"]), np.flatnonzero(moved["count"]))


@pytest.mark.parametrize(("max_cells", "max_per_cell"), [(1, 3), (3, 2)])
def test_one_units_rows_move_the_aggregates_within_the_declared_sensitivity(
    engine, max_cells, max_per_cell
):
    """Adding one unit's rows changes the true vectors by at most the spec's sensitivity,
    coordinate by coordinate (largest change against largest sensitivity), and the
    heaviest unit reaches it."""
    domains = {"state": range(10), "sex": ["f", "m"]}
    others = frame(300, seed=6)[["unit", "state", "sex", "income"]]
    others = others.assign(unit=others["unit"].astype(str))
    mallory = adversary(400, 20, seed=3).assign(income=1000.0)  # every value clamps to U
    specs = [
        make_spec(
            statistic,
            table=statistic,
            domains=domains,
            privacy_unit="unit",
            max_cells=max_cells,
            max_per_cell=max_per_cell,
        )
        for statistic in ("count", "sum")
    ]
    without, _ = engine.aggregate(others, specs)
    with_mallory, _ = engine.aggregate(pd.concat([others, mallory]), specs)
    for vector, sensitivity in (
        ("count", specs[0].count_sensitivity()),
        ("sum", specs[1].sum_sensitivity()),
    ):
        index = 0 if vector == "count" else 1
        change = np.abs(with_mallory[index][vector] - without[index][vector])
        change = np.sort(change)[::-1]
        bound = np.zeros(change.size, dtype=np.int64)
        bound[: len(sensitivity)] = sensitivity
        assert (change <= bound).all(), (vector, change[:5], sensitivity)
        assert np.array_equal(change, bound), (vector, change[:5], sensitivity)  # reached


def test_mean_is_noisy_sum_over_noisy_count_clipped(engine):
    df = frame()
    out = engine.release(df, make_spec("mean", bounds=(0, 100)))
    expected = np.clip(out["sum"] / np.maximum(out["count"], 1), 0, 100)
    assert np.array_equal(out["mean"].to_numpy(), expected.to_numpy())


def shared_frame(n=600, seed=7):
    """Units with many rows each over state x sex x tenure; some tenures null."""
    rng = np.random.default_rng(seed)
    tenure = rng.choice(["owned", "rented"], n).astype(object)
    tenure[rng.random(n) < 0.1] = None
    return pd.DataFrame(
        {
            "unit": rng.integers(0, 60, n),
            "state": pd.array(rng.integers(0, 4, n), dtype="Int64"),
            "sex": rng.choice(["f", "m"], n).astype(object),
            "tenure": tenure,
            # Values tied within a unit's rows too, so the tie order is exercised.
            "income": rng.choice([0, 7, 50, 120, -3], n),
        }
    )


SHARED_DOMAINS = {"state": range(0, 4), "sex": ["f", "m"], "tenure": ["owned", "rented"]}


def shared_specs(shared: bool):
    from dp_pipeline.query.domain import build_cell_domain
    from dp_pipeline.query.spec import SharedRows

    union = build_cell_domain(["state", "sex", "tenure"], SHARED_DOMAINS)
    rows = SharedRows(cells=union, group="postprocess") if shared else None
    return [
        make_spec(
            by=keys,
            domains={k: SHARED_DOMAINS[k] for k in keys},
            privacy_unit="unit",
            shared_rows=rows,
            table=t,
        )
        for t, keys in (
            ("state_sex", ["state", "sex"]),
            ("state_tenure", ["state", "tenure"]),
            ("sex", ["sex"]),
        )
    ]


def margins(trues):
    state_sex, state_tenure, sex = (t["count"] for t in trues)
    return state_sex.reshape(4, 2), state_tenure.reshape(4, 2), sex


def test_shared_rows_tables_keep_the_same_row_of_each_unit_so_margins_agree(engine):
    df = shared_frame()
    state_sex, state_tenure, sex = margins(engine.aggregate(df, shared_specs(True))[0])
    # Every unit keeps one row, the same in each table (its tenure defined: 60 units
    # with ~9 rows each all have one), so every shared margin agrees exactly.
    assert state_sex.sum() == state_tenure.sum() == sex.sum() == df["unit"].nunique()
    assert np.array_equal(state_sex.sum(axis=1), state_tenure.sum(axis=1))
    assert np.array_equal(state_sex.sum(axis=0), sex)
    # Each table's own rule ranks rows with its own salt and cells: the margins differ.
    state_sex, state_tenure, sex = margins(engine.aggregate(df, shared_specs(False))[0])
    assert not np.array_equal(state_sex.sum(axis=1), state_tenure.sum(axis=1))


def test_shared_rows_give_every_path_the_same_aggregates_and_diagnostics(engine):
    df = shared_frame(seed=8)
    reference, reference_diagnostics = pandas_engine().aggregate(df, shared_specs(True))
    trues, diagnostics = engine.aggregate(df, shared_specs(True))
    for mine, theirs in zip(trues, reference, strict=True):
        assert np.array_equal(mine["count"], theirs["count"])
    for mine, theirs in zip(diagnostics, reference_diagnostics, strict=True):
        assert mine.rows_used == theirs.rows_used
        assert mine.rows_removed_max_per_cell == theirs.rows_removed_max_per_cell
        assert mine.rows_removed_max_cells == theirs.rows_removed_max_cells
        assert mine.unit_cells_removed_max_cells == theirs.unit_cells_removed_max_cells
        assert mine.rows_null_key == theirs.rows_null_key
    # A unit whose only rows have a null tenure keeps a row of state_sex all the same.
    # Unit 99's rows have no union cell for different reasons (null, out of domain):
    # they rank alike on every path, so each path keeps the same one of them.
    lonely = pd.DataFrame(
        {
            "unit": [99, 99, 99, 100],
            "state": pd.array([1, 2, 3, 3], dtype="Int64"),
            "sex": ["f", "m", "f", "f"],
            "tenure": [None, "leased", None, "owned"],
        }
    )
    lonely = lonely.astype({"sex": object, "tenure": object})
    (state_sex, state_tenure, _), _ = engine.aggregate(lonely, shared_specs(True))
    (expected, _, _), _ = pandas_engine().aggregate(lonely, shared_specs(True))
    assert state_sex["count"].sum() == 2 and state_tenure["count"].sum() == 1
    assert np.array_equal(state_sex["count"], expected["count"])


def shared_sum_specs():
    """Sums of one clamped column by state × sex and by state, sharing rows with a count."""
    from dp_pipeline.query.domain import build_cell_domain
    from dp_pipeline.query.spec import SharedRows

    union = build_cell_domain(["state", "sex", "tenure"], SHARED_DOMAINS)
    rows = SharedRows(cells=union, group="postprocess")
    common = dict(privacy_unit="unit", shared_rows=rows)
    return [
        make_spec("sum", by=["state", "sex"], domains=DOMAINS, table="ss_income", **common),
        make_spec(
            "sum", by=["state"], domains={"state": DOMAINS["state"]}, table="s_income", **common
        ),
        make_spec(
            by=["state", "tenure"],
            domains={k: SHARED_DOMAINS[k] for k in ("state", "tenure")},
            table="st",
            **common,
        ),
    ]


def test_shared_rows_sums_keep_the_same_row_so_sum_margins_agree(engine):
    df = shared_frame(seed=10)
    (by_sex, by_state, tenure), diagnostics = engine.aggregate(df, shared_sum_specs())
    # Each unit's one kept row: its clamped value is summed by every sum of the group.
    assert np.array_equal(by_sex["sum"].reshape(4, 2).sum(axis=1), by_state["sum"])
    assert np.array_equal(by_sex["count"].reshape(4, 2).sum(axis=1), by_state["count"])
    assert np.array_equal(by_state["count"], tenure["count"].reshape(4, 2).sum(axis=1))
    assert by_state["count"].sum() == df["unit"].nunique()
    reference, reference_diagnostics = pandas_engine().aggregate(df, shared_sum_specs())
    for mine, theirs in zip((by_sex, by_state, tenure), reference, strict=True):
        assert np.array_equal(mine["count"], theirs["count"])
        if "sum" in theirs:
            assert np.array_equal(mine["sum"], theirs["sum"])
    for mine, theirs in zip(diagnostics, reference_diagnostics, strict=True):
        assert mine.rows_used == theirs.rows_used
        assert mine.rows_clamped == theirs.rows_clamped
    # The kept row is one of the unit's rows, clamped: totals within the bounds.
    assert 0 <= by_state["sum"].sum() <= 100 * df["unit"].nunique()


def test_tables_outside_a_shared_group_are_bounded_as_before(engine):
    df = shared_frame(seed=9)
    alone = make_spec(by=["state", "sex"], domains=DOMAINS, privacy_unit="unit", max_cells=2)
    (before,), _ = engine.aggregate(df, [alone])
    (after, *_), _ = engine.aggregate(df, [alone, *shared_specs(True)])
    assert np.array_equal(before["count"], after["count"])
    # The query digest (a noise stream label) only changes for tables that share rows.
    plain, shared = shared_specs(False)[0], shared_specs(True)[0]
    assert "shared_rows" not in plain.canonical() and plain.digest != shared.digest


def hierarchy_rule():
    """Counties 0..7, two per state (0..3): county c lies in state c // 2."""
    from dp_pipeline.query.domain import Domain
    from dp_pipeline.query.hierarchy import HierarchyRule

    return HierarchyRule.build(
        Domain.integer_range("county", 0, 8),
        [Domain.integer_range("state", 0, 4)],
        [np.arange(8) // 2],
    )


GEO_DOMAINS = {"county": range(0, 8), "state": range(0, 4), "sex": ["f", "m"]}


def geo_specs(rule, **common):
    """county × sex, state × sex and sex (national): one consistent set."""
    return [
        make_spec(
            by=keys,
            domains={k: GEO_DOMAINS[k] for k in keys},
            hierarchy=rule,
            table=name,
            **common,
        )
        for name, keys in (
            ("county_sex", ["county", "sex"]),
            ("state_sex", ["state", "sex"]),
            ("sex", ["sex"]),
        )
    ]


def geo_margins(trues):
    county_sex, state_sex, sex = (t["count"] for t in trues)
    by_state = county_sex.reshape(4, 2, 2).sum(axis=1)  # counties 2s, 2s+1 -> state s
    return by_state, state_sex.reshape(4, 2), sex


def test_rows_that_break_the_hierarchy_are_dropped_by_every_table_alike(engine):
    df = pd.DataFrame(
        {
            # ok, ok, wrong state, null county, null state, county outside, ok, state outside
            "county": pd.array([0, 3, 5, None, 7, 9, 6, 2], dtype="Int64"),
            "state": pd.array([0, 1, 1, 2, None, 3, 3, 8], dtype="Int64"),
            "sex": ["f", "m", "f", "m", "f", "m", "m", "f"],
        }
    )
    trues, diagnostics = engine.aggregate(df, geo_specs(hierarchy_rule()))
    by_state, state_sex, sex = geo_margins(trues)
    # Rows 0, 1 and 6 only: every table counts the same three persons.
    expected = np.zeros((4, 2), dtype=np.int64)
    expected[0, 0] = expected[1, 1] = expected[3, 1] = 1
    assert np.array_equal(state_sex, expected) and np.array_equal(by_state, expected)
    assert sex.tolist() == [1, 2]
    county, state, national = diagnostics
    # A row is counted once, under the first rule it breaks: its own keys first.
    assert county.rows_null_key == {"county": 1, "sex": 0}
    assert county.rows_out_of_domain == {"county": 1, "sex": 0}
    assert county.rows_hierarchy_mismatch == 3  # wrong, null and outside state
    assert state.rows_null_key == {"state": 1, "sex": 0}
    assert state.rows_out_of_domain == {"state": 1, "sex": 0}
    assert state.rows_hierarchy_mismatch == 3  # wrong state, null and outside county
    assert national.rows_hierarchy_mismatch == 5
    for diagnostic in diagnostics:
        assert diagnostic.rows_used == 3 and diagnostic.rows_dropped == 5
        assert diagnostic.rows_in == 8
    # The noise is the same as for any table: its release is every cell, bit for bit.
    out = engine.release(df, geo_specs(hierarchy_rule())[1])
    reference, _ = run_pandas(df, geo_specs(hierarchy_rule())[1])
    assert released(out) == released(reference)


def test_hierarchy_rows_with_float_keys_and_a_string_coarser_level(engine):
    """A float county column (NaN null) and a state named by strings (an explicit list)."""
    from dp_pipeline.query.domain import Domain
    from dp_pipeline.query.hierarchy import HierarchyRule

    names = ["al", "ak", "az", "ar"]
    rule = HierarchyRule.build(
        Domain.integer_range("county", 0, 8), [Domain("state", names)], [np.arange(8) // 2]
    )
    df = pd.DataFrame(
        {
            "county": [0.0, 3.0, 5.0, np.nan, 7.0, 1.5, 6.0, 4.0],
            "state": ["al", "ak", "ak", "az", None, "al", "ar", "zz"],
            "sex": ["f", "m", "f", "m", "f", "m", "m", "f"],
        }
    )
    domains = {"county": range(8), "state": names, "sex": ["f", "m"]}
    specs = [
        make_spec(by=keys, domains={k: domains[k] for k in keys}, hierarchy=rule, table=name)
        for name, keys in (("county_sex", ["county", "sex"]), ("state_sex", ["state", "sex"]))
    ]
    (county, state), diagnostics = engine.aggregate(df, specs)
    by_state = county["count"].reshape(4, 2, 2).sum(axis=1)
    assert np.array_equal(by_state, state["count"].reshape(4, 2))
    assert state["count"].sum() == 3  # rows 0, 1 and 6
    assert [d.rows_hierarchy_mismatch for d in diagnostics] == [3, 3]
    reference, reference_diagnostics = pandas_engine().aggregate(df, specs)
    for mine, theirs in zip((county, state), reference, strict=True):
        assert np.array_equal(mine["count"], theirs["count"])
    assert diagnostics == reference_diagnostics


def test_a_row_that_breaks_the_hierarchy_uses_none_of_its_units_contribution(engine):
    """Units with several rows, some breaking the hierarchy: the bounding rule sees only the
    valid rows on every path, so the tables keep the same row of each unit and agree."""
    from dp_pipeline.query.domain import build_cell_domain
    from dp_pipeline.query.spec import SharedRows

    rng = np.random.default_rng(11)
    n = 500
    county = rng.integers(0, 8, n)
    state = county // 2
    wrong = rng.random(n) < 0.3
    state[wrong] = (state[wrong] + rng.integers(1, 4, wrong.sum())) % 4
    df = pd.DataFrame(
        {
            "unit": rng.integers(0, 80, n),
            "county": pd.array(np.where(rng.random(n) < 0.05, -99, county), dtype="Int64"),
            "state": pd.array(state, dtype="Int64"),
            "sex": rng.choice(["f", "m"], n).astype(object),
        }
    )
    df.loc[df["county"] == -99, "county"] = pd.NA
    union = build_cell_domain(["county", "sex", "state"], GEO_DOMAINS)
    rows = SharedRows(cells=union, group="postprocess")
    specs = geo_specs(hierarchy_rule(), privacy_unit="unit", shared_rows=rows)
    trues, diagnostics = engine.aggregate(df, specs)
    by_state, state_sex, sex = geo_margins(trues)
    assert np.array_equal(by_state, state_sex)
    assert np.array_equal(state_sex.sum(axis=0), sex)
    # Every unit with a valid row keeps one: a breaking row never took its place.
    valid = df["county"].notna() & (df["state"] == df["county"] // 2)
    assert sex.sum() == df.loc[valid.fillna(False), "unit"].nunique()
    reference, reference_diagnostics = pandas_engine().aggregate(df, specs)
    for mine, theirs in zip(trues, reference, strict=True):
        assert np.array_equal(mine["count"], theirs["count"])
    for mine, theirs in zip(diagnostics, reference_diagnostics, strict=True):
        assert mine.rows_hierarchy_mismatch == theirs.rows_hierarchy_mismatch > 0
        assert mine.rows_used == theirs.rows_used
        assert mine.rows_removed_max_cells == theirs.rows_removed_max_cells


def test_on_invalid_error_names_the_hierarchy_rule_but_no_data(engine):
    df = pd.DataFrame(
        {
            "county": pd.array([0, 3], dtype="Int64"),
            "state": pd.array([0, 2], dtype="Int64"),
            "sex": ["f", "m"],
        }
    )
    (spec,) = geo_specs(hierarchy_rule(), on_invalid="error")[1:2]
    with pytest.raises(ValueError) as info:
        engine.aggregate(df, [spec])
    message = str(info.value)
    assert message.startswith("column 'county': some rows break the public hierarchy mapping")
    assert not any(figure in message for figure in ("1 row", "e.g.", " 3", " 2"))
    with pytest.raises(ValueError) as pandas_info:
        run_pandas(df, spec)
    assert message == str(pandas_info.value)


def test_a_hierarchy_rule_changes_the_query_digest_only_where_set():
    domains = {"state": range(4), "sex": ["f", "m"]}
    plain = make_spec(domains=domains)
    checked = make_spec(domains=domains, hierarchy=hierarchy_rule())
    assert "hierarchy" not in plain.canonical()
    assert checked.canonical()["hierarchy"]["coarser"] == [
        {"column": "state", "kind": "int", "range": [0, 4]}
    ]
    assert plain.digest != checked.digest
