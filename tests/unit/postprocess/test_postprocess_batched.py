"""Several geography groups solved together give each group bit for bit its own result.

The batched steps (one sort for all groups' simplex projections and largest
remainders, one array for all complete two-way tables' raking; each controlled
rounding its own linear program) must not let one group change another's integers: the
top-down step on Spark solves one group per task with the single-group functions.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise

import numpy as np
import pytest

from dp_pipeline.errors import InternalError
from dp_pipeline.postprocess import Hierarchy, NoisyCounts, make_consistent
from dp_pipeline.postprocess.children import (
    ChildrenProblem,
    fit_children,
    fit_children_many,
    round_children,
    round_children_many,
)
from dp_pipeline.postprocess.rounding import BATCH_CELLS, batches, controlled_round_widened
from dp_pipeline.postprocess.topdown import (
    FitOptions,
    fit_group,
    fit_groups,
    fit_top,
    group_level,
    split_groups,
)
from dp_pipeline.postprocess.two_way import (
    TwoWayTable,
    controlled_round,
    controlled_round_many,
    fit_two_way,
    fit_two_way_many,
)
from tests.support.postprocess_cases import global_problem


def _children_problems(seed: int, count: int) -> list[ChildrenProblem]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        parents = int(rng.integers(1, 6))
        groups = rng.integers(0, parents, int(rng.integers(0, 40)))
        # A parent without children has total 0 (a total can only be split among children).
        targets = rng.integers(0, 30, parents) * (np.bincount(groups, minlength=parents) > 0)
        targets = targets.astype(float)
        out.append(ChildrenProblem(rng.normal(1, 5, groups.size), groups, targets))
    return out


@pytest.mark.parametrize("nonnegative", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_children_of_many_problems_are_each_problems_own(seed, nonnegative):
    problems = _children_problems(seed, 9)
    together = fit_children_many(problems, nonnegative=nonnegative)
    for p, x in zip(problems, together, strict=True):
        alone = fit_children(p.z, p.groups, p.targets, nonnegative=nonnegative)
        assert x.dtype == alone.dtype and np.array_equal(x, alone)
    if not nonnegative:
        return
    to_round = [
        ChildrenProblem(x, p.groups, p.targets.astype(np.int64))
        for p, x in zip(problems, together, strict=True)
    ]
    for p, out in zip(to_round, round_children_many(to_round), strict=True):
        assert np.array_equal(out, round_children(p.z, p.groups, p.targets))
        assert np.array_equal(np.bincount(p.groups, out, p.targets.size), p.targets)


def _two_way(seed: int, rows: int, cols: int, complete: bool = True) -> TwoWayTable:
    rng = np.random.default_rng(seed)
    truth = rng.poisson(rng.choice([0.3, 3.0]), (rows, cols))
    truth[rng.integers(0, rows)] = 0  # a zero row
    z = (truth + rng.normal(0, 2, truth.shape)).ravel()
    row, col = np.divmod(np.arange(rows * cols), cols)
    if not complete:  # drop cells: a scattered table (rows do not meet every column)
        keep = rng.random(z.size) < 0.7
        keep[::cols] = True
        z, row, col = z[keep], row[keep], col[keep]
        R = np.bincount(row, truth.ravel()[keep], rows).astype(np.int64)
        C = np.bincount(col, truth.ravel()[keep], cols).astype(np.int64)
        return TwoWayTable(z, row, col, R, C)
    return TwoWayTable(z, row, col, truth.sum(1), truth.sum(0))


@pytest.mark.parametrize("nonnegative", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_two_way_tables_fitted_and_rounded_together_are_each_tables_own(seed, nonnegative):
    rng = np.random.default_rng(100 + seed)
    # Complete tables of the same width rake in one array (different heights: padding),
    # with single rows and columns and a scattered table beside them.
    shapes = [(int(rng.integers(2, 9)), 6) for _ in range(5)] + [(1, 6), (4, 1), (3, 5)]
    tables = [_two_way(seed * 10 + k, r, c) for k, (r, c) in enumerate(shapes)]
    if nonnegative:  # (the additive fit matches both margins of complete tables only)
        tables.append(_two_way(seed * 10 + 9, 6, 7, complete=False))
    fitted = fit_two_way_many(tables, nonnegative=nonnegative)
    for t, (x, steps) in zip(tables, fitted, strict=True):
        alone_x, alone_steps = fit_two_way(
            t.values, t.row, t.col, t.row_targets, t.col_targets, nonnegative=nonnegative
        )
        assert np.array_equal(x, alone_x) and steps == alone_steps
    real = [
        TwoWayTable(x, t.row, t.col, t.row_targets, t.col_targets)
        for t, (x, _) in zip(tables, fitted, strict=True)
    ]
    rounded = controlled_round_many(real, nonnegative=nonnegative)
    for t, out in zip(real, rounded, strict=True):
        alone = controlled_round(
            t.values, t.row, t.col, t.row_targets, t.col_targets, nonnegative=nonnegative
        )
        assert out.dtype == np.int64 and np.array_equal(out, alone)
        assert np.array_equal(np.bincount(t.row, out, t.row_targets.size), t.row_targets)
        assert np.array_equal(np.bincount(t.col, out, t.col_targets.size), t.col_targets)


def _needs_the_wider_box() -> TwoWayTable:
    # The first cell is within SNAP of 1, so the strict box fixes it at 1; the column
    # targets want it at 0: only the wider box (near-integers may move by one) works.
    x = np.array([0.99999992, 0.00000008])
    return TwoWayTable(x, np.array([0, 0]), np.array([0, 1]), np.array([1]), np.array([0, 1]))


def test_a_table_infeasible_in_the_strict_box_is_rounded_in_the_wider_one():
    t = _needs_the_wider_box()
    out = controlled_round(t.values, t.row, t.col, t.row_targets, t.col_targets, nonnegative=True)
    np.testing.assert_array_equal(out, [0, 1])
    # Beside tables the strict box suits, it gets the same integers, and so do they.
    others = [_two_way(k, 5, 4) for k in range(3)]
    others = [
        TwoWayTable(
            fit_two_way(o.values, o.row, o.col, o.row_targets, o.col_targets, nonnegative=True)[0],
            o.row,
            o.col,
            o.row_targets,
            o.col_targets,
        )
        for o in others
    ]
    together = controlled_round_many([others[0], t, *others[1:]], nonnegative=True)
    np.testing.assert_array_equal(together[1], [0, 1])
    for o, out in zip(others, [together[0], *together[2:]], strict=True):
        alone = controlled_round(
            o.values, o.row, o.col, o.row_targets, o.col_targets, nonnegative=True
        )
        assert np.array_equal(out, alone)


def test_a_table_with_no_rounding_is_refused_beside_good_ones():
    # Row targets add up to 3, column targets to 4: no table of any integers meets both.
    bad = TwoWayTable(
        np.array([0.5, 0.5]), np.array([0, 0]), np.array([0, 1]), np.array([3]), np.array([2, 2])
    )
    good = _two_way(1, 3, 3)
    with pytest.raises(InternalError, match="controlled rounding found no rounding"):
        controlled_round_many([good, bad], nonnegative=True)


def test_a_box_without_a_rounding_is_widened_by_the_fewest_counts():
    # Row target 3 from two cells of 0.5 and 0.5: the floor/ceil box reaches 2 at most,
    # so one cell leaves it by one count (column targets 1 and 2 say which).
    t = TwoWayTable(
        np.array([0.5, 0.5]), np.array([0, 0]), np.array([0, 1]), np.array([3]), np.array([1, 2])
    )
    (rounded,) = controlled_round_widened([t], nonnegative=True)
    np.testing.assert_array_equal(rounded.values, [1, 2])
    assert rounded.widened == 1
    # A table its box suits leaves nothing outside it.
    good = _two_way(1, 3, 3)
    fitted = fit_two_way(
        good.values, good.row, good.col, good.row_targets, good.col_targets, nonnegative=True
    )[0]
    (kept,) = controlled_round_widened(
        [TwoWayTable(fitted, good.row, good.col, good.row_targets, good.col_targets)],
        nonnegative=True,
    )
    assert kept.widened == 0 and np.all(np.abs(kept.values - fitted) < 1)


def test_batches_are_consecutive_and_bounded():
    assert batches([3, 4, 2, 9, 1, 1], limit=8) == [[0, 1], [2], [3], [4, 5]]
    assert batches([20], limit=8) == [[0]]
    assert batches([], limit=8) == []
    assert batches([0, 0, 5], limit=8) == [[0, 1, 2]]
    sizes = np.random.default_rng(0).integers(1, 50, 200).tolist()
    runs = batches(sizes, limit=120)
    assert [k for run in runs for k in run] == list(range(200))
    assert all(sum(sizes[k] for k in run) <= 120 for run in runs)
    # A run ends only where the next size would not fit.
    assert all(sum(sizes[k] for k in a) + sizes[b[0]] > 120 for a, b in pairwise(runs))


def test_a_table_larger_than_a_batch_gets_its_own_integers_beside_small_ones():
    rows = BATCH_CELLS // 400 + 1
    large = _two_way(7, rows, 400)
    tables = [_two_way(1, 5, 400), large, _two_way(2, 3, 400)]
    fitted = fit_two_way_many(tables, nonnegative=True)
    assert np.array_equal(
        fitted[1][0],
        fit_two_way(*(large.values, large.row, large.col), *_targets(large), nonnegative=True)[0],
    )
    real = [
        TwoWayTable(x, t.row, t.col, t.row_targets, t.col_targets)
        for t, (x, _) in zip(tables, fitted, strict=True)
    ]
    for t, out in zip(real, controlled_round_many(real, nonnegative=True), strict=True):
        alone = controlled_round(t.values, t.row, t.col, *_targets(t), nonnegative=True)
        assert np.array_equal(out, alone)


def _targets(t: TwoWayTable):
    return t.row_targets, t.col_targets


def _census_like(seed: int, states: int = 6):
    """Counties of unequal numbers per state; the demo's five kinds of table."""
    rng = np.random.default_rng(seed)
    per_state = rng.integers(1, 9, states)
    parent = rng.permutation(np.repeat(np.arange(states), per_state))
    counties = parent.size
    hierarchy = Hierarchy(("state", "county"), (states, counties), (parent,))
    specs = [
        ("county_age_sex", ("county", "age", "sex"), (counties, 5, 2), 4),
        ("state_age_sex", ("state", "age", "sex"), (states, 5, 2), 16),
        ("state_race", ("state", "race"), (states, 3), 16),
        ("county_size", ("county", "size"), (counties, 4), 16),
        ("state_tenure", ("state", "tenure"), (states, 3), 32),
    ]
    tables = []
    for name, keys, sizes, variance in specs:
        truth = rng.poisson(2.0, int(np.prod(sizes)))
        noise = np.rint(rng.normal(0, variance**0.5, truth.size)).astype(np.int64)
        tables.append(NoisyCounts(name, keys, sizes, truth + noise, Fraction(variance)))
    return tables, hierarchy


def _top_fixed(tables, hierarchy, options):
    p, _wls, problem = global_problem(tables, hierarchy)
    assert group_level(p) == 0
    fit_top(problem, 0, options)
    return problem


@pytest.mark.parametrize(
    "options", [FitOptions(), FitOptions(nonnegative=False), FitOptions(integer=False)]
)
@pytest.mark.parametrize("seed", range(4))
def test_groups_fitted_together_are_each_groups_own(seed, options):
    tables, hierarchy = _census_like(seed)
    problem = _top_fixed(tables, hierarchy, options)
    together = [sub for sub, _ in split_groups(problem, 0)]
    fit_groups(together, options)
    for g, (sub, _) in enumerate(split_groups(problem, 0)):
        fit_group(sub, options)
        assert sub.fixed.keys() == together[g].fixed.keys()
        for t, values in sub.fixed.items():
            assert values.dtype == together[g].fixed[t].dtype
            assert np.array_equal(values, together[g].fixed[t]), (g, t)
        assert sub.raking_steps == together[g].raking_steps


def test_make_consistent_is_the_groups_solved_one_at_a_time():
    """The driver's batched top-down equals the loop a Spark job runs, group by group."""
    from dp_pipeline.postprocess.group_solver import group_solver

    tables, hierarchy = _census_like(11, states=9)
    result = make_consistent(tables, hierarchy)
    solver = group_solver(tables, hierarchy)
    cells = solver.cells([t.values for t in tables])
    rows = [np.flatnonzero(cells["top"] == g) for g in range(9)]

    def columns(g):
        return g, cells["table"][rows[g]], cells["cell"][rows[g]], cells["value"][rows[g]]

    parts = [solver.part(*columns(g)) for g in range(9)]
    top = solver.top({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
    out = [np.full(t.values.size, -1, dtype=np.int64) for t in tables]
    for g in range(9):  # one group at a time, each with fit_group alone
        fitted = solver.fit(*columns(g), top)
        for t in range(len(tables)):
            mine = fitted["table"] == t
            out[t][fitted["cell"][mine]] = fitted["value"][mine]
    for t, table in enumerate(tables):
        assert np.array_equal(result.values[table.name], out[t]), table.name
    assert result.groups == 9


def test_fit_groups_refuses_problems_of_different_plans():
    tables, hierarchy = _census_like(3)
    problem = _top_fixed(tables, hierarchy, FitOptions())
    (a, _), (b, _) = split_groups(problem, 0)[:2]
    b.order = b.order[::-1]
    with pytest.raises(InternalError, match="different plans"):
        fit_groups([a, b], FitOptions())


def test_estimates_near_integers_are_rounded_to_them():
    # A near-exact table's estimates sit within a few tenths of integers whose margins
    # are the targets; a rounding that only fits the margins may move any of them as long
    # as the margins match (each county's two cells trade a count): the closest
    # rounding keeps every one at its integer.
    rng = np.random.default_rng(3)  # test data only
    rows, cols = 60, 8
    truth = rng.integers(0, 30, (rows, cols))
    x = truth + rng.uniform(-0.2, 0.2, truth.shape)
    row, col = np.divmod(np.arange(rows * cols), cols)
    t = TwoWayTable(x.reshape(-1), row, col, truth.sum(axis=1), truth.sum(axis=0))
    for nonnegative in (True, False):
        out = controlled_round(
            t.values, t.row, t.col, t.row_targets, t.col_targets, nonnegative=nonnegative
        )
        np.testing.assert_array_equal(out, truth.reshape(-1))
    # Where the nearest integers do not match the margins, the strict box still rounds.
    more = np.eye(rows, dtype=np.int64)[0], np.eye(cols, dtype=np.int64)[0]
    shifted = TwoWayTable(t.values, row, col, t.row_targets + more[0], t.col_targets + more[1])
    out = controlled_round_many([shifted], nonnegative=True)[0]
    assert np.array_equal(np.bincount(row, out, rows), shifted.row_targets)
    assert np.array_equal(np.bincount(col, out, cols), shifted.col_targets)
    assert np.abs(out - x.reshape(-1)).max() < 1
