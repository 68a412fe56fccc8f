"""Consistent tables on a skewed geography: never worse than the raw counts, margins that cover.

The geography (tests/postprocess_cases.skewed_geography) has empty states,
single-county states, about half of its counties under 20 persons and one county
holding 40% of its state; the tables are the demo's shape plus a near-exact county x
sex table (σ² = 1/4) and a very noisy state x sex table (σ² = 2000). Per table and
class of true count with at least 300 cells (pooled over a few noise draws), the
published ``value`` must have an RMSE at most 1.05x the raw counts', a margin of error
covering at least 90% of the cells, and a mean error within 0.2 raw standard
deviations. The margin is the release's (`value_margin` on the least squares margin
`least_squares_margin` from the exact per-cell variance). Noise: exact discrete
Gaussian draws (test data from numpy's generator).
"""

from __future__ import annotations

import numpy as np
import pytest

from dp_pipeline.accounting.accuracy import margin_of_error
from dp_pipeline.accounting.noise_variance import noise_variance
from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.postprocess import NoisyCounts, TableShape, make_consistent
from dp_pipeline.postprocess.ls_variance import least_squares_variances
from dp_pipeline.postprocess.margins import least_squares_margin
from dp_pipeline.release.tables.consistency import NORMAL_95, value_margin
from tests.support.postprocess_cases import (
    SKEWED_AGES,
    SKEWED_TABLES,
    discrete_gaussian_sample,
    skewed_geography,
    skewed_truth,
)

CLASSES = {"1-20": (1, 20), "21-100": (21, 100), "over 100": (101, None)}
DRAWS = 3
MIN_CELLS = 300


@pytest.fixture(scope="module")
def errors():
    """Per (table, class): raw errors, value errors, value within its margin; noise sd."""
    hierarchy, cells = skewed_geography()
    truth = skewed_truth(hierarchy, cells)
    sizes = {"county": hierarchy.sizes[1], "state": hierarchy.sizes[0]}
    sizes |= {"age": SKEWED_AGES, "sex": 2}
    dims = {n: tuple(sizes[k] for k in keys) for n, (keys, _) in SKEWED_TABLES.items()}
    mechanisms = {n: DiscreteGaussian(s) for n, (_, s) in SKEWED_TABLES.items()}
    variances = {n: noise_variance(m) for n, m in mechanisms.items()}
    shapes = [TableShape(n, SKEWED_TABLES[n][0], dims[n]) for n in SKEWED_TABLES]
    ls_variances = least_squares_variances(shapes, hierarchy, list(variances.values()))
    ls_margins = {
        n: least_squares_margin(ls_variances[n], variances[n], margin_of_error(m), NORMAL_95)
        for n, m in mechanisms.items()
    }
    rng = np.random.default_rng(11)  # test data only
    out: dict = {}
    for _ in range(DRAWS):
        noisy = [
            NoisyCounts(
                n,
                SKEWED_TABLES[n][0],
                dims[n],
                truth[n] + discrete_gaussian_sample(rng, SKEWED_TABLES[n][1], truth[n].size),
                variances[n],
            )
            for n in SKEWED_TABLES
        ]
        solved = make_consistent(noisy, hierarchy, nonnegative=True, integer=True)
        for table in noisy:
            n, t = table.name, truth[table.name]
            value = solved.values[n]
            margin = value_margin(ls_margins[n], value, solved.least_squares[n], True, True)
            for label, (low, high) in CLASSES.items():
                pick = (t >= low) & (t <= (high if high is not None else t.max()))
                got = out.setdefault((n, label), ([], [], []))
                got[0].append(table.values[pick] - t[pick])
                got[1].append(value[pick] - t[pick])
                got[2].append(np.abs(value[pick] - t[pick]) <= margin)
    return {
        key: (*(np.concatenate(parts) for parts in got), float(variances[key[0]]) ** 0.5)
        for key, got in out.items()
    }


def _checked(errors) -> list[tuple[str, str]]:
    """The (table, class) pairs with at least `MIN_CELLS` cells: those a claim is made for."""
    return [key for key, got in errors.items() if got[0].size >= MIN_CELLS]


def test_the_geography_is_skewed(errors):
    hierarchy, cells = skewed_geography()
    persons = cells.sum(axis=(1, 2))
    per_state = np.bincount(hierarchy.parents[0], persons, hierarchy.sizes[0])
    counties = np.bincount(hierarchy.parents[0], minlength=hierarchy.sizes[0])
    assert hierarchy.sizes == (40, 1500)
    assert np.count_nonzero(per_state == 0) == 3
    assert np.count_nonzero(counties == 1) >= 3
    assert 0.4 <= np.mean(persons < 20) <= 0.6
    big = np.argmax(per_state)
    share = persons[hierarchy.parents[0] == big].max() / per_state[big]
    assert share == pytest.approx(0.4, abs=0.01)
    # Every class of the near-exact and of the county table has its claims checked.
    checked = _checked(errors)
    assert {("county_sex", c) for c in CLASSES} <= set(checked)
    assert {("county_age_sex", "1-20"), ("county_age_sex", "21-100")} <= set(checked)


def test_value_is_no_worse_than_the_raw_counts(errors):
    worse = []
    for key in _checked(errors):
        raw, value, _, _ = errors[key]
        ratio = np.sqrt(np.mean(value.astype(float) ** 2) / np.mean(raw.astype(float) ** 2))
        if ratio > 1.05:
            worse.append(f"{key}: value RMSE {ratio:.3f}x the raw counts'")
    assert not worse, worse


def test_the_value_margin_covers(errors):
    short = []
    for key in _checked(errors):
        within = errors[key][2]
        if within.mean() < 0.90:
            short.append(f"{key}: value margin covers {within.mean():.1%} of cells")
    assert not short, short


def test_value_is_not_biased(errors):
    biased = []
    for key in _checked(errors):
        _, value, _, sd = errors[key]
        if abs(value.mean()) > 0.2 * sd:
            biased.append(f"{key}: value bias {value.mean():+.3f}, raw sd {sd:.3f}")
    assert not biased, biased


@pytest.mark.spark
def test_the_skewed_geography_on_spark_equals_the_driver_bit_for_bit(spark):
    """One Spark task per state gives the driver's integers and its moves per noisy class."""
    from dp_pipeline.engines.spark.postprocess import consistent_tables
    from dp_pipeline.postprocess.group_solver import group_solver
    from dp_pipeline.postprocess.margins import class_move_counts, moves, size_classes

    hierarchy, cells = skewed_geography(states=12, empty=2, counties=300, seed=4)
    truth = skewed_truth(hierarchy, cells)
    sizes = {"county": 300, "state": 12, "age": SKEWED_AGES, "sex": 2}
    rng = np.random.default_rng(5)  # test data only
    tables = [
        NoisyCounts(
            n,
            keys,
            tuple(sizes[k] for k in keys),
            truth[n] + discrete_gaussian_sample(rng, sigma2, truth[n].size),
            noise_variance(DiscreteGaussian(sigma2)),
        )
        for n, (keys, sigma2) in SKEWED_TABLES.items()
    ]
    driver = make_consistent(tables, hierarchy, nonnegative=True, integer=True)
    solver = group_solver(tables, hierarchy, [t.variance for t in tables])
    moved: list[np.ndarray] = []
    on_spark = dict(consistent_tables(spark, solver, [t.values for t in tables], moved))
    for position, table in enumerate(tables):
        np.testing.assert_array_equal(on_spark[position], driver.values[table.name])
        expected = class_move_counts(
            moves(driver.values[table.name], driver.least_squares[table.name], True),
            size_classes(table.values),
        )
        got = moved[position]
        assert got.shape[0] <= expected.shape[0]
        width = max(got.shape[1], expected.shape[1])
        padded = np.zeros((expected.shape[0], width), np.int64)
        padded[: got.shape[0], : got.shape[1]] = got
        wanted = np.zeros_like(padded)
        wanted[:, : expected.shape[1]] = expected
        np.testing.assert_array_equal(padded, wanted)
