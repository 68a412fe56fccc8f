"""The exact steps: simplex projection, largest remainder, two-way fit, controlled rounding,
and one top-down group solved on its own."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.postprocess import Hierarchy, NoisyCounts, make_consistent
from dp_pipeline.postprocess.children import fit_children, round_children
from dp_pipeline.postprocess.plan import FixedMargin, OwnMargin, plan
from dp_pipeline.postprocess.structure import Margin, TableShape
from dp_pipeline.postprocess.topdown import (
    FitOptions,
    fit_group,
    fit_top,
    group_level,
    run_topdown,
    split_groups,
)
from dp_pipeline.postprocess.two_way import controlled_round, fit_two_way
from tests.support.postprocess_cases import global_problem


def _projection_by_bisection(z, total):
    """Independent reference: theta with sum max(z - theta, 0) = total, by bisection."""
    lo, hi = z.min() - total - 1, z.max()
    for _ in range(200):
        mid = (lo + hi) / 2
        if np.maximum(z - mid, 0).sum() > total:
            lo = mid
        else:
            hi = mid
    return np.maximum(z - (lo + hi) / 2, 0)


@pytest.mark.parametrize("seed", range(10))
def test_simplex_projection_matches_bisection(seed):
    rng = np.random.default_rng(seed)
    groups = np.sort(rng.integers(0, 6, 60))
    groups = rng.permutation(groups)  # children of one parent need not be adjacent
    targets = rng.integers(0, 40, 6).astype(float)
    targets[0] = 0.0
    z = rng.normal(2, 6, 60)
    x = fit_children(z, groups, targets, nonnegative=True)
    assert x.min() >= 0
    for g in range(6):
        members = groups == g
        if not members.any():
            continue
        want = _projection_by_bisection(z[members], targets[g])
        np.testing.assert_allclose(x[members], want, atol=1e-9)
        assert x[members].sum() == pytest.approx(targets[g], abs=1e-9)


def test_shift_without_nonnegativity_is_equal_per_group():
    z = np.array([1.0, -2.0, 5.0, 0.5])
    x = fit_children(z, np.array([0, 0, 1, 1]), np.array([3.0, 1.0]), nonnegative=False)
    np.testing.assert_allclose(x, [3.0, 0.0, 2.75, -1.75])


def test_largest_remainder_rounding_and_its_ties():
    x = np.array([0.5, 0.5, 0.5, 0.5, 2.25, 1.75])
    groups = np.array([0, 0, 0, 0, 1, 1])
    out = round_children(x, groups, np.array([2, 4]))
    # Ties go to the lower cell index; 1.75 has the larger remainder.
    np.testing.assert_array_equal(out, [1, 1, 0, 0, 2, 2])
    assert out.dtype == np.int64
    np.testing.assert_array_equal(
        round_children(x[::-1], groups[::-1], np.array([2, 4])), [2, 2, 1, 1, 0, 0]
    )


@pytest.mark.parametrize("seed", range(10))
def test_largest_remainder_is_within_one_and_exact(seed):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, 5, 50)
    targets = np.bincount(groups, minlength=5) * 3
    x = fit_children(rng.normal(3, 4, 50), groups, targets.astype(float), nonnegative=True)
    out = round_children(x, groups, targets)
    np.testing.assert_array_equal(np.bincount(groups, out, 5).astype(np.int64), targets)
    assert np.all(np.abs(out - x) < 1) and out.min() >= 0


def _two_way_instance(seed, rows=7, cols=9):
    rng = np.random.default_rng(seed)
    truth = rng.poisson(3, (rows, cols))
    truth[0] = 0  # a zero row
    truth[:, 1] = 0  # a zero column
    z = truth + rng.normal(0, 2, truth.shape)
    row, col = np.divmod(np.arange(rows * cols), cols)
    return z.ravel(), row, col, truth.sum(1), truth.sum(0)


@pytest.mark.parametrize("nonnegative", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_two_way_fit_and_controlled_rounding(seed, nonnegative):
    z, row, col, R, C = _two_way_instance(seed)
    x, _ = fit_two_way(z, row, col, R, C, nonnegative=nonnegative)
    np.testing.assert_allclose(np.bincount(row, x), R, atol=1e-6)
    np.testing.assert_allclose(np.bincount(col, x), C, atol=1e-6)
    if nonnegative:
        assert x.min() >= 0
        assert np.all(x.reshape(7, 9)[0] == 0) and np.all(x.reshape(7, 9)[:, 1] == 0)
    out = controlled_round(x, row, col, R, C, nonnegative=nonnegative)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(row, out).astype(np.int64), R)
    np.testing.assert_array_equal(np.bincount(col, out).astype(np.int64), C)
    assert np.all((out == np.floor(x + 1e-7)) | (out == np.ceil(x - 1e-7)))


def test_controlled_rounding_of_an_integer_table_is_the_table():
    table = np.array([[3, 0, 2], [1, 4, 0]])
    row, col = np.divmod(np.arange(6), 3)
    out = controlled_round(
        table.ravel() + 1e-12, row, col, table.sum(1), table.sum(0), nonnegative=True
    )
    np.testing.assert_array_equal(out, table.ravel())


def _three_level(national="sex", state_sex=True):
    rng = np.random.default_rng(5)
    hierarchy = Hierarchy(
        ("state", "county", "tract"),
        (3, 7, 15),
        (np.array([0, 0, 1, 1, 2, 2, 2]), np.repeat(np.arange(7), [2, 2, 2, 2, 2, 2, 3])),
    )
    specs = [
        ("tract_age", ("tract", "age"), (15, 4)),
        ("county_age_sex", ("age", "county", "sex"), (4, 7, 2)),
        ("state_sex", ("state", "sex"), (3, 2)),
        (national, (national,), ({"sex": 2, "age": 4}[national],)),
    ]
    if not state_sex:
        del specs[2]
    tables = [
        NoisyCounts(n, k, s, rng.integers(-2, 12, int(np.prod(s))), Fraction(v))
        for (n, k, s), v in zip(specs, (3, 5, 9, 20), strict=False)
    ]
    return tables, hierarchy


def test_three_levels_and_a_national_table_are_consistent():
    tables, hierarchy = _three_level()
    result = make_consistent(tables, hierarchy)
    v = result.values
    tract = v["tract_age"].reshape(15, 4)
    cas = v["county_age_sex"].reshape(4, 7, 2)
    county_age = np.zeros((7, 4), np.int64)
    np.add.at(county_age, hierarchy.parents[1], tract)
    np.testing.assert_array_equal(county_age, cas.sum(axis=2).T)
    state_sex = np.zeros((3, 2), np.int64)
    np.add.at(state_sex, hierarchy.parents[0], cas.sum(axis=0))
    np.testing.assert_array_equal(state_sex, v["state_sex"].reshape(3, 2))
    np.testing.assert_array_equal(v["sex"], state_sex.sum(axis=0))
    assert result.groups == 3


def test_a_national_margin_below_the_states_couples_them():
    tables, hierarchy = _three_level(national="age", state_sex=False)
    result = make_consistent(tables, hierarchy)
    v = result.values
    np.testing.assert_array_equal(v["age"], v["tract_age"].reshape(15, 4).sum(axis=0))
    np.testing.assert_array_equal(v["age"], v["county_age_sex"].reshape(4, 14).sum(axis=1))
    # County tables take national x age from the national table: one group.
    assert result.groups == 1


def _groups_problem(tables, hierarchy):
    p, _wls, problem = global_problem(tables, hierarchy)
    level = group_level(p)
    assert level == 0
    fit_top(problem, level, FitOptions())
    return problem


def test_one_group_is_solved_alone_and_ignores_the_others():
    tables, hierarchy = _three_level()
    assert make_consistent(tables, hierarchy).groups == 3
    # The whole problem top-down (the same least squares; make_consistent's per-block
    # least squares differs in the last bits, which can break an exact tie of the
    # largest remainders the other way).
    _, _, whole = global_problem(tables, hierarchy)
    run_topdown(whole, FitOptions(), 0)
    problem = _groups_problem(tables, hierarchy)
    sub, taken = split_groups(problem, 0)[2]
    fit_group(sub, FitOptions())
    tracts = np.flatnonzero(hierarchy.ancestors(2, 0) == 2)
    expected = whole.fixed[0].reshape(15, 4)[tracts]
    np.testing.assert_array_equal(sub.fixed[0].reshape(-1, 4), expected)
    # Changing another state's estimates does not change this group's result.
    problem.estimates[0] = problem.estimates[0].copy()
    problem.estimates[0].reshape(15, 4)[:4] += 50.0
    sub2, _ = split_groups(problem, 0)[2]
    fit_group(sub2, FitOptions())
    for t in sub.fixed:
        np.testing.assert_array_equal(sub.fixed[t], sub2.fixed[t])
    assert taken[0] is not None and taken[2] is None


@pytest.mark.parametrize(
    "nonnegative, integer, method, dtype",
    [
        (False, False, "wls", np.float64),
        (True, False, "wls+topdown-nonnegative-real", np.float64),
        (False, True, "wls+topdown-integer", np.int64),
        (True, True, "wls+topdown-nonnegative-integer", np.int64),
    ],
)
def test_option_combinations(nonnegative, integer, method, dtype):
    tables, hierarchy = _three_level()
    result = make_consistent(tables, hierarchy, nonnegative=nonnegative, integer=integer)
    assert result.method == method
    for t in tables:
        out = result.values[t.name]
        assert out.dtype == dtype and out.shape == t.values.shape
        if nonnegative:
            assert out.min() >= 0
    tract = result.values["tract_age"].reshape(15, 4).sum(axis=0)
    cas = result.values["county_age_sex"].reshape(4, 14).sum(axis=1)
    np.testing.assert_allclose(tract, cas, atol=0 if integer else 1e-6)


def test_inputs_are_not_modified():
    tables, hierarchy = _three_level()
    before = [t.values.copy() for t in tables]
    make_consistent(tables, hierarchy)
    for t, b in zip(tables, before, strict=True):
        np.testing.assert_array_equal(t.values, b)


def test_all_negative_noise_gives_all_zero_tables():
    tables, hierarchy = _three_level()
    negative = [
        NoisyCounts(t.name, t.keys, t.sizes, -np.abs(t.values) - 1, t.variance) for t in tables
    ]
    result = make_consistent(negative, hierarchy)
    for t in negative:
        np.testing.assert_array_equal(result.values[t.name], 0)


def test_scalar_and_keyless_tables():
    total = NoisyCounts("total", (), (), np.array([103]), Fraction(1))
    by_sex = NoisyCounts("sex", ("sex",), (2,), np.array([40, 50]), Fraction(1))
    result = make_consistent([total, by_sex], None)
    # Equal variances per cell: the total's own measurement counts as much as both cells.
    assert result.values["total"].tolist() == [result.values["sex"].sum()]
    assert result.values["total"][0] == 99  # 103 - (103 - 90) / 3 = 98.67, rounded half up


def test_two_blocks_rake_like_each_block_alone():
    """Two independent blocks (scattered path) fit as each block does alone (dense path)."""
    z1, row1, col1, R1, C1 = _two_way_instance(1)
    z2, row2, col2, R2, C2 = _two_way_instance(2, rows=4, cols=5)
    z = np.concatenate([z1, z2])
    row = np.concatenate([row1, row2 + 7])
    col = np.concatenate([col1, col2 + 9])
    R, C = np.concatenate([R1, R2]), np.concatenate([C1, C2])
    both, _ = fit_two_way(z, row, col, R, C, nonnegative=True)
    alone1, _ = fit_two_way(z1, row1, col1, R1, C1, nonnegative=True)
    alone2, _ = fit_two_way(z2, row2, col2, R2, C2, nonnegative=True)
    np.testing.assert_allclose(both, np.concatenate([alone1, alone2]), atol=1e-6)
    out = controlled_round(both, row, col, R, C, nonnegative=True)
    np.testing.assert_array_equal(np.bincount(row, out).astype(np.int64), R)
    np.testing.assert_array_equal(np.bincount(col, out).astype(np.int64), C)


def test_a_margin_shared_with_a_later_table_is_fixed_first_from_the_least_squares():
    hierarchy = Hierarchy(("state", "county"), (2, 5), (np.array([0, 0, 1, 1, 1]),))
    shapes = [
        TableShape("county_age_sex", ("county", "age", "sex"), (5, 3, 2)),
        TableShape("state_age_sex", ("state", "age", "sex"), (2, 3, 2)),
        TableShape("county_sex", ("county", "sex"), (5, 2)),
    ]
    order = {tp.table: tp for tp in plan(shapes, hierarchy).order}
    county_sex, state_sex = Margin(1, ("sex",)), Margin(0, ("sex",))
    # The county table fixes county x sex from its own estimates (against the county
    # totals and state x sex), then its cells against it and state x age x sex.
    own = OwnMargin(county_sex, (FixedMargin(Margin(1, ()), None), FixedMargin(state_sex, 1)))
    assert order[0].own == (own,)
    assert order[0].fixed == (FixedMargin(county_sex, 0), FixedMargin(Margin(0, ("age", "sex")), 1))
    assert order[2].fixed == (FixedMargin(county_sex, 0),) and order[2].own == ()
    # The demo's tables share nothing beyond their totals but whole tables: no own margins.
    demo = [shapes[0], shapes[1], TableShape("county_h", ("county", "household_size"), (5, 7))]
    assert all(tp.own == () for tp in plan(demo, hierarchy).order)
    rng = np.random.default_rng(0)  # test data only
    tables = [
        NoisyCounts(s.name, s.keys, s.sizes, rng.integers(0, 9, int(np.prod(s.sizes))), Fraction(v))
        for s, v in zip(shapes, (18, 74, 1), strict=True)
    ]
    v = make_consistent(tables, hierarchy).values
    sums = v["county_age_sex"].reshape(5, 3, 2).sum(axis=1)
    np.testing.assert_array_equal(v["county_sex"], sums.reshape(-1))
