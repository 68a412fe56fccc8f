"""Consistent tables solved one top-level geography (a state) at a time.

When every table has a hierarchy key, every common margin is at the top level
of the hierarchy or finer, so each constraint of the least squares involves the
cells of one top-level position only: the system is block diagonal and its
solution is exactly the solution of one independent system per position
(Hay, Rastogi, Miklau and Suciu 2010, Section 4, applied to each block). Each
block is solved with the same Jacobi-preconditioned conjugate gradients and the
same tolerance (:func:`.wls.solve_wls`); the blocks agree with the global
solution to that tolerance (the stopping rule bounds every margin cell).

The top-down step then needs, from every group, only its small part: the
estimates of the top-level tables (keyed by the top level itself) and every
finer table's group total. :func:`fit_top_from_summaries` fixes the national
total, the top-level totals and the top-level tables from those parts alone;
:func:`group_problem` sets up the rest of one group. The driver
(:func:`consistent_by_group`) and Spark (`dp_pipeline.engines.spark.postprocess`,
one task per group) call the same functions on the same inputs (the driver
fits all groups in lockstep with :func:`.topdown.fit_groups`, which gives each
what :func:`.topdown.fit_group` gives it alone), so they give the same integers
bit for bit.

A table with no hierarchy key (national) couples the groups; :mod:`.coupled`
solves it with them exactly, as one more block, and these functions then take
the national tables as fixed by the top step.

Pure post-processing of noisy values and public facts; deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import InternalError
from .plan import Plan
from .structure import TOP, Hierarchy, NoisyCounts, TableStructure, margin_index, margin_size
from .topdown import FitOptions, Problem, add_widened, fit_groups, fit_top
from .wls import solve_wls

__all__ = [
    "GroupPart",
    "TopFixed",
    "consistent_by_group",
    "coupling_table",
    "fit_top_from_summaries",
    "group_cells",
    "group_hierarchy",
    "group_problem",
    "solve_group_wls",
]


def coupling_table(p: Plan, hierarchy: Hierarchy | None) -> str | None:
    """The first table that couples the top-level groups (no hierarchy key), else None.

    Without a hierarchy every table is national; the name of the first is returned.
    """
    for s in p.structures:
        if hierarchy is None or s.level < TOP:
            return s.name
    return None


def group_hierarchy(hierarchy: Hierarchy, group: int) -> tuple[Hierarchy, list[np.ndarray]]:
    """The hierarchy below top-level position ``group`` and, per level, its positions.

    Positions are increasing, so a table's group cells keep their relative order.
    """
    positions = [np.array([group], dtype=np.int64)]
    for level in range(1, len(hierarchy.levels)):
        positions.append(np.flatnonzero(hierarchy.ancestors(level, TOP) == group))
    parents = tuple(
        np.searchsorted(positions[lv], hierarchy.parents[lv][positions[lv + 1]]).astype(np.int64)
        for lv in range(len(hierarchy.levels) - 1)
    )
    sub = Hierarchy(hierarchy.levels, tuple(int(p.size) for p in positions), parents)
    return sub, positions


def group_structures(
    structures: Sequence[TableStructure], positions: Sequence[np.ndarray]
) -> tuple[TableStructure, ...]:
    out = []
    for s in structures:
        if s.geo_axis is None:  # a national table: the same in every group
            out.append(s)
            continue
        sizes = list(s.sizes)
        sizes[s.geo_axis] = int(positions[s.level].size)
        out.append(replace(s, sizes=tuple(sizes)))
    return tuple(out)


def group_cells(s: TableStructure, positions: Sequence[np.ndarray]) -> np.ndarray:
    """Cell indices (int64, increasing) of table ``s`` inside one group, in group order."""
    # C order over (keys before the geography, its positions, keys after): built
    # from the group's own cells, not by slicing the whole table.
    before = int(np.prod(s.sizes[: s.geo_axis], dtype=np.int64))
    after = int(np.prod(s.sizes[s.geo_axis + 1 :], dtype=np.int64))
    geo = s.sizes[s.geo_axis]
    pos = np.asarray(positions[s.level], dtype=np.int64)
    rows = np.arange(before, dtype=np.int64)[:, None] * geo + pos[None, :]
    return (rows[:, :, None] * after + np.arange(after, dtype=np.int64)[None, None, :]).ravel()


@dataclass(frozen=True)
class GroupPart:
    """What the top-down step needs from one group's least squares estimates."""

    group: int
    top_estimates: dict[int, np.ndarray]  # top-level tables: the group's cells
    totals: dict[int, float]  # finer tables: the group's total
    iterations: int
    max_residual: float


@dataclass(frozen=True)
class TopFixed:
    """The national total, the top-level totals, the top-level and national tables, fixed."""

    geo_totals: dict[int, np.ndarray]
    fixed: dict[int, np.ndarray]  # top-level and national tables, full
    raking_steps: int
    multiplier: np.ndarray | None = None  # national tables: μ of :mod:`.coupled`
    least_squares: dict[int, np.ndarray] | None = None  # national tables: before this step
    widened: dict[int, int] = field(default_factory=dict)  # per table: cells outside the box


def solve_group_wls(
    p: Plan,
    variances: Sequence,
    sub_structures: Sequence[TableStructure],
    sub_hierarchy: Hierarchy,
    values: Sequence[np.ndarray],
    systems: dict | None = None,
):
    """The least squares of one group (:func:`.wls.solve_wls` on its block).

    ``systems`` caches constraint systems across the groups of one plan and
    variances (groups of equal shape share one; the estimates are the same).
    """
    return solve_wls(
        sub_structures, values, variances, p.constraints, sub_hierarchy, systems=systems
    )


def group_part(group: int, p: Plan, sub_structures, sub_hierarchy, wls) -> GroupPart:
    top, totals = {}, {}
    for t, s in enumerate(sub_structures):
        if s.level == TOP:
            top[t] = wls.estimates[t]
        else:  # the group's total, summed in cell order as a bincount over all groups would
            totals[t] = float(np.bincount(np.zeros(s.cells, np.int64), wls.estimates[t], 1)[0])
    return GroupPart(group, top, totals, wls.iterations, wls.max_residual)


def _top_problem(
    p: Plan, hierarchy: Hierarchy, parts: Sequence[GroupPart], national: dict[int, np.ndarray]
) -> Problem:
    """A problem whose top-level and national tables are full, finer tables their group totals.

    The finer tables stand in as tables keyed by the top level (their group totals)
    and are marked fixed, so :func:`.topdown.fit_top` reads them only as the source
    of the geography totals when no top-level table exists, and never fits them.
    """
    n = hierarchy.sizes[TOP]
    if sorted(part.group for part in parts) != list(range(n)):
        raise InternalError(f"top-down: parts of {len(parts)} groups, expected {n}")
    parts = sorted(parts, key=lambda part: part.group)
    structures, estimates, placeholders = [], [], {}
    for t, s in enumerate(p.structures):
        if s.level < TOP:
            estimates.append(national[t])
            structures.append(s)
        elif s.level == TOP:
            block = np.stack([part.top_estimates[t].reshape(_one(s)) for part in parts])
            estimates.append(np.moveaxis(block, 0, s.geo_axis).reshape(-1))
            structures.append(s)
        else:
            totals = np.array([part.totals[t] for part in parts], dtype=np.float64)
            estimates.append(totals)
            structures.append(TableStructure(s.name, (hierarchy.levels[TOP],), (n,), TOP, 0))
            placeholders[t] = totals
    problem = Problem(tuple(structures), p.order, hierarchy, estimates, dict(placeholders))
    return problem


def _one(s: TableStructure) -> tuple[int, ...]:
    sizes = list(s.sizes)
    del sizes[s.geo_axis]
    return tuple(sizes)


def fit_top_from_summaries(
    p: Plan,
    hierarchy: Hierarchy,
    parts: Sequence[GroupPart],
    options: FitOptions,
    national: dict[int, np.ndarray] | None = None,
    multiplier: np.ndarray | None = None,
) -> TopFixed:
    """National and top-level totals, top-level and national tables, from every group's part.

    ``national`` holds the national tables' least squares estimates (:mod:`.coupled`).
    """
    problem = _top_problem(p, hierarchy, parts, national or {})
    finer = {t for t, s in enumerate(p.structures) if s.level > TOP}
    fit_top(problem, TOP, options)
    fixed = {t: v for t, v in problem.fixed.items() if t not in finer}
    geo = {lv: v for lv, v in problem.geo_totals.items() if lv <= TOP}
    widened = {t: n for t, n in problem.widened.items() if t not in finer}
    return TopFixed(geo, fixed, problem.raking_steps, multiplier, national, widened)


def group_problem(
    p: Plan,
    sub_structures: Sequence[TableStructure],
    sub_hierarchy: Hierarchy,
    positions: Sequence[np.ndarray],
    estimates: Sequence[np.ndarray],
    top: TopFixed,
) -> Problem:
    """One group's top-down problem, its top-level tables and totals fixed by ``top``.

    Solve it with :func:`.topdown.fit_group`, or several at once with
    :func:`.topdown.fit_groups` (the same integers bit for bit).
    """
    fixed = {}
    for t, s in enumerate(p.structures):
        if t in top.fixed and s.geo_axis is None:
            fixed[t] = top.fixed[t]  # a national table, fixed whole by the top step
        elif t in top.fixed:
            fixed[t] = np.take(top.fixed[t].reshape(s.sizes), positions[TOP], axis=s.geo_axis)
            fixed[t] = fixed[t].reshape(-1)
    geo = {lv: v if lv < TOP else v[positions[lv]] for lv, v in top.geo_totals.items()}
    return Problem(tuple(sub_structures), p.order, sub_hierarchy, list(estimates), fixed, geo)


def verify_group(p: Plan, sub: Problem, options: FitOptions) -> None:
    """Every pair of tables agrees exactly on its common margin inside the group."""
    structures = sub.structures
    for t, s in enumerate(structures):
        if options.nonnegative and np.any(sub.fixed[t] < 0):
            raise InternalError(f"table {s.name!r}: a negative count after the top-down step")
    for c in p.constraints:
        a, b, m = structures[c.a], structures[c.b], c.margin
        if a.geo_axis is None or b.geo_axis is None:
            continue  # a national margin: made to agree by the top step, across the groups
        size = margin_size(m, [a, b], sub.hierarchy)
        ma = np.bincount(margin_index(a, m, sub.hierarchy), sub.fixed[c.a].astype(float), size)
        mb = np.bincount(margin_index(b, m, sub.hierarchy), sub.fixed[c.b].astype(float), size)
        if not np.array_equal(ma, mb):
            raise InternalError(f"tables {a.name!r} and {b.name!r} disagree on their common margin")


@dataclass(frozen=True)
class ByGroupResult:
    values: list[np.ndarray]
    iterations: int
    max_residual: float
    raking_steps: int
    seconds: dict[str, float]
    least_squares: list[np.ndarray] | None = None  # with options: the estimates before top-down
    widened: dict[int, int] = field(default_factory=dict)  # per table: cells outside the box


def consistent_by_group(
    p: Plan,
    tables: Sequence[NoisyCounts] | Sequence[np.ndarray],
    variances: Sequence,
    hierarchy: Hierarchy,
    options: FitOptions | None,
) -> ByGroupResult:
    """The driver's per-group solve: least squares per group, the top, then each group.

    ``options`` None returns the least squares estimates (float64) only.
    """
    started = time.perf_counter()
    values = [np.asarray(getattr(t, "values", t), dtype=np.int64) for t in tables]
    groups, systems = [], {}
    for g in range(hierarchy.sizes[TOP]):
        sub_h, positions = group_hierarchy(hierarchy, g)
        sub_s = group_structures(p.structures, positions)
        cells = [group_cells(s, positions) for s in p.structures]
        own = [v[c] for v, c in zip(values, cells, strict=True)]
        wls = solve_group_wls(p, variances, sub_s, sub_h, own, systems)
        groups.append((g, sub_h, positions, sub_s, cells, wls))
    iterations = max(w.iterations for *_, w in groups)
    residual = max(w.max_residual for *_, w in groups)
    seconds = {"wls": time.perf_counter() - started}
    if options is None:
        out = [np.empty(s.cells, dtype=np.float64) for s in p.structures]
        for *_, cells, wls in groups:
            for t, c in enumerate(cells):
                out[t][c] = wls.estimates[t]
        return ByGroupResult(out, iterations, residual, 0, seconds)
    started = time.perf_counter()
    parts = [group_part(g, p, sub_s, sub_h, w) for g, sub_h, _, sub_s, _, w in groups]
    top = fit_top_from_summaries(p, hierarchy, parts, options)
    dtype = np.int64 if options.integer else np.float64
    out = [np.empty(s.cells, dtype=dtype) for s in p.structures]
    subs = [
        group_problem(p, sub_s, sub_h, positions, wls.estimates, top)
        for _, sub_h, positions, sub_s, _, wls in groups
    ]
    fit_groups(subs, options)  # all states in lockstep: what each gets alone, faster
    steps = max([top.raking_steps, *(sub.raking_steps for sub in subs)])
    widened = dict(top.widened)
    for sub in subs:
        add_widened(widened, sub.widened)
    estimates = [np.empty(s.cells, dtype=np.float64) for s in p.structures]
    for sub, (*_, cells, wls) in zip(subs, groups, strict=True):
        for t, c in enumerate(cells):
            out[t][c] = sub.fixed[t]
            estimates[t][c] = wls.estimates[t]
    seconds["topdown"] = time.perf_counter() - started
    return ByGroupResult(out, iterations, residual, steps, seconds, estimates, widened)
