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

With at most two levels the solve is small. P u_i is invariant under the
symmetries that fix cell i (the strictly convex least squares has one solution,
so it keeps every symmetry of its data), so it is constant on their orbits: per
table, whether a cell's position is cell i's (or any, when the levels differ) and
whether each key it shares with cell i's table has cell i's value. The least
squares over vectors constant on those orbits has a few dozen unknowns; it is
solved densely on the null space of the constraints (:func:`_orbit_solve`), exactly
to rounding. Deeper hierarchies, whose positions' orbits depend on the tree, use
the conjugate gradients on the whole group.

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
import scipy.sparse as sp

from .groups import group_hierarchy, group_structures
from .plan import plan
from .structure import TOP, HasShape, Hierarchy
from .wls import constraint_system, shape_key, solve_wls

__all__ = ["MAX_PATH_SHAPES", "least_squares_variances", "path_shapes"]

# Most solves per table: one per path shape of its level (a two-level hierarchy has one
# per distinct number of children of a top-level position).
MAX_PATH_SHAPES = 64
# Relative to the Gram matrix's largest eigenvalue: below it an eigenvalue is 0 (float
# error in a 0 eigenvalue is about 1e-15 of the largest; a nonzero one of these integer
# constraint matrices is far above 1e-10 of it).
GRAM_TOLERANCE = 1e-10


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
        own = _orbit_solve(p.structures, None, p.constraints, variances, t, 0, systems)
        out[s.name] = _variance(variances[t], own)
    return out


def _orbit_solve(
    structures, hierarchy, constraints, variances, t: int, position: int, systems: dict
) -> float:
    """(P u_i)_i for cell i of table ``t`` at geography ``position`` (0 elsewhere), keys at 0.

    For at most two levels (or none): the least squares restricted to vectors constant
    on the orbits of the symmetries fixing cell i (module docstring), densely.
    """
    target = structures[t]
    codes, cell_i = [], 0
    per_table = 2 ** max(len(s.keys) for s in structures)  # codes of one table: below this
    for u, s in enumerate(structures):
        code = np.zeros(s.sizes, dtype=np.int64)
        for axis, key in enumerate(s.keys):
            shape = [1] * len(s.sizes)
            shape[axis] = -1
            if axis == s.geo_axis:
                # Positions are told apart only at cell i's own level, below the top.
                same = target.geo_axis is not None and s.level == target.level and s.level > TOP
                label = np.arange(s.sizes[axis]) == position if same else None
            else:
                label = np.arange(s.sizes[axis]) == 0 if key in target.keys else None
            if label is not None:
                code = code * 2 + label.astype(np.int64).reshape(shape)
        codes.append(code.reshape(-1) + u * per_table)
        if u == t:
            cell_i = (
                position * int(np.prod(s.sizes[s.geo_axis + 1 :], dtype=np.int64))
                if (s.geo_axis is not None)
                else 0
            )
    offsets = np.cumsum([0, *(s.cells for s in structures)])
    codes = np.concatenate(codes)
    present = np.bincount(codes, minlength=1) > 0  # codes are small: no sort needed
    orbit = (np.cumsum(present) - 1)[codes]
    orbits = int(present.sum())
    key = shape_key(structures, hierarchy)
    if key not in systems:  # one group's system serves every table's cell
        weights = [float(v) for v in variances]
        systems[key] = constraint_system(structures, weights, constraints, hierarchy)
    system = systems[key]
    cells = orbit.size
    members = sp.csr_matrix((np.ones(cells), (np.arange(cells), orbit)), shape=(cells, orbits))
    constrained = system.C @ members  # sparse: its Gram matrix is formed sparse
    weights = np.bincount(orbit, weights=1.0 / system.v, minlength=orbits)
    own = int(orbit[offsets[t] + cell_i])
    rhs = np.zeros(orbits)
    rhs[own] = 1.0 / float(variances[t])
    free = _null_space(constrained)
    w = free @ np.linalg.solve(free.T @ (weights[:, None] * free), free.T @ rhs)
    return float(w[own])


def _variance(noise_variance: Fraction, own: float) -> float:
    # (P u_i)_i is in [0, 1] for a projection orthogonal in a diagonal metric; the
    # solver's tolerance can put it a hair outside.
    return float(noise_variance) * min(max(float(own), 0.0), 1.0)


def _null_space(matrix) -> np.ndarray:
    """An orthonormal basis of {w : matrix @ w = 0} (columns), from the Gram matrix.

    The constraints have many rows and few orbit columns: the null space of ``matrix``
    is that of its small Gram matrix (matrix^T matrix, orbits x orbits, formed sparse),
    whose eigenvectors (``eigh``) of eigenvalue 0 span it. A thin SVD of the tall
    matrix gives the same space but runs multi-threaded BLAS on thousands of rows,
    whose threads wait for cores on a loaded machine (the wall time of a release's
    margins was mostly that wait). Eigenvalues are squared singular values: one below
    :data:`GRAM_TOLERANCE` of the largest is 0 (the constraint matrix holds small
    integer counts, so a nonzero one sits far above it).
    """
    gram = matrix.T @ matrix
    gram = gram.toarray() if sp.issparse(gram) else np.asarray(gram)
    if gram.size == 0:
        return np.eye(gram.shape[0])
    values, vectors = np.linalg.eigh(gram)
    top = max(float(values[-1]), 0.0)
    return vectors[:, values <= GRAM_TOLERANCE * top] if top > 0 else np.eye(gram.shape[0])


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
    small = len(hierarchy.levels) <= 2
    for group in sorted(wanted):
        systems: dict = {}  # this group's system, for each of its tables (one group held)
        sub_h, positions = group_hierarchy(hierarchy, group)
        sub_s = group_structures(p.structures, positions)
        for t, position in wanted[group]:
            s = sub_s[t]
            local = int(np.searchsorted(positions[s.level], position))
            if small:
                own = _orbit_solve(sub_s, sub_h, p.constraints, variances, t, local, systems)
            else:
                # C order with every key before the geography at 0: the geography's stride.
                cell = local * int(np.prod(s.sizes[s.geo_axis + 1 :], dtype=np.int64))
                own = solve_wls(
                    sub_s, _unit(sub_s, t, cell), variances, p.constraints, sub_h, systems=systems
                ).estimates[t][cell]
            variance = _variance(variances[t], own)
            out[s.name] = max(out.get(s.name, 0.0), variance)
    return {s.name: min(out.get(s.name, bound[s.name]), bound[s.name]) for s in p.structures}
