"""df.dp.quantile / median / top_k: plumbing to the tested selection core, attrs, bad input."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import DiscreteLaplace, MasterKey
from dp_pipeline.randomness import derive_stream
from dp_pipeline.selection.algorithms import (
    median_of,
    one_shot_top_k,
    peel_top_k,
    quantile_mechanism,
    quantile_of,
    quantile_rank_error_bound,
    top_k_mechanism,
)
from dp_pipeline.selection.query import QuantileQuery, TopKQuery

KEY = MasterKey(bytes(range(7, 39)))
COMMON = dict(key=KEY, release_id="2026-11", table="t", privacy_unit=None)


def people(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    return pd.DataFrame(
        {
            "age": rng.integers(0, 90, n),
            "income": rng.gamma(2.0, 15000.0, n),
            "region": rng.choice(["n", "s", "e", "w"], n, p=[0.4, 0.3, 0.2, 0.1]),
            "person": rng.integers(0, n // 4, n),
        }
    )


def test_median_is_the_core_mechanism_on_the_query_stream_and_reproducible():
    df = people()
    out = df.dp.median("age", bounds=(0, 100), granularity=1, epsilon=1, **COMMON)
    again = df.dp.median("age", bounds=(0, 100), granularity=1, epsilon=1, **COMMON)
    pd.testing.assert_frame_equal(out, again)
    assert out.columns.tolist() == ["quantile", "age"] and out["age"].dtype == np.int64
    query = QuantileQuery.build(
        "median",
        privacy_unit=None,
        column="age",
        q=Fraction(1, 2),
        bounds=(0, 100),
        granularity=1,
        epsilon=1,
        key=KEY,
        release_id="2026-11",
        table="t",
    )
    assert query.labels[:4] == ("2026-11", "t", "selection", "median")
    stream = derive_stream(KEY, *query.labels)
    expected = median_of(df["age"].to_numpy(), (0, 100), 1, quantile_mechanism(1), stream)
    assert out["age"].iloc[0] == expected
    info = out.attrs["dp"]
    assert info.statistic == "median" and info.method == "exponential"
    assert info.epsilon == quantile_mechanism(1).pure_epsilon <= 1
    assert info.margin_of_error == quantile_rank_error_bound(
        quantile_mechanism(1), 101, Fraction(1, 20)
    )
    assert info.diagnostics.rows_used == 400
    # Composes with the release's other tables through the accountant (pure ε).
    assert info.accountant().pure_epsilon() == info.epsilon


def test_quantile_on_a_fractional_grid_drops_invalid_values_and_counts_them():
    df = people()
    df.loc[[3, 5], "income"] = np.nan
    df.loc[7, "income"] = np.inf
    df.loc[9, "income"] = 10**7  # clamped
    out = df.dp.quantile(
        "income", "0.9", bounds=(0, 200000), granularity="1000", epsilon=2, **COMMON
    )
    query = QuantileQuery.build(
        "quantile",
        privacy_unit=None,
        column="income",
        q="0.9",
        bounds=(0, 200000),
        granularity="1000",
        epsilon=2,
        key=KEY,
        release_id="2026-11",
        table="t",
    )
    stream = derive_stream(KEY, *query.labels)
    valid = df["income"].to_numpy()[np.isfinite(df["income"].to_numpy())]
    expected = quantile_of(valid, "0.9", (0, 200000), 1000, 2, stream)
    assert out["income"].iloc[0] == expected and out["quantile"].iloc[0] == 0.9
    diagnostics = out.attrs["dp"].diagnostics
    assert (diagnostics.rows_invalid_value, diagnostics.rows_clamped) == (3, 1)
    assert diagnostics.rows_used == 397
    assert abs(expected - np.quantile(valid, 0.9)) < 15000  # sanity, ε = 2, n = 397


def test_top_k_peeling_is_the_core_peeling_on_bounded_counts():
    df = people(800)
    candidates = ["n", "s", "e", "w", "x"]
    out = df.dp.top_k("region", 3, candidates=candidates, epsilon=3, **COMMON)
    assert out.columns.tolist() == ["rank", "region"] and out["rank"].tolist() == [1, 2, 3]
    counts = df["region"].value_counts().reindex(candidates, fill_value=0).to_numpy()
    # Add/remove neighbours: counts are monotone, so each round is ε/k monotone.
    mechanism = top_k_mechanism(3, 3, monotone=True)
    query = TopKQuery.build(column="region", k=3, candidates=candidates, epsilon=3, **COMMON)
    expected = [candidates[i] for i in peel_top_k(counts, 3, mechanism, query.stream())]
    assert out["region"].tolist() == expected
    info = out.attrs["dp"]
    assert (info.method, info.runs, info.mechanism) == ("peeling", 3, mechanism)
    assert info.epsilon == 3 * mechanism.pure_epsilon <= 3
    assert info.accountant().pure_epsilon() == info.epsilon


def test_top_k_one_shot_is_top_k_of_the_noisy_count_release():
    df = people(800)
    params = dict(
        COMMON,
        candidates=range(90),
        epsilon=Fraction(1, 2),
        privacy_unit="person",
        max_candidates=2,
        max_per_candidate=1,
    )
    out = df.dp.top_k("age", 5, method="one_shot", **params)
    # The same noisy counts as df.dp.count with discrete Laplace at Δ₁/ε = 2/(1/2) = 4.
    counts = df.dp.count(
        by="age",
        domains={"age": range(90)},
        **{**COMMON, "privacy_unit": "person"},
        noise=DiscreteLaplace(4),
        max_cells=2,
        max_per_cell=1,
    )
    chosen = one_shot_top_k(counts["count"].to_numpy(), 5)
    assert out["age"].tolist() == [int(counts["age"].iloc[i]) for i in chosen]
    assert out["count"].tolist() == counts["count"].to_numpy()[chosen].tolist()
    info = out.attrs["dp"]
    assert info.method == "one_shot" and info.mechanism == DiscreteLaplace(4)
    assert info.epsilon == Fraction(1, 2) and info.sensitivity == (1, 1)
    assert info.accountant().pure_epsilon() == Fraction(1, 2)
    assert info.diagnostics.rows_removed_max_cells > 0  # the bound was enforced
    # Replace-one doubles Δ₁: scale 8 for the same ε.
    replace = df.dp.top_k("age", 5, method="one_shot", neighbouring="replace", **params)
    assert replace.attrs["dp"].mechanism == DiscreteLaplace(8)


def test_public_summary_has_no_diagnostics_and_is_json_safe():
    import json

    out = people().dp.median("age", bounds=(0, 100), granularity=1, epsilon=1, **COMMON)
    summary = out.attrs["dp"].public_summary()
    assert "diagnostics" not in summary and summary["base"] == "39/64"
    json.dumps(summary)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda df: df.dp.median("age", bounds=(0, 9), granularity=1, epsilon=0, **COMMON),
            ValueError,
            "epsilon must be > 0",
        ),
        (
            lambda df: df.dp.median("age", bounds=(9, 0), granularity=1, epsilon=1, **COMMON),
            ValueError,
            r"bounds \(9, 0\) are reversed",
        ),
        (
            lambda df: df.dp.quantile(
                "age", 1.5, bounds=(0, 9), granularity=1, epsilon=1, **COMMON
            ),
            ValueError,
            "q must be in",
        ),
        (
            lambda df: df.dp.median("agee", bounds=(0, 9), granularity=1, epsilon=1, **COMMON),
            ValueError,
            "quantile column 'agee' is not in the DataFrame",
        ),
        (
            lambda df: df.dp.median("region", bounds=(0, 9), granularity=1, epsilon=1, **COMMON),
            TypeError,
            r"quantile column 'region' has dtype \w+; it must be numeric",
        ),
        (
            lambda df: df.assign(age=df["age"].astype(float).where(df.index != 4)).dp.median(
                "age", bounds=(0, 99), granularity=1, epsilon=1, on_invalid="error", **COMMON
            ),
            ValueError,
            r"column 'age': some rows hold null, NaN or infinite values \(on_invalid='error'",
        ),
        (
            lambda df: df.dp.median(
                "age", bounds=(0, 9), granularity=1, epsilon=1, **{**COMMON, "release_id": ""}
            ),
            ValueError,
            "release_id must be a non-empty string",
        ),
        (
            lambda df: df.dp.top_k("region", 2, candidates=[], epsilon=1, **COMMON),
            ValueError,
            "candidates for column 'region' is empty",
        ),
        (
            lambda df: df.dp.top_k("region", 5, candidates=["n", "s"], epsilon=1, **COMMON),
            ValueError,
            r"k = 5 is larger than the number of candidates \(2\)",
        ),
        (
            lambda df: df.dp.top_k("region", 1, candidates=["n"], epsilon=-1, **COMMON),
            ValueError,
            "epsilon must be > 0",
        ),
        (
            lambda df: df.dp.top_k(
                "region", 1, candidates=["n"], epsilon=1, method="gumbel", **COMMON
            ),
            ValueError,
            "method must be one of",
        ),
        (
            lambda df: df.dp.top_k(
                "region", 1, candidates=["n"], epsilon=1, on_invalid="error", **COMMON
            ),
            ValueError,
            "column 'region': some rows have a key outside the declared domain",
        ),
    ],
)
def test_bad_input_raises_before_any_draw(call, error, message):
    with pytest.raises(error, match=message):
        call(people(40))


def test_top_k_peeling_cost_composes_by_the_bounded_range_curve():
    # attrs["dp"]'s accountant reads the k rounds as ε/k-bounded-range mechanisms: at
    # δ = 1e-6, 2.888 for three rounds at ε ≈ 1 each, where randomized response at ε/k
    # per round (the pure-ε description, no cheaper zCDP cap here) gave 2.972
    from dp_pipeline.accounting.events import PureDP

    candidates = ["n", "s", "e", "w", "x"]
    out = people(800).dp.top_k("region", 3, candidates=candidates, epsilon=3, **COMMON)
    info = out.attrs["dp"]
    certified = info.accountant().epsilon(1e-6).upper
    as_pure = PureDP(info.mechanism.pure_epsilon)
    before = type(info.accountant())().add(as_pure, count=3).epsilon(1e-6).upper
    assert certified < 0.98 * before < float(info.epsilon)
