"""The pandas engine: full domain, diagnostics, keyed bounding, clamping, noise contract."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.engines.pandas.aggregate import aggregate_pandas, run_pandas
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.randomness import derive_stream

KEY = MasterKey.from_hex("33" * 32)
DOMAINS = {"state": range(0, 4), "sex": ["f", "m"]}


def make_spec(statistic="count", **overrides):
    params = dict(
        by=["state", "sex"],
        domains=DOMAINS,
        noise=DiscreteGaussian(9),
        key=KEY,
        release_id="rel-1",
        table="persons",
    )
    if statistic != "count":
        params.update(column="income", bounds=(0, 100))
    params.update(overrides)
    return QuerySpec.build(statistic, **params)


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


def test_every_declared_cell_is_released_in_cell_order_zero_counts_included():
    df = pd.DataFrame({"state": pd.array([1, 1, 3], dtype="Int64"), "sex": ["m", "m", "f"]})
    spec = make_spec(domains={"state": range(0, 5), "sex": ["f", "m", "x"]})
    true, _, _ = aggregate_pandas(df, spec)
    expected = np.zeros(15, dtype=np.int64)
    expected[1 * 3 + 1] = 2
    expected[3 * 3 + 0] = 1
    assert np.array_equal(true["count"], expected)
    out, _ = run_pandas(df, spec)
    assert len(out) == 15
    assert out["state"].tolist() == [s for s in range(5) for _ in range(3)]
    assert out["sex"].tolist() == ["f", "m", "x"] * 5


def test_noise_is_the_jth_draw_of_the_partition_stream():
    df = frame()
    spec = make_spec(noise_partitions=3)
    true, _, _ = aggregate_pandas(df, spec)
    out, _ = run_pandas(df, spec)
    noise = out["count"].to_numpy() - true["count"]
    for partition in range(3):
        cells = np.arange(partition, 8, 3)
        stream = derive_stream(KEY, *spec.stream_labels("count", partition))
        assert spec.stream_labels("count", partition)[1:3] == ("rel-1", "persons")
        expected = spec.noise.sample(cells.size, stream)
        assert np.array_equal(noise[cells], np.asarray(expected, dtype=np.int64))


def test_release_is_deterministic_and_keyed_by_release_id():
    df = frame()
    a, _ = run_pandas(df, make_spec())
    b, _ = run_pandas(df.sample(frac=1, random_state=3), make_spec())
    c, _ = run_pandas(df, make_spec(release_id="rel-2"))
    pd.testing.assert_frame_equal(a, b)
    assert not a["count"].equals(c["count"])


def test_diagnostics_count_each_dropped_row_once():
    df = pd.DataFrame(
        {
            "state": pd.array([0, None, 9, 1, None, 2, 3], dtype="Int64"),
            "sex": [None, "f", "m", "q", "m", "f", "m"],
            "income": [1.0, 2.0, 3.0, 4.0, 5.0, np.nan, np.inf],
        }
    )
    _, _, diagnostics = aggregate_pandas(df, make_spec("sum"))
    assert diagnostics.rows_in == 7
    assert diagnostics.rows_null_key == {"state": 2, "sex": 1}
    assert diagnostics.rows_out_of_domain == {"state": 1, "sex": 1}
    assert diagnostics.rows_invalid_value == 2
    assert diagnostics.rows_used == 0
    assert diagnostics.rows_dropped == 7


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
    ],
)
def test_on_invalid_error_names_column_and_rule_but_no_data(df, statistic, message):
    with pytest.raises(ValueError) as info:
        run_pandas(df, make_spec(statistic, on_invalid="error"))
    assert message in str(info.value)
    assert not any(figure in str(info.value) for figure in ("1 row", "e.g.", "nan", " 7"))


@pytest.mark.parametrize(
    ("df", "statistic", "error", "message"),
    [
        (
            pd.DataFrame({"state": [0.0], "sex": ["f"]}),
            "count",
            TypeError,
            "key column 'state' has dtype float64 but its domain holds integers",
        ),
        (
            pd.DataFrame({"state": [0], "sex": [1]}),
            "count",
            TypeError,
            "key column 'sex' has dtype int64 but its domain holds strings",
        ),
        (
            pd.DataFrame({"state": [0], "gender": ["f"]}),
            "count",
            ValueError,
            "key column 'sex' is not in the DataFrame",
        ),
        (
            pd.DataFrame({"state": [0], "sex": ["f"], "income": ["a"]}),
            "sum",
            TypeError,
            "summed column 'income' has dtype",
        ),
        (
            pd.DataFrame({"state": [0], "sex": ["f"]}),
            "sum",
            ValueError,
            "summed column 'income' is not in the DataFrame",
        ),
    ],
)
def test_bad_columns_and_dtypes(df, statistic, error, message):
    with pytest.raises(error) as info:
        run_pandas(df, make_spec(statistic))
    assert message in str(info.value)


def test_empty_dataframe_releases_every_cell_with_noise_only():
    df = pd.DataFrame({"state": pd.array([], dtype="Int64"), "sex": pd.Series([], dtype=object)})
    out, diagnostics = run_pandas(df, make_spec())
    assert len(out) == 8
    assert diagnostics.rows_in == 0 and diagnostics.rows_used == 0


def test_sums_are_clamped_and_rounded_to_granularity():
    df = pd.DataFrame({"state": [0] * 5, "sex": ["f"] * 5, "income": [-3.0, 0.26, 0.24, 7.75, 1e9]})
    spec = make_spec("sum", bounds=(0, 10), granularity="1/2")
    true, _, diagnostics = aggregate_pandas(df, spec)
    # units of 1/2: -3 -> 0 (clamped), 0.26 -> 1, 0.24 -> 0, 7.75 -> 16 (half-even), 1e9 -> 20
    assert true["sum"][0] == 0 + 1 + 0 + 16 + 20
    assert diagnostics.rows_clamped == 2
    out, _ = run_pandas(df, spec)
    assert out["sum"].dtype == np.float64


def adversary(n_rows=1000, n_cells=50, seed=1):
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


@pytest.mark.parametrize(("max_cells", "max_per_cell"), [(1, 1), (3, 2), (7, 5)])
def test_contribution_bounds_hold_on_adversarial_data(max_cells, max_per_cell):
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
        true, _, diagnostics = aggregate_pandas(df, spec)
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


def test_bounding_choice_depends_only_on_the_units_own_rows_and_the_key():
    mallory = adversary(200, 20)
    others = frame(300, seed=5)[["unit", "state", "sex", "income"]]
    spec = make_spec(
        domains={"state": range(10), "sex": ["f", "m"]}, privacy_unit="unit", max_cells=2
    )
    alone, _, _ = aggregate_pandas(mallory, spec)
    mixed = pd.concat([others.assign(unit=others["unit"].astype(str)), mallory]).sample(
        frac=1, random_state=2
    )
    with_others, _, _ = aggregate_pandas(mixed, spec)
    others_only, _, _ = aggregate_pandas(others.assign(unit=others["unit"].astype(str)), spec)
    assert np.array_equal(with_others["count"] - others_only["count"], alone["count"])
    other_key, _, _ = aggregate_pandas(
        mallory,
        make_spec(
            domains=spec_domains(spec),
            privacy_unit="unit",
            max_cells=2,
            key=MasterKey.from_hex("44" * 32),
        ),
    )
    # A different key chooses different cells (2 of 20: equal with probability ~1/190).
    assert not np.array_equal(np.flatnonzero(alone["count"]), np.flatnonzero(other_key["count"]))


def spec_domains(spec):
    return {
        d.column: range(d.start, d.stop) if d.is_range else list(d.values)
        for d in spec.cells.domains
    }


def test_mean_is_noisy_sum_over_noisy_count_clipped():
    df = frame()
    out, _ = run_pandas(df, make_spec("mean", bounds=(0, 100)))
    expected = np.clip(out["sum"] / np.maximum(out["count"], 1), 0, 100)
    assert np.array_equal(out["mean"].to_numpy(), expected.to_numpy())
