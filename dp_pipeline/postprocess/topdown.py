"""Top-down non-negative integer tables from consistent real estimates.

Order (after Hay et al. 2010 and the Census Bureau's TopDown algorithm): the
national total; then the totals of each geography level, children of the level
above; then each table's cells, coarsest geography first, constrained to the
margins already fixed (one margin: children of a fixed parent, see
:mod:`.children`; two margins: a two-way table, see :mod:`.two_way`). Each step
is a projection, as in the Census Bureau's per-geography non-negative least
squares: the closest non-negative table (Euclidean; one table has one noise
variance, so this is the inverse-variance metric of the least squares) with the
fixed margins, then integers that keep them (largest remainders, controlled
rounding). A margin a table shares with a later table (not implied by what is
fixed) is fixed first, from the table's own least squares estimates
(:class:`.plan.OwnMargin`): the least squares weighs every table's measurement of it
by its inverse variance, so a near-exact later table keeps its values and the
earlier, noisier table absorbs the rounding. A projection moves every positive
cell that shares a margin by the same amount, not in proportion to its size, so
large cells stay close to the least squares estimate; the price is a positive
bias at true counts near zero (cells cannot go below 0). Every step keeps what
is fixed exactly, so all pairwise margins agree in integers.

Once the national total, the totals of the group level and every table at or
above it are fixed, each position of the group level (a state) is an
independent problem: :func:`fit_group` solves one, so groups can run anywhere
(one Spark task per state) and give the same integers as here.

Pure post-processing of noisy values; deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import InternalError
from .children import ChildrenProblem, fit_children_many, round_children_many
from .plan import FixedMargin, Plan, TablePlan
from .rounding import batches, controlled_round_widened
from .structure import (
    NATIONAL,
    Hierarchy,
    Margin,
    TableStructure,
    margin_index,
    margin_size,
)
from .two_way import TwoWayTable, fit_two_way_many

__all__ = [
    "FitOptions",
    "Problem",
    "add_widened",
    "fit_group",
    "fit_groups",
    "fit_top",
    "group_level",
    "merge_group",
    "run_topdown",
    "split_groups",
]


@dataclass(frozen=True)
class FitOptions:
    nonnegative: bool = True
    integer: bool = True


@dataclass
class Problem:
    """Tables (structures + real estimates), what is already fixed, and the hierarchy."""

    structures: tuple[TableStructure, ...]
    order: tuple[TablePlan, ...]
    hierarchy: Hierarchy | None
    estimates: list[np.ndarray]
    fixed: dict[int, np.ndarray] = field(default_factory=dict)
    geo_totals: dict[int, np.ndarray] = field(default_factory=dict)
    raking_steps: int = 0
    # A table's own margins (TablePlan.own) once fitted, by (table, margin).
    own: dict[tuple[int, Margin], np.ndarray] = field(default_factory=dict)
    # Per table, how many cells its controlled roundings took outside the floor/ceil box
    # (:attr:`.rounding.Rounded.widened`; its own margins' roundings included).
    widened: dict[int, int] = field(default_factory=dict)


def group_level(plan: Plan) -> int:
    """The level whose positions are independent groups (0), or -1 if tables couple them.

    Tables below level 0 must take only margins at level 0 or finer from above.
    """
    if plan.finest_level <= 0:
        return NATIONAL
    for tp in plan.order:
        if plan.structures[tp.table].level > 0 and any(f.margin.level < 0 for f in tp.takes):
            return NATIONAL
    return 0


def _round_half_up(x: float) -> int:
    return int(np.floor(x + 0.5))


def _margin_values(problem: Problem, margin: Margin, source: int | None, table: int) -> np.ndarray:
    """The fixed values of ``margin`` from ``source`` for fitting ``table`` (or its own margin)."""
    if source is None:
        return problem.geo_totals[margin.level]
    if source == table:
        return problem.own[(table, margin)]
    s = problem.structures[source]
    size = margin_size(margin, [s], problem.hierarchy)
    idx = margin_index(s, margin, problem.hierarchy)
    values = problem.fixed[source]
    out = np.bincount(idx, values.astype(np.float64), size)
    if values.dtype.kind == "i":
        return np.rint(out).astype(np.int64)
    return out


def _children_many(asks: Sequence[ChildrenProblem], options: FitOptions) -> list[np.ndarray]:
    xs = fit_children_many(asks, nonnegative=options.nonnegative)
    if not options.integer:
        return xs
    return round_children_many(
        [ChildrenProblem(x, ask.groups, ask.targets) for x, ask in zip(xs, asks, strict=True)]
    )


def _pseudo_table(name: str, margin: Margin, problem: Problem) -> TableStructure:
    """The margin's cells as a table: geography first (if any), then its keys."""
    sizes = {k: s for t in problem.structures for k, s in zip(t.keys, t.sizes, strict=True)}
    keys = list(margin.keys)
    dims = [sizes[k] for k in keys]
    geo_axis = None
    if margin.level != NATIONAL:
        keys.insert(0, problem.hierarchy.levels[margin.level])
        dims.insert(0, problem.hierarchy.sizes[margin.level])
        geo_axis = 0
    return TableStructure(name, tuple(keys), tuple(dims), margin.level, geo_axis)


@dataclass(frozen=True)
class _TwoWay:
    """A two-way table: its cells on its two margins' common refinement (``pseudo``)."""

    table: TableStructure
    pseudo: TableStructure
    to_inner: np.ndarray | None  # None: the two-way table is the table, in the same order
    cells: TwoWayTable  # the estimates, row and column of each cell, the two margins


def _two_way(problem: Problem, s: TableStructure, z: np.ndarray, fixed, table: int) -> _TwoWay:
    h = problem.hierarchy
    a, b = fixed
    inner = Margin(
        max(a.margin.level, b.margin.level), tuple(sorted({*a.margin.keys, *b.margin.keys}))
    )
    pseudo = _pseudo_table(s.name, inner, problem)
    if (pseudo.keys, pseudo.sizes) == (s.keys, s.sizes):
        # Cell i of the table is cell i of the two-way table; adding 0.0 is what the
        # scatter below does to a single value (a negative zero becomes +0.0).
        to_inner, z_inner = None, z + 0.0
    else:
        to_inner = margin_index(s, inner, h)
        z_inner = np.bincount(to_inner, z, pseudo.cells)
    row = margin_index(pseudo, a.margin, h)
    col = margin_index(pseudo, b.margin, h)
    R = _margin_values(problem, a.margin, a.source, table)
    C = _margin_values(problem, b.margin, b.source, table)
    return _TwoWay(s, pseudo, to_inner, TwoWayTable(z_inner, row, col, R, C))


def _fit_tables(problems: Sequence[Problem], tp: TablePlan, options: FitOptions):
    """Table ``tp`` of each problem; the problems' projections and sorts together.

    The table's own margins (:class:`.plan.OwnMargin`) first: each the margin of the
    table's least squares estimates, fitted to what is fixed as a table would be.
    """
    t = tp.table
    for own in tp.own:
        shapes = [_pseudo_table(p.structures[t].name, own.margin, p) for p in problems]
        estimates = [
            np.bincount(
                margin_index(p.structures[t], own.margin, p.hierarchy), p.estimates[t], shape.cells
            )
            for p, shape in zip(problems, shapes, strict=True)
        ]
        fitted = _fit_cells(problems, shapes, estimates, own.fixed, t, options)
        for p, values in zip(problems, fitted, strict=True):
            p.own[(t, own.margin)] = values
    shapes = [p.structures[t] for p in problems]
    return _fit_cells(problems, shapes, [p.estimates[t] for p in problems], tp.fixed, t, options)


def _fit_cells(
    problems: Sequence[Problem],
    shapes: Sequence[TableStructure],
    estimates: Sequence[np.ndarray],
    fixed: tuple[FixedMargin, ...],
    table: int,
    options: FitOptions,
):
    """Cells of shape ``shapes[k]`` and estimates ``estimates[k]`` fitted in problem k to
    the one or two ``fixed`` margins (children, or a two-way table)."""
    if len(fixed) == 1:
        (only,) = fixed
        asks = [
            ChildrenProblem(
                z,
                margin_index(s, only.margin, p.hierarchy),
                _margin_values(p, only.margin, only.source, table),
            )
            for p, s, z in zip(problems, shapes, estimates, strict=True)
        ]
        return _children_many(asks, options)
    two_ways = [
        _two_way(p, s, z, fixed, table) for p, s, z in zip(problems, shapes, estimates, strict=True)
    ]
    fitted = fit_two_way_many([w.cells for w in two_ways], nonnegative=options.nonnegative)
    for p, (_, steps) in zip(problems, fitted, strict=True):
        p.raking_steps = max(p.raking_steps, steps)
    tables = [replace(w.cells, values=x) for w, (x, _) in zip(two_ways, fitted, strict=True)]
    if options.integer:
        solved = controlled_round_widened(tables, nonnegative=options.nonnegative)
        rounded = [r.values for r in solved]
        for p, r in zip(problems, solved, strict=True):
            if r.widened:
                p.widened[table] = p.widened.get(table, 0) + r.widened
    else:
        rounded = [t.values for t in tables]
    out: list[np.ndarray | None] = [None] * len(two_ways)
    asks, asked = [], []
    for k, (w, x) in enumerate(zip(two_ways, rounded, strict=True)):
        if w.to_inner is None:
            out[k] = x
        elif w.pseudo.cells == w.table.cells:
            out[k] = x[w.to_inner]  # the two-way table is the table, in another cell order
        else:
            asks.append(ChildrenProblem(estimates[k], w.to_inner, x))
            asked.append(k)
    for k, cells in zip(asked, _children_many(asks, options), strict=True):
        out[k] = cells
    return out


def _fit_levels(problems: Sequence[Problem], upto: int, options: FitOptions) -> None:
    """Totals of every geography level down to ``upto``, each the children of the one above."""
    for level in range(NATIONAL, upto + 1):
        todo = [p for p in problems if level not in p.geo_totals]
        asks = []
        for p in todo:
            h = p.hierarchy
            source = next(tp.table for tp in p.order if p.structures[tp.table].level >= level)
            s = p.structures[source]
            margin = Margin(level, ())
            estimate = np.bincount(
                margin_index(s, margin, h), p.estimates[source], margin_size(margin, [s], h)
            )
            if level == NATIONAL:
                total = float(estimate[0])
                if options.nonnegative:
                    total = max(total, 0.0)
                value = np.array([_round_half_up(total)] if options.integer else [total])
                p.geo_totals[level] = value.astype(np.int64 if options.integer else np.float64)
                continue
            asks.append(
                ChildrenProblem(estimate, h.ancestors(level, level - 1), p.geo_totals[level - 1])
            )
        if level != NATIONAL:
            for p, totals in zip(todo, _children_many(asks, options), strict=True):
                p.geo_totals[level] = totals


def fit_top(problem: Problem, level: int, options: FitOptions) -> None:
    """Fix the totals down to ``level`` and every table at or above it (in place)."""
    _fit_levels([problem], level, options)
    for tp in problem.order:
        if problem.structures[tp.table].level <= level and tp.table not in problem.fixed:
            (problem.fixed[tp.table],) = _fit_tables([problem], tp, options)


def fit_group(problem: Problem, options: FitOptions) -> None:
    """Fix all remaining levels and tables of one group problem (see :func:`split_groups`)."""
    fit_groups([problem], options)


def fit_groups(problems: Sequence[Problem], options: FitOptions) -> None:
    """:func:`fit_group` for each of several group problems of one plan, small ones together.

    Groups are taken in runs of at most :data:`.rounding.BATCH_CELLS` cells (a larger
    group alone). Within a run each level's totals and each table are fixed in every
    group before the next; the groups' simplex projections and roundings are one
    sort, their two-way projections one array (each controlled rounding is its own program)
    (the ``*_many`` functions of :mod:`.children` and :mod:`.two_way`). Every group
    gets bit for bit what :func:`fit_group` gives it alone.
    """
    if not problems:
        return
    order = problems[0].order
    if any(p.order != order for p in problems):
        raise InternalError("fit_groups: the group problems come from different plans")
    sizes = [sum(s.cells for t, s in enumerate(p.structures) if t not in p.fixed) for p in problems]
    for run in batches(sizes):
        _fit_together([problems[k] for k in run], options)


def _fit_together(problems: Sequence[Problem], options: FitOptions) -> None:
    _fit_levels(problems, max(s.level for s in problems[0].structures), options)
    for tp in problems[0].order:
        todo = [p for p in problems if tp.table not in p.fixed]
        if todo:
            for p, fixed in zip(todo, _fit_tables(todo, tp, options), strict=True):
                p.fixed[tp.table] = fixed


def _take_geo(values: np.ndarray, s: TableStructure, positions: np.ndarray) -> np.ndarray:
    return np.take(values.reshape(s.sizes), positions, axis=s.geo_axis).reshape(-1)


def split_groups(problem: Problem, level: int) -> list[tuple[Problem, list[np.ndarray | None]]]:
    """One independent problem per position of ``level`` (after :func:`fit_top` at ``level``).

    Returns each group's problem with, per table, the positions its cells take in
    the table's geography axis (None for tables that are fixed already).
    """
    h = problem.hierarchy
    groups = []
    for g in range(h.sizes[level]):
        positions: list[np.ndarray] = []
        for lv in range(len(h.levels)):
            if lv <= level:
                positions.append(h.ancestors(level, lv)[g : g + 1])
            else:
                positions.append(np.flatnonzero(h.ancestors(lv, level) == g))
        parents = tuple(
            np.searchsorted(positions[lv], h.parents[lv][positions[lv + 1]]).astype(np.int64)
            for lv in range(len(h.levels) - 1)
        )
        sub_h = Hierarchy(h.levels, tuple(p.size for p in positions), parents)
        structures, estimates, fixed, taken = [], [], {}, []
        for t, s in enumerate(problem.structures):
            if s.geo_axis is None:
                structures.append(s)
                estimates.append(problem.estimates[t])
                if t in problem.fixed:
                    fixed[t] = problem.fixed[t]
                taken.append(None)
                continue
            pos = positions[s.level]
            sizes = list(s.sizes)
            sizes[s.geo_axis] = pos.size
            structures.append(replace(s, sizes=tuple(sizes)))
            estimates.append(_take_geo(problem.estimates[t], s, pos))
            if t in problem.fixed:
                fixed[t] = _take_geo(problem.fixed[t], s, pos)
                taken.append(None)
            else:
                taken.append(pos)
        geo = {lv: problem.geo_totals[lv] for lv in problem.geo_totals if lv <= level}
        geo = {lv: v[positions[lv]] if lv >= 0 else v for lv, v in geo.items()}
        sub = Problem(tuple(structures), problem.order, sub_h, estimates, fixed, geo)
        groups.append((sub, taken))
    return groups


def merge_group(problem: Problem, sub: Problem, taken: Sequence[np.ndarray | None]) -> None:
    """Write a solved group's tables back into the full problem's arrays."""
    for t, pos in enumerate(taken):
        if pos is None:
            continue
        s = problem.structures[t]
        target = problem.fixed[t].reshape(s.sizes)
        block = sub.fixed[t].reshape(sub.structures[t].sizes)
        index = [slice(None)] * len(s.sizes)
        index[s.geo_axis] = pos
        target[tuple(index)] = block
    problem.raking_steps = max(problem.raking_steps, sub.raking_steps)
    add_widened(problem.widened, sub.widened)


def add_widened(total: dict[int, int], more: dict[int, int]) -> None:
    """Add ``more``'s widened cells per table into ``total`` (in place)."""
    for t, n in more.items():
        total[t] = total.get(t, 0) + n


def run_topdown(problem: Problem, options: FitOptions, level: int) -> None:
    """Top-down for the whole problem: the top, then every group of ``level`` (together)."""
    fit_top(problem, level, options)
    if level == NATIONAL or len(problem.fixed) == len(problem.structures):
        fit_group(problem, options)
        return
    groups = split_groups(problem, level)
    dtype = np.int64 if options.integer else np.float64
    for t, s in enumerate(problem.structures):
        if t not in problem.fixed:
            problem.fixed[t] = np.zeros(s.cells, dtype=dtype)
    fit_groups([sub for sub, _ in groups], options)
    for sub, taken in groups:
        merge_group(problem, sub, taken)
