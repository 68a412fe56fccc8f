"""df.dp: registered by import dp_pipeline; attrs carry mechanism, cost, margins, diagnostics."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.accounting import PrivacyAccountant, margin_of_error

KEY = MasterKey.from_hex("66" * 32)


def test_accessor_attrs_report_cost_margins_and_diagnostics():
    df = pd.DataFrame({"a": [0, 1, 1, 7], "u": [1, 1, 2, 3], "v": [1.0, 2.0, 50.0, 3.0]})
    common = dict(
        by="a",
        domains={"a": range(3)},
        key=KEY,
        release_id="r",
        privacy_unit="u",
        max_cells=2,
        max_per_cell=1,
    )
    counts = df.dp.count(noise=DiscreteGaussian(8), table="c", **common)
    assert counts.columns.tolist() == ["a", "count"] and len(counts) == 3
    info = counts.attrs["dp"]
    assert info.measures[0].sensitivity == (1, 1)
    assert info.rho == Fraction(2, 2 * 8)  # two coordinates of shift 1: ρ = 2·1²/(2σ²)
    expected_epsilon = PrivacyAccountant().add(DiscreteGaussian(8), sensitivity=[1, 1])
    assert info.epsilon == expected_epsilon.epsilon(Fraction(1, 10**6)).upper
    assert info.measures[0].margin_of_error == margin_of_error(
        DiscreteGaussian(8), Fraction(95, 100)
    )
    assert info.diagnostics.rows_out_of_domain == {"a": 1}
    means = df.dp.mean(
        "v", bounds=(0, 10), granularity="1/2", noise=DiscreteGaussian(8), table="m", **common
    )
    assert means.columns.tolist() == ["a", "sum", "count", "mean"]
    split = means.attrs["dp"].budget_split
    assert sum(split.values()) == 1
    assert means.attrs["dp"].measures[0].margin_of_error == Fraction(
        margin_of_error(DiscreteGaussian(8), Fraction(95, 100)), 2
    )
