"""The closest controlled rounding as a minimum-cost flow (numpy, scipy): the measured alternative.

Not the product's solver: ``bench_postprocess_rounding.py`` times it against the
release's HiGHS programs (``dp_pipeline.postprocess.rounding``) on the same problems
and checks both reach the same total distance. Kept here so the choice can be measured
again.

A two-way table's rounding (cells to integers, every row and column sum at its
target) is a flow on the bipartite network row -> column: one unit up on cell
(r, c) is a unit from row r to column c, one unit down a unit from c to r. From
each cell's closest integer in its box, a row still short of its target (or a
column over it) holds an excess, the others a deficit; the cost of a unit is the
change of |n - x| it makes, which is convex in n, so a cell's residual arcs are its
next unit up and its next unit down, each at its own marginal cost (plus a penalty
per unit beyond the box where the box is widened). The system is totally
unimodular, so the cheapest integral flow is the L1-closest rounding: the optimum
of the linear program over the same box (Ahuja, Magnanti and Orlin 1993, Network
Flows, Theorem 9.4 and Section 9.7).

Solved by the primal-dual method (Ahuja et al., Section 9.8): node potentials keep
every residual arc at a reduced cost >= 0 (at the start every cell is at its closest
integer in the box, so every marginal cost is >= 0); each phase computes shortest
distances from all excess nodes (``scipy.sparse.csgraph.dijkstra``, in C), raises
the potentials by them, and sends a maximum flow (``maximum_flow``, Dinic's method)
through the arcs of reduced cost 0 from the excesses to the deficits. Every step
keeps the reduced costs >= 0, so a flow meeting every target is optimal (Theorem
9.3, reduced cost optimality). Distances are floats: arcs within :data:`TOLERANCE`
of reduced cost 0 count as 0, so the total distance is within ``TOLERANCE`` per
moved unit of the optimum (far below what separates two roundings).

Only a few cells can be in an optimal rounding's moves (the cheapest of each row
and column): each table starts with the :data:`CANDIDATES` cheapest moves at every
row and every column, takes all of its cells when those cannot meet its targets,
and at the end every other cell's reduced cost is checked against the potentials
(the certificate of Theorem 9.3 over the whole table); a cell below 0 is moved
(its arc saturated, which keeps the reduced costs >= 0) and joins, and the phases go
on. Tables are disjoint components of one network: each phase serves all tables
still short, and a table's phases, potentials and integers depend on its own cells
alone (its distances are capped by its own largest), so a table gets the same
integers alone or beside others, on any engine.

Pure post-processing of noisy values; deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra, maximum_flow

from dp_pipeline.errors import InternalError

__all__ = ["CANDIDATES", "TOLERANCE", "BoxRounding", "round_in_boxes"]

TOLERANCE = 1e-9  # reduced costs (counts of |n - x|) this close to 0 are 0
# Moves kept at the start per row and per column: 4 keeps nine in ten of the demo's
# tables within their first candidates (the others take all their cells once).
CANDIDATES = 4


@dataclass(frozen=True)
class BoxRounding:
    """One table's rounding problem: real ``x`` at (``row``, ``col``), the targets,
    each cell in ``low..high``; with ``widen`` also beyond the box, every unit beyond
    it costing ``penalty`` more, down to ``floor`` at least (None: no floor)."""

    x: np.ndarray
    row: np.ndarray
    col: np.ndarray
    row_targets: np.ndarray
    col_targets: np.ndarray
    low: np.ndarray
    high: np.ndarray
    widen: bool = False
    floor: int | None = None
    penalty: float = 0.0


class _Network:
    """All tables' cells in one array, rows then columns of each table as nodes."""

    def __init__(self, problems: Sequence[BoxRounding]):
        nodes = [p.row_targets.size + p.col_targets.size for p in problems]
        self.offsets = np.concatenate([[0], np.cumsum(nodes)]).astype(np.int64)
        self.nodes = int(self.offsets[-1])
        sizes = [p.x.size for p in problems]
        self.cell_table = np.repeat(np.arange(len(problems)), sizes)
        self.node_table = np.repeat(np.arange(len(problems)), nodes)
        cat = np.concatenate
        self.x = cat([np.zeros(0)] + [np.asarray(p.x, np.float64) for p in problems])
        self.u = cat(
            [np.zeros(0, np.int64)]
            + [
                o + np.asarray(p.row, np.int64)
                for o, p in zip(self.offsets[:-1], problems, strict=True)
            ]
        )
        self.v = cat(
            [np.zeros(0, np.int64)]
            + [
                o + p.row_targets.size + np.asarray(p.col, np.int64)
                for o, p in zip(self.offsets[:-1], problems, strict=True)
            ]
        )
        self.low = cat([np.zeros(0, np.int64)] + [np.asarray(p.low, np.int64) for p in problems])
        self.high = cat([np.zeros(0, np.int64)] + [np.asarray(p.high, np.int64) for p in problems])
        widen = np.array([p.widen for p in problems], bool)
        self.widen = widen[self.cell_table]
        floors = np.array(
            [np.iinfo(np.int64).min if p.floor is None else p.floor for p in problems]
        )
        self.floor = floors[self.cell_table]
        self.penalty = np.array([p.penalty for p in problems], np.float64)[self.cell_table]
        self.target = cat(
            [np.zeros(0, np.int64)]
            + [
                np.concatenate([np.asarray(p.row_targets), -np.asarray(p.col_targets)]).astype(
                    np.int64
                )
                for p in problems
            ]
        )
        self.n = np.clip(np.rint(self.x).astype(np.int64), self.low, self.high)

    def excess(self) -> np.ndarray:
        """Per node: a row's target minus its sum, a column's sum minus its target."""
        n = self.n.astype(np.float64)  # sums of integers below 2**53: exact
        rows = np.bincount(self.u, n, self.nodes)
        cols = np.bincount(self.v, n, self.nodes)
        return self.target - rows.astype(np.int64) + cols.astype(np.int64)

    def arcs(self, cells: np.ndarray, pi: np.ndarray):
        """The residual arcs of ``cells``: (cell, +1 up / -1 down, tail, head, reduced cost)."""
        n, x = self.n[cells], self.x[cells]
        here = np.abs(n - x)
        inside_up = n < self.high[cells]
        inside_down = n > self.low[cells]
        widen = self.widen[cells]
        up = inside_up | widen
        down = inside_down | (widen & (n > self.floor[cells]))
        pen = self.penalty[cells]
        cost_up = np.abs(n + 1 - x) - here + np.where(inside_up, 0.0, pen)
        cost_down = np.abs(n - 1 - x) - here + np.where(inside_down, 0.0, pen)
        iu, idn = np.flatnonzero(up), np.flatnonzero(down)
        u, v = self.u[cells], self.v[cells]
        cell = np.concatenate([cells[iu], cells[idn]])
        sign = np.concatenate([np.ones(iu.size, np.int64), -np.ones(idn.size, np.int64)])
        tail = np.concatenate([u[iu], v[idn]])
        head = np.concatenate([v[iu], u[idn]])
        cost = np.concatenate([cost_up[iu], cost_down[idn]])
        return cell, sign, tail, head, cost + pi[tail] - pi[head]


def _cheapest(network: _Network, cells: np.ndarray, pi: np.ndarray, k: int) -> np.ndarray:
    """Of ``cells``, the ``k`` cheapest moves at every node (row or column)."""
    cell, _, tail, head, rc = network.arcs(cells, pi)
    keep = []
    for node in (tail, head):
        order = np.lexsort((cell, rc, node))
        ranked = node[order]
        rank = np.arange(ranked.size) - np.searchsorted(ranked, ranked, side="left")
        keep.append(cell[order[rank < k]])
    return np.unique(np.concatenate(keep))


def _join(network: _Network, cells: np.ndarray, pi: np.ndarray, b: np.ndarray) -> None:
    """Move each of ``cells`` while one of its arcs has a reduced cost below 0 (saturating
    it keeps every reduced cost >= 0: its reverse arc then costs the opposite)."""
    while cells.size:
        cell, sign, _, _, rc = network.arcs(cells, pi)
        negative = rc < -TOLERANCE
        # A cell's up and down arcs cannot both be below 0 (their costs sum to >= 0).
        _move(network, cell[negative], sign[negative], b)
        cells = cell[negative]


def round_in_boxes(
    problems: Sequence[BoxRounding], *, candidates: int = CANDIDATES
) -> list[np.ndarray | None]:
    """Each problem's L1-closest integers (module docstring), None where none exists.

    Guarantee: every returned table meets its row and column targets, each cell within
    its box (beyond it only with ``widen``), and its total |n - x| (plus the penalties)
    is within ``TOLERANCE`` per moved unit of the linear program's optimum over the
    same box (reduced cost optimality, Ahuja et al. 1993, Theorem 9.3).
    """
    if not problems:
        return []
    net = _Network(problems)
    tables = len(problems)
    pi = np.zeros(net.nodes)
    b = net.excess()
    failed = np.zeros(tables, bool)
    if net.nodes:
        failed |= np.add.reduceat(b, net.offsets[:-1]) != 0  # targets of unequal totals
    whole = np.zeros(tables, bool)  # tables whose every cell is a candidate
    every = np.arange(net.x.size)
    in_cand = np.zeros(net.x.size, bool)
    in_cand[_cheapest(net, every, pi, candidates)] = True
    cand = np.flatnonzero(in_cand)
    while True:
        short = np.zeros(tables, bool)
        short[net.node_table[b > 0]] = True
        short &= ~failed
        if short.any():
            cells = cand[short[net.cell_table[cand]]]
            _phase(net, cells, pi, b, short, failed)
            grow = short & failed & ~whole  # stuck on its candidates: take every cell
            if grow.any():
                failed &= ~grow
                whole |= grow
                new = every[grow[net.cell_table] & ~in_cand]
                _join(net, new, pi, b)
                in_cand[new] = True
                cand = np.flatnonzero(in_cand)
            continue
        # Certificate over the cells outside the candidates of tables still solved.
        rest = np.flatnonzero(~in_cand & ~failed[net.cell_table])
        cell, _, _, _, rc = net.arcs(rest, pi)
        below = cell[rc < -TOLERANCE]
        if below.size == 0:
            break
        _join(net, below, pi, b)
        in_cand[below] = True
        cand = np.flatnonzero(in_cand)
    out: list[np.ndarray | None] = []
    for t in range(tables):
        lo, hi = np.searchsorted(net.cell_table, [t, t + 1])
        out.append(None if failed[t] else net.n[lo:hi].copy())
    return out


def _move(net: _Network, cells: np.ndarray, units: np.ndarray, b: np.ndarray) -> None:
    """Add ``units`` to ``cells`` and to their rows' and columns' sums (excess ``b``)."""
    net.n[cells] += units
    np.subtract.at(b, net.u[cells], units)
    np.add.at(b, net.v[cells], units)


def _phase(net, cells, pi, b, short, failed) -> None:
    """One primal-dual phase over ``cells`` of the tables ``short`` of their targets (in
    place: the integers, the excesses, the potentials; a table whose excesses reach no
    deficit is marked ``failed``, to be grown or given up by the caller)."""
    nodes = np.flatnonzero(short[net.node_table])  # the short tables' nodes, renumbered
    local = np.full(net.nodes, -1, np.int64)
    local[nodes] = np.arange(nodes.size)
    size = nodes.size
    arc_cell, _, tail, head, rc = net.arcs(cells, pi)
    rc = np.maximum(rc, 0.0)  # float error below 0 (within TOLERANCE)
    lt, lh = local[tail], local[head]
    graph = sp.csr_matrix((rc, (lt, lh)), shape=(size, size))
    bl = b[nodes]
    table = net.node_table[nodes]
    sources = np.flatnonzero(bl > 0)
    sinks = np.flatnonzero(bl < 0)
    d = dijkstra(graph, directed=True, indices=sources, min_only=True)
    finite = np.isfinite(d)
    reached = np.zeros(short.size, bool)
    reached[table[sinks[finite[sinks]]]] = True
    failed |= short & ~reached
    # Each table's distances capped at its own largest finite one (any cap keeps the
    # reduced costs >= 0): a table's potentials depend on its own cells alone.
    top = np.full(short.size, -np.inf)
    np.maximum.at(top, table[finite], d[finite])
    cap = np.where(np.isfinite(top), top, 0.0)[table]
    d = np.where(finite, np.minimum(d, cap), cap)
    pi[nodes] += d
    admissible = (rc + d[lt] - d[lh] <= TOLERANCE) & reached[table[lt]]
    sources = sources[reached[table[sources]]]
    sinks = sinks[reached[table[sinks]]]
    if sources.size == 0:
        return
    source, sink = size, size + 1
    a_tail, a_head = lt[admissible], lh[admissible]
    capacity = np.concatenate(
        [
            np.ones(a_tail.size, np.int32),
            bl[sources].astype(np.int32),
            (-bl[sinks]).astype(np.int32),
        ]
    )
    network = sp.csr_matrix(
        (
            capacity,
            (
                np.concatenate([a_tail, np.full(sources.size, source), sinks]),
                np.concatenate([a_head, sources, np.full(sinks.size, sink)]),
            ),
        ),
        shape=(size + 2, size + 2),
    )
    result = maximum_flow(network, source, sink, method="dinic")
    if result.flow_value == 0:
        raise InternalError("controlled rounding: a flow phase moved nothing")
    # Net units up per cell: the flow from its row to its column (antisymmetric, so a
    # cell whose up and down arcs both carried flow counts their difference).
    moved = np.unique(arc_cell[admissible])
    up = np.asarray(result.flow.tocsr()[local[net.u[moved]], local[net.v[moved]]]).ravel()
    _move(net, moved, up.astype(np.int64), b)
