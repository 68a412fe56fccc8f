"""Top-down non-negative integer tables from consistent real estimates.

Order (after Hay et al. 2010 and the Census Bureau's TopDown algorithm): the
national total; then the totals of each geography level, children of the level
above; then each table's cells, coarsest geography first, constrained to the
margins already fixed (one margin: children of a fixed parent, see
:mod:`.children`; two margins: a two-way table, see :mod:`.two_way`). Every
step keeps what is fixed exactly, so all pairwise margins agree in integers.

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

from .children import fit_children, round_children
from .plan import Plan, TablePlan
from .structure import (
    NATIONAL,
    Hierarchy,
    Margin,
    TableStructure,
    margin_index,
    margin_size,
)
from .two_way import controlled_round, fit_two_way

__all__ = [
    "FitOptions",
    "Problem",
    "fit_group",
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


def group_level(plan: Plan) -> int:
    """The level whose positions are independent groups (0), or -1 if tables couple them.

    Tables below level 0 must take only margins at level 0 or finer from above.
    """
    if plan.finest_level <= 0:
        return NATIONAL
    for tp in plan.order:
        if plan.structures[tp.table].level > 0 and any(f.margin.level < 0 for f in tp.fixed):
            return NATIONAL
    return 0


def _round_half_up(x: float) -> int:
    return int(np.floor(x + 0.5))


def _margin_values(problem: Problem, margin: Margin, source: int | None) -> np.ndarray:
    if source is None:
        return problem.geo_totals[margin.level]
    s = problem.structures[source]
    size = margin_size(margin, [s], problem.hierarchy)
    idx = margin_index(s, margin, problem.hierarchy)
    values = problem.fixed[source]
    out = np.bincount(idx, values.astype(np.float64), size)
    if values.dtype.kind == "i":
        return np.rint(out).astype(np.int64)
    return out


def _children(z, groups, targets, options: FitOptions) -> np.ndarray:
    x = fit_children(z, groups, targets, nonnegative=options.nonnegative)
    if options.integer:
        return round_children(x, groups, targets)
    return x


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


def _fit_table(problem: Problem, tp: TablePlan, options: FitOptions) -> np.ndarray:
    s = problem.structures[tp.table]
    z = problem.estimates[tp.table]
    h = problem.hierarchy
    if not tp.two_way:
        (only,) = tp.fixed
        targets = _margin_values(problem, only.margin, only.source)
        return _children(z, margin_index(s, only.margin, h), targets, options)
    a, b = tp.fixed
    inner = Margin(
        max(a.margin.level, b.margin.level), tuple(sorted({*a.margin.keys, *b.margin.keys}))
    )
    pseudo = _pseudo_table(s.name, inner, problem)
    to_inner = margin_index(s, inner, h)
    z_inner = np.bincount(to_inner, z, pseudo.cells)
    row = margin_index(pseudo, a.margin, h)
    col = margin_index(pseudo, b.margin, h)
    R = _margin_values(problem, a.margin, a.source)
    C = _margin_values(problem, b.margin, b.source)
    x, steps = fit_two_way(z_inner, row, col, R, C, nonnegative=options.nonnegative)
    problem.raking_steps = max(problem.raking_steps, steps)
    if options.integer:
        x = controlled_round(x, row, col, R, C, nonnegative=options.nonnegative)
    if pseudo.cells == s.cells:
        return x[to_inner]  # the two-way table is the table itself, in another cell order
    return _children(z, to_inner, x, options)


def _fit_levels(problem: Problem, upto: int, options: FitOptions) -> None:
    """Totals of every geography level down to ``upto``, each the children of the one above."""
    h = problem.hierarchy
    for level in range(NATIONAL, upto + 1):
        if level in problem.geo_totals:
            continue
        source = next(
            tp.table for tp in problem.order if problem.structures[tp.table].level >= level
        )
        s = problem.structures[source]
        margin = Margin(level, ())
        estimate = np.bincount(
            margin_index(s, margin, h), problem.estimates[source], margin_size(margin, [s], h)
        )
        if level == NATIONAL:
            total = float(estimate[0])
            if options.nonnegative:
                total = max(total, 0.0)
            value = np.array([_round_half_up(total)] if options.integer else [total])
            problem.geo_totals[level] = value.astype(np.int64 if options.integer else np.float64)
            continue
        parents = h.ancestors(level, level - 1)
        problem.geo_totals[level] = _children(
            estimate, parents, problem.geo_totals[level - 1], options
        )


def fit_top(problem: Problem, level: int, options: FitOptions) -> None:
    """Fix the totals down to ``level`` and every table at or above it (in place)."""
    _fit_levels(problem, level, options)
    for tp in problem.order:
        if problem.structures[tp.table].level <= level and tp.table not in problem.fixed:
            problem.fixed[tp.table] = _fit_table(problem, tp, options)


def fit_group(problem: Problem, options: FitOptions) -> None:
    """Fix all remaining levels and tables of one group problem (see :func:`split_groups`)."""
    finest = max(s.level for s in problem.structures)
    _fit_levels(problem, finest, options)
    for tp in problem.order:
        if tp.table not in problem.fixed:
            problem.fixed[tp.table] = _fit_table(problem, tp, options)


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


def run_topdown(problem: Problem, options: FitOptions, level: int) -> None:
    """Top-down for the whole problem: the top, then every group of ``level`` in turn."""
    fit_top(problem, level, options)
    if level == NATIONAL or len(problem.fixed) == len(problem.structures):
        fit_group(problem, options)
        return
    groups = split_groups(problem, level)
    dtype = np.int64 if options.integer else np.float64
    for t, s in enumerate(problem.structures):
        if t not in problem.fixed:
            problem.fixed[t] = np.zeros(s.cells, dtype=dtype)
    for sub, taken in groups:
        fit_group(sub, options)
        merge_group(problem, sub, taken)
