"""Per top-level group least squares and top-down: equal to the global solve, same accuracy."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.postprocess import Hierarchy, NoisyCounts, PostprocessError, make_consistent
from dp_pipeline.postprocess.group_solver import group_solver
from dp_pipeline.postprocess.groups import (
    coupling_table,
    group_cells,
    group_hierarchy,
    group_structures,
    solve_group_wls,
)
from dp_pipeline.postprocess.plan import plan
from dp_pipeline.postprocess.structure import validate_shapes
from dp_pipeline.postprocess.topdown import FitOptions, group_level, run_topdown
from dp_pipeline.postprocess.wls import DEFAULT_TOLERANCE, constraint_system, shape_key
from tests.support.postprocess_cases import DEMO_HIERARCHY, demo_truth, global_problem, noisy_demo

PERSONS = 100_000


@pytest.fixture(scope="module")
def truth():
    return demo_truth(PERSONS)


@pytest.fixture(scope="module")
def tables(truth):
    return noisy_demo(truth, seed=11)


def _global(tables, hierarchy):
    """The least squares over all groups at once, then the top-down step (the reference)."""
    p, wls, problem = global_problem(tables, hierarchy)
    run_topdown(problem, FitOptions(), group_level(p))
    return wls, problem


def test_demo_decomposes_by_state():
    assert coupling_table(plan(noisy_demo(demo_truth(1000), 1), DEMO_HIERARCHY), None) == (
        "county_age_sex"
    )
    assert (
        coupling_table(plan(noisy_demo(demo_truth(1000), 1), DEMO_HIERARCHY), DEMO_HIERARCHY)
        is None
    )


def test_per_state_least_squares_equals_the_global_one(tables):
    wls, _ = _global(tables, DEMO_HIERARCHY)
    grouped = make_consistent(tables, DEMO_HIERARCHY, nonnegative=False, integer=False)
    assert grouped.method == "wls"
    assert grouped.groups == 51
    assert grouped.wls_max_residual <= DEFAULT_TOLERANCE
    for table, estimate in zip(tables, wls.estimates, strict=True):
        # Both solutions are within the stopping rule of the same unique optimum.
        np.testing.assert_allclose(grouped.values[table.name], estimate, rtol=0, atol=1e-6)


def test_per_state_accuracy_equals_the_global_one(tables, truth):
    _, reference = _global(tables, DEMO_HIERARCHY)
    grouped = make_consistent(tables, DEMO_HIERARCHY)
    for t, table in enumerate(tables):
        true = truth[table.name][1]
        before = np.sqrt(np.mean((reference.fixed[t] - true) ** 2))
        after = np.sqrt(np.mean((grouped.values[table.name] - true) ** 2))
        assert abs(after - before) <= 0.005 * before, table.name
        # Integers differ only where the two real solutions round differently: a margin
        # one count apart moves the cells fitted to it by at most one, then their rounding.
        moved = np.abs(grouped.values[table.name] - reference.fixed[t])
        assert np.max(moved) <= 2, table.name


def _no_national(rng_seed=5):
    rng = np.random.default_rng(rng_seed)
    hierarchy = Hierarchy(
        ("state", "county", "tract"),
        (3, 7, 15),
        (np.array([0, 0, 1, 1, 2, 2, 2]), np.repeat(np.arange(7), [2, 2, 2, 2, 2, 2, 3])),
    )
    specs = [
        ("tract_age", ("tract", "age"), (15, 4), 3),
        ("county_age_sex", ("age", "county", "sex"), (4, 7, 2), 5),  # geography not first
        ("state_sex", ("sex", "state"), (2, 3), 9),
    ]
    tables = [
        NoisyCounts(n, k, s, rng.integers(-2, 12, int(np.prod(s))), Fraction(v))
        for n, k, s, v in specs
    ]
    return tables, hierarchy


def test_three_levels_by_state_agree_on_every_margin():
    tables, hierarchy = _no_national()
    result = make_consistent(tables, hierarchy)
    assert result.groups == 3
    v = result.values
    tract = v["tract_age"].reshape(15, 4)
    cas = v["county_age_sex"].reshape(4, 7, 2)
    county_age = np.zeros((7, 4), np.int64)
    np.add.at(county_age, hierarchy.parents[1], tract)
    np.testing.assert_array_equal(county_age, cas.sum(axis=2).T)
    state_sex = np.zeros((3, 2), np.int64)
    np.add.at(state_sex, hierarchy.parents[0], cas.sum(axis=0))
    np.testing.assert_array_equal(state_sex.T, v["state_sex"].reshape(2, 3))
    assert all(np.all(x >= 0) for x in v.values())


def test_only_county_tables_take_the_state_totals_from_the_first():
    tables, hierarchy = _no_national()
    result = make_consistent(tables[:2], hierarchy)
    v = result.values
    np.testing.assert_array_equal(v["tract_age"].reshape(15, 4).sum(), v["county_age_sex"].sum())
    _, reference = _global(tables[:2], hierarchy)
    for t, table in enumerate(tables[:2]):
        assert np.sum(np.abs(v[table.name] - reference.fixed[t])) <= 4


def _with_national(tables, hierarchy):
    national = NoisyCounts("sex", ("sex",), (2,), np.array([40, 41]), Fraction(20))
    return [*tables, national]


def test_a_national_table_is_solved_per_group_as_the_global_solve():
    tables, hierarchy = _no_national()
    tables = _with_national(tables, hierarchy)
    p = plan(tables, hierarchy)
    assert coupling_table(p, hierarchy) == "sex"
    _, wls, _ = global_problem(tables, hierarchy)
    grouped = make_consistent(tables, hierarchy, nonnegative=False, integer=False)
    assert grouped.groups == 3
    for table, estimate in zip(tables, wls.estimates, strict=True):
        np.testing.assert_allclose(grouped.values[table.name], estimate, rtol=0, atol=1e-6)
    result = make_consistent(tables, hierarchy)
    _, reference = _global(tables, hierarchy)
    for t, table in enumerate(tables):
        # Near-ties of the rounding may fall the other way: a count moved, no more.
        assert np.max(np.abs(result.values[table.name] - reference.fixed[t])) <= 1
    sex = result.values["sex"]
    np.testing.assert_array_equal(result.values["state_sex"].reshape(2, 3).sum(axis=1), sex)
    np.testing.assert_array_equal(result.values["tract_age"].sum(), sex.sum())


def test_a_national_table_that_couples_the_top_down_step_is_refused_per_group():
    tables, hierarchy = _no_national()
    national = NoisyCounts("age", ("age",), (4,), np.array([9, 8, 7, 6]), Fraction(20))
    refused = (
        r"per-group post-processing: table 'tract_age' \(by tract\) takes the margin "
        r"national x age from the national table 'age', so its top-down step couples every state"
    )
    with pytest.raises(PostprocessError, match=refused):
        group_solver([tables[0], tables[2], national], hierarchy)
    # On the driver it takes the global solve.
    result = make_consistent([tables[0], tables[2], national], hierarchy)
    np.testing.assert_array_equal(
        result.values["tract_age"].reshape(15, 4).sum(0), result.values["age"]
    )
    with pytest.raises(PostprocessError, match=r"no combined table is keyed by a hierarchy level"):
        group_solver([NoisyCounts("age_sex", ("age",), (2,), np.array([1, 2]), Fraction(2))], None)


def test_a_group_missing_a_cell_is_an_error_naming_the_table():
    from dp_pipeline.errors import InternalError

    tables, hierarchy = _no_national()
    solver = group_solver(tables, hierarchy)
    columns = solver.cells([t.values for t in tables])
    mine = columns["top"] == 1
    keep = np.flatnonzero(mine)[1:]  # the group's first cell (of tract_age) is missing
    missing = r"table 'tract_age': group 1 has 15 cells, expected 16"
    with pytest.raises(InternalError, match=missing):
        solver.part(1, columns["table"][keep], columns["cell"][keep], columns["value"][keep])
    # The full group solves, and its part carries the top table and the finer totals.
    rows = np.flatnonzero(mine)
    part = solver.part(1, columns["table"][rows], columns["cell"][rows], columns["value"][rows])
    assert sorted(set(part["table"].tolist())) == [0, 1, 2]
    assert np.all(part["cell"][part["table"] != 2] == -1)


def test_groups_of_equal_shape_share_one_constraint_system_with_the_same_bits(tables):
    """The cached system of a group equals a fresh one entry for entry, and so do the estimates."""
    p = plan(tables, DEMO_HIERARCHY)
    variances = [t.variance for t in tables]
    systems: dict = {}
    shapes = set()
    for g in range(DEMO_HIERARCHY.sizes[0]):
        sub_h, positions = group_hierarchy(DEMO_HIERARCHY, g)
        sub_s = group_structures(p.structures, positions)
        pairs = zip(tables, p.structures, strict=True)
        own = [t.values[group_cells(s, positions)] for t, s in pairs]
        cached = solve_group_wls(p, variances, sub_s, sub_h, own, systems)
        fresh = solve_group_wls(p, variances, sub_s, sub_h, own)
        assert cached.iterations == fresh.iterations
        for a, b in zip(cached.estimates, fresh.estimates, strict=True):
            assert a.tobytes() == b.tobytes()
        key = shape_key(sub_s, sub_h)
        shapes.add(key)
        one = systems[key]
        other = constraint_system(sub_s, variances, p.constraints, sub_h)
        for name in ("CT", "C"):
            x, y = getattr(one, name), getattr(other, name)
            assert x.shape == y.shape
            assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
            assert x.data.tobytes() == y.data.tobytes()
        assert one.inv_diag.tobytes() == other.inv_diag.tobytes()
    assert len(systems) == len(shapes) < DEMO_HIERARCHY.sizes[0]


def test_shape_key_tells_apart_hierarchies_of_equal_sizes():
    a = Hierarchy(("state", "county", "tract"), (1, 2, 4), ([0, 0], [0, 0, 0, 1]))
    b = Hierarchy(("state", "county", "tract"), (1, 2, 4), ([0, 0], [0, 1, 1, 1]))
    table = NoisyCounts("tract_t", ("tract",), (4,), np.zeros(4, np.int64), Fraction(1))
    sa = validate_shapes([table], a)
    sb = validate_shapes([table], b)
    assert shape_key(sa, a) != shape_key(sb, b)
    assert shape_key(sa, a) == shape_key(validate_shapes([table], a), a)


def _national_age_sex(truth, seed=3):
    rng = np.random.default_rng(seed)
    counts = truth["state_age_sex"][1].reshape(51, 232).sum(axis=0)
    noise = np.rint(rng.normal(0.0, 74**0.5, counts.size)).astype(np.int64)
    return NoisyCounts("age_sex", ("age", "sex"), (116, 2), counts + noise, Fraction(74))


def test_demo_with_a_national_table_per_state_equals_the_global_solve(tables, truth):
    with_national = [*tables, _national_age_sex(truth)]
    _, wls, _ = global_problem(with_national, DEMO_HIERARCHY)
    grouped = make_consistent(with_national, DEMO_HIERARCHY, nonnegative=False, integer=False)
    assert grouped.groups == 51 and grouped.wls_max_residual <= DEFAULT_TOLERANCE
    for table, estimate in zip(with_national, wls.estimates, strict=True):
        np.testing.assert_allclose(grouped.values[table.name], estimate, rtol=0, atol=1e-6)
    national = grouped.values["age_sex"]
    states = grouped.values["state_age_sex"].reshape(51, 232).sum(axis=0)
    np.testing.assert_allclose(states, national, rtol=0, atol=1e-6)
    # Integers: the states sum exactly to the national table, accuracy as the global solve's.
    result = make_consistent(with_national, DEMO_HIERARCHY)
    _, reference = _global(with_national, DEMO_HIERARCHY)
    np.testing.assert_array_equal(
        result.values["state_age_sex"].reshape(51, 232).sum(axis=0), result.values["age_sex"]
    )
    true = {**{name: counts for name, (_, counts) in truth.items()}}
    true["age_sex"] = truth["state_age_sex"][1].reshape(51, 232).sum(axis=0)
    for t, table in enumerate(with_national):
        before = np.sqrt(np.mean((reference.fixed[t] - true[table.name]) ** 2))
        after = np.sqrt(np.mean((result.values[table.name] - true[table.name]) ** 2))
        assert after <= before * 1.01, table.name  # rounding near-ties, either way
        assert np.max(np.abs(result.values[table.name] - reference.fixed[t])) <= 1


def test_a_singular_block_with_a_national_table_equals_the_global_solve():
    """Three state tables agreeing pairwise imply their state totals twice: A V A^T is singular."""
    rng = np.random.default_rng(8)
    hierarchy = Hierarchy(("state", "county"), (2, 5), (np.array([0, 0, 1, 1, 1]),))
    specs = [
        ("state_age_sex", ("state", "age", "sex"), (2, 3, 2), 3),
        ("state_age_race", ("state", "age", "race"), (2, 3, 4), 5),
        ("state_sex_race", ("state", "sex", "race"), (2, 2, 4), 7),
        ("county_age", ("county", "age"), (5, 3), 2),
        ("race", ("race",), (4,), 4),
    ]
    tables = [
        NoisyCounts(n, k, s, rng.integers(0, 30, int(np.prod(s))), Fraction(v))
        for n, k, s, v in specs
    ]
    _, wls, _ = global_problem(tables, hierarchy)
    grouped = make_consistent(tables, hierarchy, nonnegative=False, integer=False)
    for table, estimate in zip(tables, wls.estimates, strict=True):
        np.testing.assert_allclose(grouped.values[table.name], estimate, rtol=0, atol=1e-6)
    result = make_consistent(tables, hierarchy)
    np.testing.assert_array_equal(
        result.values["state_sex_race"].reshape(2, 2, 4).sum(axis=(0, 1)), result.values["race"]
    )


def test_national_margins_too_large_for_the_driver_are_refused_per_group():
    from dp_pipeline.postprocess import TableShape
    from dp_pipeline.postprocess.coupled import MAX_COVARIANCE_ENTRIES

    hierarchy = Hierarchy(("state", "county"), (2, 3), (np.array([0, 0, 1]),))
    shapes = [TableShape("state_a", ("state", "a"), (2, 5000)), TableShape("a", ("a",), (5000,))]
    assert MAX_COVARIANCE_ENTRIES < 3 * 5000**2
    refused = (
        r"per-group post-processing: the national table\(s\) 'a' share 5,000 margin cells with "
        r"the grouped tables; .* \(3 blocks, 75,000,000 entries\) to the driver, above its "
        r"limit of 67,108,864; use national tables with fewer cells"
    )
    with pytest.raises(PostprocessError, match=refused):
        group_solver(shapes, hierarchy)
    small = [TableShape("state_a", ("state", "a"), (2, 100)), TableShape("a", ("a",), (100,))]
    solver = group_solver(small, hierarchy, [Fraction(1), Fraction(1)])
    assert solver.coupling.size == 100 and solver.blocks == 3


def test_a_national_tables_top_down_keeps_the_least_squares_it_started_from():
    # The release's value margin needs the least squares estimates; with a national
    # table they come from the one coupled solve, bit for bit the real solve's, so no
    # second solve is run for them.
    truth = demo_truth(20_000)
    tables = [*noisy_demo(truth, seed=3), _national_age_sex(truth)]
    solved = make_consistent(tables, DEMO_HIERARCHY)
    real = make_consistent(tables, DEMO_HIERARCHY, nonnegative=False, integer=False)
    assert solved.least_squares is not None
    for table in tables:
        np.testing.assert_array_equal(solved.least_squares[table.name], real.values[table.name])
