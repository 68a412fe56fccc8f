"""The exact variance of the least squares estimate's cells, from public facts alone.

The least squares estimate is linear in the noisy tables: ls = P y, with P the
projection onto the consistent tables that is orthogonal in the inverse-variance
metric (:mod:`.wls`), so ls − truth = P e for the noise e, and Cov(ls) = P V P^T = P V
(P V is symmetric). A cell's variance is v_i (P u_i)_i for the unit vector u_i: one
least squares solve, of the same solver, per cell. It depends on the public shapes,
hierarchy and noise variances only, never on the data.

Few solves are needed: a permutation of a key's values, or of the geography's
positions that keeps the hierarchy (an automorphism of the group's tree), maps the
constraints onto themselves, so it keeps the variances. Every cell of a table at one
position has the variance of the table's first cell there; positions whose paths
from the top level have the same subtree shapes (isomorphic rooted subtrees, level
by level) share it. With every table keyed by the hierarchy the groups (top-level
positions) are independent, so one group of each path shape is solved, on its own.

National tables (no hierarchy key) couple the groups. They are left out of the
geography tables' solves: fewer constraints project onto a larger space, and in
the inverse-variance metric the projection onto a larger space has a larger
P V in the positive semi-definite order, so its diagonal bounds each cell's
variance from above. A national table's own variance is bounded by its noise
variance (diag(P V) ≤ diag(V)). Both bounds are stated as such by
:func:`least_squares_variances`. So is the bound a table gets when its level has
more than `MAX_PATH_SHAPES` path shapes (a deep hierarchy of irregular shape,
where the solves would cost more than the release's own): its noise variance.

Pure functions of public facts; deterministic (the solver's fixed operation order).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .groups import group_hierarchy, group_structures
from .plan import plan
from .structure import TOP, HasShape, Hierarchy
from .wls import solve_wls

__all__ = ["MAX_PATH_SHAPES", "least_squares_variances", "path_shapes"]

# Most solves per table: one per path shape of its level (a two-level hierarchy has one
# per distinct number of children of a top-level position).
MAX_PATH_SHAPES = 64


def path_shapes(hierarchy: Hierarchy) -> list[np.ndarray]:
    """Per level, each position's path shape: equal ids, equal subtree shapes from the top.

    Ids (int64) are dense per level and deterministic: a position's subtree shape is the
    sorted multiset of its children's shapes, and its path shape pairs its parent's path
    shape with its own subtree shape.
    """
    levels = len(hierarchy.levels)
    subtree: list[np.ndarray] = [np.zeros(0, np.int64)] * levels
    subtree[-1] = np.zeros(hierarchy.sizes[-1], dtype=np.int64)
    for level in range(levels - 2, -1, -1):
        children: list[list[int]] = [[] for _ in range(hierarchy.sizes[level])]
        for child, parent in enumerate(hierarchy.parents[level]):
            children[int(parent)].append(int(subtree[level + 1][child]))
        shapes: dict[tuple[int, ...], int] = {}
        subtree[level] = np.array(
            [shapes.setdefault(tuple(sorted(c)), len(shapes)) for c in children], dtype=np.int64
        )
    paths = [subtree[0]]
    for level in range(1, levels):
        parent_path = paths[-1][hierarchy.parents[level - 1]]
        pairs: dict[tuple[int, int], int] = {}
        paths.append(
            np.array(
                [
                    pairs.setdefault((int(p), int(s)), len(pairs))
                    for p, s in zip(parent_path, subtree[level], strict=True)
                ],
                dtype=np.int64,
            )
        )
    return paths


def least_squares_variances(
    tables: Sequence[HasShape], hierarchy: Hierarchy | None, variances: Sequence[Fraction]
) -> dict[str, float]:
    """Per table, the largest variance of a cell of the least squares estimate (counts²).

    Exact (to the solver's tolerance, 1e-7 of a count per unit of input) for the
    geography tables when every table has a hierarchy key, and for every table
    without a hierarchy; with national tables too, an upper bound for every table,
    and the noise variance for a table whose level has more than `MAX_PATH_SHAPES`
    path shapes (module docstring). Each cell's variance is at most its table's
    noise variance.
    """
    names = [t.name for t in tables]
    bound = {n: float(v) for n, v in zip(names, variances, strict=True)}
    if hierarchy is None:
        return _solved(tables, None, variances, bound)
    geo = [i for i, t in enumerate(tables) if _has_geography(t, hierarchy)]
    if len(geo) < 2:
        return bound
    solved = _by_group([tables[i] for i in geo], hierarchy, [variances[i] for i in geo], bound)
    return {**bound, **solved}


def _has_geography(table: HasShape, hierarchy: Hierarchy) -> bool:
    return any(k in hierarchy.levels for k in table.keys)


def _unit(structures, table: int, cell: int) -> list[np.ndarray]:
    values = [np.zeros(s.cells, dtype=np.float64) for s in structures]
    values[table][cell] = 1.0
    return values


def _solved(tables, hierarchy, variances, bound) -> dict[str, float]:
    """Without a hierarchy every cell of a table is alike: one solve per table."""
    p = plan(tables, hierarchy)
    out = dict(bound)
    if not p.constraints:
        return out
    systems: dict = {}
    for t, s in enumerate(p.structures):
        est = solve_wls(
            p.structures, _unit(p.structures, t, 0), variances, p.constraints, None, systems=systems
        ).estimates
        out[s.name] = _variance(variances[t], est[t][0])
    return out


def _variance(noise_variance: Fraction, own: float) -> float:
    # (P u_i)_i is in [0, 1] for a projection orthogonal in a diagonal metric; the
    # solver's tolerance can put it a hair outside.
    return float(noise_variance) * min(max(float(own), 0.0), 1.0)


def _by_group(tables, hierarchy: Hierarchy, variances, bound) -> dict[str, float]:
    """One solve per (table, path shape of its level), in the first group with that shape."""
    p = plan(tables, hierarchy)
    paths = path_shapes(hierarchy)
    out: dict[str, float] = {}
    # Per group, the (table, level position) cells to solve there.
    wanted: dict[int, list[tuple[int, int]]] = {}
    for t, s in enumerate(p.structures):
        level_paths = paths[s.level]
        _, first = np.unique(level_paths, return_index=True)
        if first.size > MAX_PATH_SHAPES:
            continue  # the noise variance bounds it
        tops = hierarchy.ancestors(s.level, TOP)
        for position in np.sort(first):
            wanted.setdefault(int(tops[position]), []).append((t, int(position)))
    systems: dict = {}
    for group in sorted(wanted):
        sub_h, positions = group_hierarchy(hierarchy, group)
        sub_s = group_structures(p.structures, positions)
        for t, position in wanted[group]:
            s = sub_s[t]
            local = int(np.searchsorted(positions[s.level], position))
            # C order with every key before the geography at 0: the geography's stride.
            cell = local * int(np.prod(s.sizes[s.geo_axis + 1 :], dtype=np.int64))
            est = solve_wls(
                sub_s, _unit(sub_s, t, cell), variances, p.constraints, sub_h, systems=systems
            ).estimates
            variance = _variance(variances[t], est[t][cell])
            out[s.name] = max(out.get(s.name, 0.0), variance)
    return {s.name: min(out.get(s.name, bound[s.name]), bound[s.name]) for s in p.structures}
