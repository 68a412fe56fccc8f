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
from tests.postprocess_cases import DEMO_HIERARCHY, demo_truth, global_problem, noisy_demo

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
        # Integers differ only by a count moved where the two real solutions round differently.
        assert np.max(np.abs(grouped.values[table.name] - reference.fixed[t])) <= 1


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


def test_a_national_table_keeps_the_global_solve():
    tables, hierarchy = _no_national()
    national = NoisyCounts("sex", ("sex",), (2,), np.array([40, 41]), Fraction(20))
    p = plan([*tables, national], hierarchy)
    assert coupling_table(p, hierarchy) == "sex"
    result = make_consistent([*tables, national], hierarchy)
    _, reference = _global([*tables, national], hierarchy)
    for t, table in enumerate([*tables, national]):
        np.testing.assert_array_equal(result.values[table.name], reference.fixed[t])


def test_a_national_table_is_refused_per_group():
    tables, hierarchy = _no_national()
    national = NoisyCounts("sex", ("sex",), (2,), np.array([40, 41]), Fraction(20))
    with pytest.raises(PostprocessError, match=r"table 'sex' has no hierarchy key.*couples"):
        group_solver([*tables, national], hierarchy)
    with pytest.raises(PostprocessError, match=r"table 'age_sex' has no hierarchy key"):
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
