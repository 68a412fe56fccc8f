"""Children summing to a fixed parent: simplex projection and largest-remainder rounding.

For every group g (a parent cell with fixed total P_g) the children's estimates z
are replaced by the closest point, in Euclidean distance, of {x >= 0, sum x = P_g}
(the scaled simplex; Held, Wolfe and Crowder 1974, the sorting algorithm of Duchi,
Shalev-Shwartz, Singer and Chandra 2008), or of {sum x = P_g} when negatives are
allowed (an equal shift). Integers then come from largest-remainder rounding:
every child gets floor(x); the P_g - sum floor(x) largest fractional parts get one
more, ties going to the lower cell index. The result is the integer vector
closest to x in L1 and L-infinity among those with the right sum and every cell
within one of x. All groups are processed at once with sorts and bincounts, and so are the
problems of several independent geography groups (``*_many``).

Pure post-processing of noisy values; deterministic (stable sorts, fixed ties).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from ..errors import InternalError

__all__ = [
    "ChildrenProblem",
    "fit_children",
    "fit_children_many",
    "round_children",
    "round_children_many",
]


def _group_rank(groups: np.ndarray, order: np.ndarray):
    """For positions sorted by group: 1-based rank within the group, group, start, size."""
    g_sorted = groups[order]
    starts = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]][: g_sorted.size])
    sizes = np.diff(np.r_[starts, g_sorted.size])
    rank = np.arange(g_sorted.size) - np.repeat(starts, sizes) + 1
    return rank, g_sorted, starts, sizes


@dataclass(frozen=True)
class ChildrenProblem:
    """Children ``z`` of parents ``groups`` (0..len(targets)-1) with fixed parent totals."""

    z: np.ndarray
    groups: np.ndarray
    targets: np.ndarray


@dataclass(frozen=True)
class _Stacked:
    """Several children problems end to end, parents renumbered apart."""

    z: np.ndarray
    groups: np.ndarray
    targets: np.ndarray
    cell_offsets: np.ndarray  # problem k's children are cell_offsets[k]:cell_offsets[k + 1]

    @classmethod
    def of(cls, problems: Sequence[ChildrenProblem], dtype) -> _Stacked:
        n_cells = np.array([np.size(p.z) for p in problems], dtype=np.int64)
        n_groups = np.array([np.size(p.targets) for p in problems], dtype=np.int64)
        cell_offsets = np.concatenate([[0], np.cumsum(n_cells)])
        group_offsets = np.concatenate([[0], np.cumsum(n_groups)[:-1]])
        groups = np.concatenate([np.asarray(p.groups, dtype=np.int64) for p in problems])
        if len(problems) > 1:
            groups += np.repeat(group_offsets, n_cells)
        return cls(
            np.concatenate([np.asarray(p.z, dtype=np.float64) for p in problems]),
            groups,
            np.concatenate([np.asarray(p.targets, dtype=dtype) for p in problems]),
            cell_offsets,
        )

    def split(self, values: np.ndarray) -> list[np.ndarray]:
        return [values[a:b] for a, b in pairwise(self.cell_offsets)]

    def lexsort(self, *keys: np.ndarray) -> np.ndarray:
        """``np.lexsort(keys)`` when ``keys[-1]`` is ``groups``: one small sort per problem.

        Parents are numbered apart and in problem order, so the global order is the
        problems' own orders end to end (many small sorts are cheaper than one large).
        """
        return np.concatenate(
            [np.lexsort([k[a:b] for k in keys]) + a for a, b in pairwise(self.cell_offsets)]
        )


def fit_children(
    z: np.ndarray, groups: np.ndarray, targets: np.ndarray, *, nonnegative: bool
) -> np.ndarray:
    """Closest x to z (Euclidean) with sum over each group equal to targets[group].

    ``groups`` gives each child's parent (0..len(targets)-1); with ``nonnegative``
    every x is >= 0 (requires targets >= 0).
    """
    (x,) = fit_children_many([ChildrenProblem(z, groups, targets)], nonnegative=nonnegative)
    return x


def fit_children_many(
    problems: Sequence[ChildrenProblem], *, nonnegative: bool
) -> list[np.ndarray]:
    """:func:`fit_children` of each problem, with one sort for all of them.

    Bit for bit each problem's own result: sorts are stable and keyed by parent
    first, and the running sums restart at every problem, as they do alone.
    """
    if not problems:
        return []
    st = _Stacked.of(problems, np.float64)
    z, groups, targets = st.z, st.groups, st.targets
    n_groups = targets.size
    counts = np.bincount(groups, minlength=n_groups)
    if not nonnegative:
        shift = (targets - np.bincount(groups, z, n_groups)) / np.maximum(counts, 1)
        return st.split(z + shift[groups])
    if np.any(targets < 0):
        raise InternalError("a fixed parent total is negative under nonnegative=True")
    order = st.lexsort(-z, groups)
    rank, g_sorted, starts, sizes = _group_rank(groups, order)
    zs = z[order]
    # Parents are numbered apart per problem, so each problem's children stay together in
    # sorted order; its running sum starts afresh, exactly as when it is fitted alone.
    csum = np.concatenate([np.cumsum(zs[a:b]) for a, b in pairwise(st.cell_offsets)])
    # Cumulative sum within each group: subtract the running total before the group starts
    # (nothing for the first group of a problem).
    before = np.r_[0.0, csum][starts]
    before[np.isin(starts, st.cell_offsets)] = 0.0
    within = csum - np.repeat(before, sizes)
    # rho = number of children kept positive: zs_k - (within_k - P) / k > 0 holds on a prefix.
    keep = zs * rank - (within - targets[g_sorted]) > 0
    rho = np.bincount(g_sorted, keep.astype(np.float64), n_groups).astype(np.int64)
    first = np.zeros(n_groups, dtype=np.int64)
    first[g_sorted[starts]] = starts
    theta = np.zeros(n_groups)
    has = (rho > 0) & (targets > 0)
    last = first[has] + rho[has] - 1
    theta[has] = (within[last] - targets[has]) / rho[has]
    x = np.maximum(z - theta[groups], 0.0)
    x[targets[groups] <= 0] = 0.0
    return st.split(x)


def round_children(x: np.ndarray, groups: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Integers within one of x, summing exactly to integer targets[group] in every group."""
    (out,) = round_children_many([ChildrenProblem(x, groups, targets)])
    return out


def round_children_many(problems: Sequence[ChildrenProblem]) -> list[np.ndarray]:
    """:func:`round_children` of each problem (``z`` holding the real x), in one sort.

    Bit for bit each problem's own result: the order within a parent is the same.
    """
    if not problems:
        return []
    st = _Stacked.of(problems, np.int64)
    x, groups, targets = st.z, st.groups, st.targets
    n_groups = targets.size
    base = np.floor(x).astype(np.int64)
    frac = x - base
    deficit = targets - np.bincount(groups, base, n_groups).astype(np.int64)
    counts = np.bincount(groups, minlength=n_groups)
    if np.any(deficit < 0) or np.any(deficit > counts):
        raise InternalError("largest-remainder rounding: estimates do not sum to their parent")
    order = st.lexsort(np.arange(x.size), -frac, groups)
    rank, g_sorted, _, _ = _group_rank(groups, order)
    up = np.zeros(x.size, dtype=np.int64)
    up[order] = rank <= deficit[g_sorted]
    out = base + up
    if not np.array_equal(np.bincount(groups, out, n_groups).astype(np.int64), targets):
        raise InternalError("largest-remainder rounding: children do not sum to their parent")
    return st.split(out)
