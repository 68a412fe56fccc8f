"""Declarative aggregation rules: domains, cell indexes, the cell limit, bounds, sensitivity."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.query.bounds import ValueBounds
from dp_pipeline.query.domain import Domain, build_cell_domain
from dp_pipeline.query.spec import QuerySpec

KEY = MasterKey.from_hex("22" * 32)


def spec(statistic="count", **overrides):
    params = dict(
        by=["a", "b"],
        domains={"a": range(3), "b": ["x", "y"]},
        noise=DiscreteGaussian(4),
        key=KEY,
        release_id="r",
        table="t",
        privacy_unit=None,
    )
    if statistic != "count":
        params.update(column="v", bounds=(0, 10))
    params.update(overrides)
    return QuerySpec.build(statistic, **params)


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        ([1, 2, 2], ValueError, "column 'c' lists 2 more than once"),
        ([], ValueError, "column 'c' is empty"),
        ([[1], [2]], TypeError, "value [1] is not hashable"),
        ([1, "x"], TypeError, "mixes integers and strings"),
        ([1, None], ValueError, "contains the null value None"),
        ([1.5], TypeError, "value 1.5 has type float"),
        ({1, 2}, TypeError, "has no fixed order"),
        (range(0, 10, 2), ValueError, "only step-1 ranges"),
        (range(5, 5), ValueError, "range(5, 5) is empty"),
    ],
)
def test_bad_domains_name_the_column_and_value(values, error, message):
    with pytest.raises(error, match=None) as info:
        Domain.from_spec("c", values)
    assert message in str(info.value)


def test_domain_positions_range_and_list():
    r = Domain.from_spec("a", range(10, 15))
    assert r.size == 5
    assert r.positions(np.array([10, 14, 15, 9])).tolist() == [0, 4, -1, -1]
    lst = Domain.from_spec("b", ["y", "x", "z"])
    assert lst.positions(np.array(["x", "q", "z"], dtype=object)).tolist() == [1, -1, 2]


def test_cell_index_is_mixed_radix_and_decodes_back():
    cells = build_cell_domain(["a", "b", "c"], {"a": range(3), "b": ["x", "y"], "c": [7, 5, 9, 1]})
    assert cells.total == 24
    assert cells.strides == (8, 4, 1)
    index = np.arange(24)
    a, b, c = cells.decode(index)
    assert a.tolist()[:9] == [0] * 8 + [1]
    assert b.tolist()[:5] == ["x", "x", "x", "x", "y"]
    assert c.tolist()[:4] == [7, 5, 9, 1]
    positions = [d.positions(v) for d, v in zip(cells.domains, (a, b, c), strict=True)]
    assert np.array_equal(cells.cell_index(positions), index)


def test_cell_limit_refused_before_any_work():
    with pytest.raises(
        ValueError, match="a:1000 x b:1000 has 1,000,000 cells, above the cell limit 999,999"
    ):
        build_cell_domain(["a", "b"], {"a": range(1000), "b": range(1000)}, cell_limit=999_999)
    assert build_cell_domain(["a"], {"a": range(1000)}, cell_limit=1000).total == 1000


@pytest.mark.parametrize(
    ("by", "domains", "message"),
    [
        (["a", "b"], {"a": range(2)}, "key column 'b' has no declared domain"),
        (["a"], {"a": range(2), "z": [1]}, "domains declares column 'z'"),
        (["a", "a"], {"a": range(2)}, "names column 'a' more than once"),
        ([], {}, "at least one key column"),
    ],
)
def test_bad_by_and_domains(by, domains, message):
    with pytest.raises(ValueError) as info:
        build_cell_domain(by, domains)
    assert message in str(info.value)


def test_value_bounds_grid_and_units():
    bounds = ValueBounds.build((-5, "15/2"), "1/2")
    assert (bounds.lower_units, bounds.upper_units, bounds.max_abs_units) == (-10, 15, 15)
    with pytest.raises(
        ValueError, match=r"bounds upper 7\.25 is not an integer multiple of granularity"
    ):
        ValueBounds.build((0, 7.25), "1/2")
    with pytest.raises(ValueError, match="lower 3 is above upper 1"):
        ValueBounds.build((3, 1), 1)
    with pytest.raises(ValueError, match="granularity must be > 0"):
        ValueBounds.build((0, 1), 0)


def test_sensitivity_vectors():
    # Without a privacy unit every row is a unit: one cell, one row.
    assert spec(max_cells=5, max_per_cell=7).count_sensitivity() == (1,)
    bounded = spec(privacy_unit="u", max_cells=2, max_per_cell=3)
    assert bounded.count_sensitivity() == (3, 3)
    assert (
        spec(
            privacy_unit="u", max_cells=2, max_per_cell=3, neighbouring="replace"
        ).count_sensitivity()
        == (3,) * 4
    )
    # Replacing in one cell can move a sum from m*L to m*U: U - L = 15 > max(|L|, |U|) = 10.
    summed = spec("sum", bounds=(-5, 10), privacy_unit="u", max_cells=2, max_per_cell=3)
    assert summed.sum_sensitivity() == (30, 30)
    replaced = spec(
        "sum",
        bounds=(-5, 10),
        privacy_unit="u",
        max_cells=2,
        max_per_cell=3,
        neighbouring="replace",
    )
    assert replaced.sum_sensitivity() == (45,) * 4
    # Coordinates never exceed the number of cells (6 here).
    assert spec(privacy_unit="u", max_cells=50).count_sensitivity() == (1,) * 6


def test_mean_noises_two_vectors_on_distinct_streams():
    mean = spec("mean", count_noise=DiscreteGaussian(9))
    assert [name for name, _, _ in mean.measures()] == ["sum", "count"]
    assert mean.stream_labels("sum", 3) != mean.stream_labels("count", 3)
    count = spec()
    labels = count.stream_labels("count", 3)
    assert labels == ("query-noise/v2", "r", "t", "", count.digest, "count", "count", 3)


def test_stream_labels_name_what_is_measured():
    # Same (release_id, table): a count and a sum, or two domain orders, never share noise.
    count, total = spec(), spec("sum")
    assert count.stream_labels("count", 0) != total.stream_labels("sum", 0)
    assert count.digest != total.digest
    other = QuerySpec.build(
        "count",
        privacy_unit=None,
        by="g",
        domains={"g": ["b", "a", "c"]},
        noise=DiscreteGaussian(4),
        key=MasterKey(bytes(32)),
        release_id="r",
        table="t",
    )
    assert other.digest != count.digest
    # The digest ignores the key: the copy shipped to Spark tasks labels streams alike.
    assert count.without_key().digest == count.digest
    assert count.without_key().key is None


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        (dict(noise=4), TypeError, "noise must be a DiscreteGaussian or DiscreteLaplace"),
        (dict(key=b"k" * 32), TypeError, "key must be a dp_pipeline MasterKey"),
        (dict(release_id=""), ValueError, "release_id must be a non-empty string"),
        (dict(max_cells=0), ValueError, "max_cells must be >= 1, got 0"),
        (dict(max_per_cell=True), TypeError, "max_per_cell must be a positive integer"),
        (dict(privacy_unit="a"), ValueError, "privacy_unit 'a' cannot also be a key column"),
        (dict(on_invalid="ignore"), ValueError, "on_invalid must be one of"),
        (dict(neighbouring="swap"), ValueError, "neighbouring must be one of"),
    ],
)
def test_bad_query_parameters(overrides, error, message):
    with pytest.raises(error) as info:
        spec(**overrides)
    assert message in str(info.value)


def test_sum_needs_declared_bounds():
    with pytest.raises(ValueError, match="bounds are never taken from the data"):
        spec("sum", bounds=None)
    assert spec("sum").value_bounds.granularity == Fraction(1)
