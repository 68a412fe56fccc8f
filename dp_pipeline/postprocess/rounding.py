"""Controlled rounding of two-way tables: integers with both margins exact.

Each cell of a real table becomes floor(x) or ceil(x) and every row and column
sum is exactly its integer target (Cox 1987, "A constructive procedure for
unbiased controlled rounding"). Such a rounding exists for any real table whose
margins are the integer targets (the transportation polytope is integral); it is
found as an integer maximum flow source -> row -> column -> sink
(``scipy.sparse.csgraph.maximum_flow``, Dinic's algorithm), each row -> column
edge carrying the cell's choice of ceil over floor. A maximum flow takes any choice
that matches the margins, so the flow is first tried with every estimate within
:data:`NEAR` of an integer fixed at that integer (the rounding then moves no cell by
more than 1 - NEAR: a near-exact table's near-integer estimates stay put); only where
no such rounding exists does every cell get its floor/ceil choice. Several tables
(one per state) are rounded by one maximum flow over the disjoint union of their
networks, which gives each table exactly the flow it gets alone.

Pure post-processing of noisy values; deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from ..errors import InternalError

__all__ = [
    "BATCH_CELLS",
    "SNAP",
    "TwoWayTable",
    "batches",
    "controlled_round",
    "controlled_round_many",
]

SNAP = 1e-7  # an estimate this close to an integer is that integer
NEAR = 0.25  # first try: estimates this close to an integer take it (see _boxes)
# Cells solved together at most (2 MB per float array): small tables (states with few
# counties) share one maximum flow or projection array, saving numpy's per-call cost; a
# large table is solved alone, its arrays staying in cache (a union of large networks
# also runs as many Dinic phases over all of them as its slowest part needs). On the
# demo's 51 states, 1 << 18 took 0.09 s of top-down CPU time; every state alone 0.13 s,
# all in one batch 0.11 s (one run, load about 10).
BATCH_CELLS = 1 << 18


def batches(sizes: Sequence[int], limit: int = BATCH_CELLS) -> list[list[int]]:
    """Consecutive positions of ``sizes`` in runs of total at most ``limit`` (or one)."""
    out: list[list[int]] = []
    total = 0
    for k, size in enumerate(sizes):
        if not out or total + size > limit:
            out.append([])
            total = 0
        out[-1].append(k)
        total += size
    return out


@dataclass(frozen=True)
class TwoWayTable:
    """Real cells ``values`` at (``row``, ``col``) and the row and column targets."""

    values: np.ndarray
    row: np.ndarray
    col: np.ndarray
    row_targets: np.ndarray
    col_targets: np.ndarray


@dataclass(frozen=True)
class _Stacked:
    """Several rounding problems laid end to end: rows, columns and cells renumbered apart."""

    x: np.ndarray
    row: np.ndarray
    col: np.ndarray
    R: np.ndarray
    C: np.ndarray
    n_cells: np.ndarray  # per problem
    row_problem: np.ndarray  # the problem of each row
    col_problem: np.ndarray

    @classmethod
    def of(cls, problems: Sequence[TwoWayTable]) -> _Stacked:
        def sizes(arrays):
            return np.array([np.size(a) for a in arrays], dtype=np.int64)

        def join(arrays, dtype, offsets=None):
            """The arrays end to end, each plus its offset: one pass, no temporaries."""
            out = np.empty(int(n_cells.sum()), dtype=dtype)
            for k, (a, b) in enumerate(pairwise(np.concatenate([[0], np.cumsum(n_cells)]))):
                if offsets is None:
                    out[a:b] = np.reshape(arrays[k], -1)
                else:
                    np.add(np.reshape(arrays[k], -1), offsets[k], out=out[a:b])
            return out

        n_cells = sizes([p.values for p in problems])
        n_rows = sizes([p.row_targets for p in problems])
        n_cols = sizes([p.col_targets for p in problems])
        labels = np.arange(len(problems))
        return cls(
            x=join([p.values for p in problems], np.float64),
            row=join([p.row for p in problems], np.int64, np.cumsum(n_rows) - n_rows),
            col=join([p.col for p in problems], np.int64, np.cumsum(n_cols) - n_cols),
            R=np.concatenate([np.asarray(p.row_targets, dtype=np.int64) for p in problems]),
            C=np.concatenate([np.asarray(p.col_targets, dtype=np.int64) for p in problems]),
            n_cells=n_cells,
            row_problem=np.repeat(labels, n_rows),
            col_problem=np.repeat(labels, n_cols),
        )

    def per_cell(self, per_problem: np.ndarray) -> np.ndarray:
        return np.repeat(per_problem, self.n_cells)

    def split(self, values: np.ndarray) -> list[np.ndarray]:
        return [values[a:b] for a, b in pairwise(np.concatenate([[0], np.cumsum(self.n_cells)]))]


def _flow(low, cap, row, col, r_need, c_need):
    """Add to ``low`` the flow f, 0 <= f <= cap, of each cell in one maximum flow
    source -> row -> column -> sink (row capacities r_need, column capacities c_need);
    return the flow into each row.

    The integer cells low + f have margins low's plus r_need and c_need when the flow
    saturates every row (the caller checks, per problem).
    """
    nr, nc = r_need.size, c_need.size
    sink = nr + nc + 1
    live = np.flatnonzero(cap)
    live_row, live_col = row[live], col[live]
    key = live_row * nc
    key += live_col
    if key.size > 1 and not np.all(key[1:] > key[:-1]):
        by_cell = np.argsort(key, kind="stable")
        live, live_row, live_col = live[by_cell], live_row[by_cell], live_col[by_cell]
    del key
    # The graph in CSR form, built directly: node 0 the source, 1..nr the rows, then
    # the columns, then the sink; each node's edges sorted by head, zero capacities left out.
    src_rows = np.flatnonzero(r_need > 0)
    sink_cols = np.flatnonzero(c_need > 0)
    per_row = np.bincount(live_row, minlength=nr)
    out_degree = np.concatenate([[src_rows.size], per_row, (c_need > 0).astype(np.int64), [0]])
    indptr = np.concatenate([[0], np.cumsum(out_degree)]).astype(np.int32)
    cells = slice(src_rows.size, src_rows.size + live.size)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    indices[: cells.start] = 1 + src_rows
    indices[cells] = live_col
    indices[cells] += 1 + nr
    indices[cells.stop :] = sink
    data = np.empty(indices.size, dtype=np.int32)
    data[: cells.start] = r_need[src_rows]
    data[cells] = cap[live]
    data[cells.stop :] = c_need[sink_cols]
    graph = sp.csr_matrix((data, indices, indptr), shape=(sink + 1, sink + 1))
    graph.has_sorted_indices = True
    flow = maximum_flow(graph, 0, sink, method="dinic").flow
    # In the residual graph a row's edges are the reverse edge to the source (if the
    # source feeds it), then its cells in column order: the cells' flows sit at fixed places.
    first_of_row = np.cumsum(per_row) - per_row
    row_start = flow.indptr[1 : nr + 1].astype(np.int64) + (r_need > 0) - first_of_row
    place = row_start[live_row]
    place += np.arange(live.size)
    if not np.array_equal(flow.indices[place], indices[cells]):
        raise InternalError("controlled rounding: unexpected layout of the maximum flow")
    low[live] += flow.data[place]
    row_flow = np.zeros(nr, dtype=np.int64)
    row_flow[src_rows] = flow.data[flow.indptr[0] : flow.indptr[1]]
    return row_flow


def _boxes(x: np.ndarray, nonnegative: bool):
    """The floor/ceil boxes to try in turn, made when needed: (low, cap) integer arrays
    and low as floats (the same integers, for float sums).

    First the nearest box: cells within :data:`NEAR` of an integer fixed there, the
    others floor or ceil. A move costs (n - x)² (one table, one variance), so where a
    rounding in this box exists it moves no cell by more than 1 - NEAR and none of
    the near cells (a near-exact table's, whose estimates sit close to integers) by
    more than NEAR; a maximum flow alone may take any floor/ceil choice that matches
    the margins. Then the strict box (near-integers fixed, others floor or ceil),
    which always holds a rounding; if float error in the fit made it infeasible,
    near-integers may also move by one either way. Whatever the box, a rounding is
    returned only when its margins are exactly the targets (checked in integers).
    """
    nearest = np.rint(x)
    distance = x - nearest
    np.abs(distance, out=distance)
    near = distance <= NEAR
    if nonnegative:
        near &= nearest >= 0
    low = np.floor(x)
    np.copyto(low, nearest, where=near)
    yield low.astype(np.int64), np.logical_not(near).view(np.int8), low
    snapped = distance <= SNAP
    del distance, near
    # floor(x) or the nearest integer; ceil(x) - floor(x) = 1 off the integers. (When
    # ``nonnegative`` x >= 0 already, so clamping the floor at zero changes nothing.)
    low = np.floor(x)
    np.copyto(low, nearest, where=snapped)
    del nearest
    yield low.astype(np.int64), np.logical_not(snapped).view(np.int8), low
    low_f, high_f = np.floor(x - 2 * SNAP), np.ceil(x + 2 * SNAP)
    if nonnegative:
        low_f = np.maximum(low_f, 0.0)
    yield low_f.astype(np.int64), (high_f - low_f).astype(np.int64), low_f


def controlled_round_many(
    problems: Sequence[TwoWayTable], *, nonnegative: bool
) -> list[np.ndarray]:
    """:func:`controlled_round` of each problem, small ones sharing one maximum flow.

    Problems share no row or column, so their flow network is the disjoint union.
    Dinic's algorithm (scipy) on a disjoint union finds in each component the flow it
    finds on that component alone: every phase's level graph restricts to the
    component's own, no augmenting path leaves it, and nodes keep their relative order.
    So every result is bit for bit the single-problem result.
    """
    out: list[np.ndarray] = []
    for batch in batches([np.size(p.values) for p in problems]):
        out.extend(_round_together([problems[k] for k in batch], nonnegative))
    return out


def _round_together(problems: Sequence[TwoWayTable], nonnegative: bool) -> list[np.ndarray]:
    st = _Stacked.of(problems)
    n = len(problems)
    x = np.maximum(st.x, 0.0) if nonnegative else st.x
    out = None
    pending = np.ones(n, dtype=bool)
    for low, cap, low_f in _boxes(x, nonnegative):
        # Float sums of integers are exact below 2**53 (a table's total is far below).
        r_need = st.R - np.bincount(st.row, low_f, st.R.size).astype(np.int64)
        c_need = st.C - np.bincount(st.col, low_f, st.C.size).astype(np.int64)
        r_sum = np.bincount(st.row_problem, r_need, n)
        feasible = (
            pending
            & (np.bincount(st.row_problem, r_need < 0, n) == 0)
            & (np.bincount(st.col_problem, c_need < 0, n) == 0)
            & (r_sum == np.bincount(st.col_problem, c_need, n))
        )
        if not feasible.any():
            continue
        if not feasible.all():
            # Problems not tried now get no edges: isolated nodes, untouched by the flow.
            cap = np.where(st.per_cell(feasible), cap, 0)
            r_need = np.where(feasible[st.row_problem], r_need, 0)
            c_need = np.where(feasible[st.col_problem], c_need, 0)
        row_flow = _flow(low, cap, st.row, st.col, r_need, c_need)
        solved = feasible & (np.bincount(st.row_problem, row_flow, n) == r_sum)
        if out is None and solved.all():
            out = low
            break
        if out is None:
            out = np.zeros(x.size, dtype=np.int64)
        take = st.per_cell(solved)
        out[take] = low[take]
        pending &= ~solved
        if not pending.any():
            break
    else:
        raise InternalError("controlled rounding found no rounding matching both margins")
    if not (
        np.array_equal(np.bincount(st.row, out, st.R.size).astype(np.int64), st.R)
        and np.array_equal(np.bincount(st.col, out, st.C.size).astype(np.int64), st.C)
    ):
        raise InternalError("controlled rounding: a margin does not match its target")
    return st.split(out)


def controlled_round(
    x: np.ndarray,
    row: np.ndarray,
    col: np.ndarray,
    row_targets: np.ndarray,
    col_targets: np.ndarray,
    *,
    nonnegative: bool,
) -> np.ndarray:
    """Each cell floor(x) or ceil(x), row and column sums exactly the integer targets."""
    problem = TwoWayTable(x, row, col, row_targets, col_targets)
    return controlled_round_many([problem], nonnegative=nonnegative)[0]
