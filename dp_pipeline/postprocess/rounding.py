"""Controlled rounding of two-way tables: the closest integers with both margins exact.

Each cell of a real table x becomes an integer n and every row and column sum is
exactly its integer target; among all such roundings with every cell floor(x) or
ceil(x) (the box), the one taken minimises the total distance sum |n - x| (L1),
as the Census Bureau's TopDown rounder does (Abowd et al. 2022, "The 2020 Census
Disclosure Avoidance System TopDown Algorithm", Section 7). Such a rounding exists
for any real table whose margins are the integer targets (the transportation
polytope is integral; Cox 1987). Choosing ceil over floor adds 1 - 2 frac(x) to the
distance, so the rounding is a minimum-cost flow source -> row -> column -> sink,
solved as the linear program min c·u, A u = targets − margins(nearest), 0 <= u <= 1
over unit steps u away from each cell's nearest integer (c >= 0: the change of the
distance), with A the signed row/column incidence matrix. A is totally unimodular,
so the dual simplex's optimal vertex is integral: HiGHS (``scipy.optimize.linprog``,
``method="highs-ds"``, already a dependency), chosen by measurement over
``scipy.optimize.milp`` on the same system (2-3x slower: branch-and-bound set-up
around the same LP) and over a flow in pure Python (networkx is not a dependency; its
network simplex runs in Python loops). Where the nearest integers already fit the
margins they are the optimum and no program is solved.

Boxes, in turn: estimates within :data:`SNAP` of an integer fixed there and the
others floor or ceil (the strict box); then, if float error in the fit made that
infeasible, near-integers may also move by one either way; then, only where no
rounding in that box exists (margins that no table in the box meets), the box is
widened minimally: moves beyond it cost far more than any move inside, so the
fewest counts leave the box, and :attr:`Rounded.widened` says how many cells left it.

Each table is solved on its own (its program depends on its own cells alone), so a
table gets the same integers whichever tables are rounded beside it and on whatever
engine: HiGHS is deterministic on equal input.

Pure post-processing of noisy values; deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ..errors import InternalError

__all__ = [
    "BATCH_CELLS",
    "SNAP",
    "Rounded",
    "TwoWayTable",
    "batches",
    "controlled_round",
    "controlled_round_many",
    "controlled_round_widened",
]

SNAP = 1e-7  # an estimate this close to an integer is that integer
# An LP solution this close to an integer is that integer (a vertex of a totally
# unimodular system is integral; the simplex reports it in floats).
INTEGRAL = 1e-6
# Cells solved together at most (2 MB per float array): small tables (states with few
# counties) share one projection array, saving numpy's per-call cost; a large table is
# solved alone, its arrays staying in cache.
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
class Rounded:
    """A table's integers and how many of its cells had to leave the floor/ceil box."""

    values: np.ndarray
    widened: int = 0


def _boxes(x: np.ndarray, nonnegative: bool):
    """The boxes to try in turn: (low, high) integer arrays, each cell low..high."""
    nearest = np.rint(x)
    snapped = np.abs(x - nearest) <= SNAP
    low = np.where(snapped, nearest, np.floor(x))
    high = np.where(snapped, nearest, np.ceil(x))
    yield low.astype(np.int64), high.astype(np.int64)
    low_f, high_f = np.floor(x - 2 * SNAP), np.ceil(x + 2 * SNAP)
    if nonnegative:
        low_f = np.maximum(low_f, 0.0)
    yield low_f.astype(np.int64), high_f.astype(np.int64)


def _margins(t: TwoWayTable, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Float sums of integers are exact below 2**53 (a table's total is far below).
    v = values.astype(np.float64)
    rows = np.bincount(t.row, v, t.row_targets.size).astype(np.int64)
    return rows, np.bincount(t.col, v, t.col_targets.size).astype(np.int64)


def _steps(x, base, count, sign):
    """Unit steps away from ``base``: per cell ``count`` of them in direction ``sign``;
    each step's cell and its cost, the change of |n - x| it makes."""
    layers = [np.flatnonzero(count > j) for j in range(int(count.max(initial=0)))]
    cells = np.concatenate([np.zeros(0, np.int64), *layers])
    start = np.concatenate(
        [np.zeros(0, np.int64), *(base[c] + sign * j for j, c in enumerate(layers))]
    )
    return cells, np.abs(start + sign - x[cells]) - np.abs(start - x[cells])


def _solve(t: TwoWayTable, x, low, high, nonnegative: bool, widen: bool):
    """The L1-closest integers in low..high (beyond it too with ``widen``) meeting the
    targets, and the cells beyond the box; None when there are none.

    From each cell's closest integer in its box, one variable per unit step up or
    down inside the box (a step's cost, the change of |n - x| it makes, is at least 0
    and grows with each further step since |n - x| is convex, so a vertex takes a
    cell's cheaper steps first); with ``widen`` one unbounded step up above ``high``
    and one down below ``low`` per cell, each unit costing 1 (the slope of |n - x|
    there) plus a penalty above any total the box's moves can reach, so the optimum
    leaves the box by the fewest counts. Steps down are columns of -A: the system stays
    totally unimodular. Every cost being at least 0, the dual simplex starts from a
    dual feasible basis and needs about as many pivots as the margins are off
    (presolve off: it costs more than it saves here; 0.14 s against 0.43 s for a
    60 x 232 table).
    """
    base = np.clip(np.rint(x).astype(np.int64), low, high)
    rows, cols = _margins(t, base)
    need = np.concatenate([t.row_targets - rows, t.col_targets - cols]).astype(np.float64)
    if not need.any():
        return base, 0
    up, up_cost = _steps(x, base, high - base, 1)
    down, down_cost = _steps(x, base, base - low, -1)
    steps = np.concatenate([up, down])
    cost = np.concatenate([up_cost, down_cost])
    signs = np.concatenate([np.ones(up.size), -np.ones(down.size)])
    upper = np.ones(steps.size)
    if widen:
        n = x.size
        penalty = 4.0 * (n + 1)
        every = np.arange(n)
        steps = np.concatenate([steps, every, every])
        cost = np.concatenate([cost, np.full(2 * n, 1.0 + penalty)])
        signs = np.concatenate([signs, np.ones(n), -np.ones(n)])
        below = low.astype(np.float64) if nonnegative else np.full(n, np.inf)
        upper = np.concatenate([upper, np.full(n, np.inf), below])
    if steps.size == 0:
        return None
    nr = t.row_targets.size
    A = sp.csr_matrix(
        (
            np.concatenate([signs, signs]),
            (
                np.concatenate([t.row[steps], nr + t.col[steps]]),
                np.concatenate([np.arange(steps.size)] * 2),
            ),
        ),
        shape=(need.size, steps.size),
    )
    result = linprog(
        cost,
        A_eq=A,
        b_eq=need,
        bounds=np.stack([np.zeros(steps.size), upper], axis=1),
        method="highs-ds",
        options={"presolve": False},
    )
    if result.status == 2:  # infeasible
        return None
    if result.status != 0:
        raise InternalError(f"controlled rounding: the linear program stopped ({result.message})")
    u = np.rint(result.x)
    if np.max(np.abs(result.x - u), initial=0.0) > INTEGRAL:
        raise InternalError("controlled rounding: the simplex returned a fractional vertex")
    out = base + np.bincount(steps, u * signs, x.size).astype(np.int64)
    if not widen:
        return out, 0
    outside = int(np.count_nonzero((out < low) | (out > high)))
    return out, outside


def _round_one(t: TwoWayTable, nonnegative: bool) -> Rounded:
    x = np.asarray(t.values, dtype=np.float64)
    if nonnegative:
        x = np.maximum(x, 0.0)
    R = np.asarray(t.row_targets, dtype=np.int64)
    C = np.asarray(t.col_targets, dtype=np.int64)
    t = TwoWayTable(x, np.asarray(t.row, np.int64), np.asarray(t.col, np.int64), R, C)
    nearest = np.rint(x).astype(np.int64)
    rows, cols = _margins(t, nearest)
    found = None
    if np.array_equal(rows, R) and np.array_equal(cols, C):
        # Every cell at its own closest integer: no rounding is closer in total.
        found = (nearest, 0)
    else:
        boxes = list(_boxes(x, nonnegative))
        for low, high in boxes:
            found = _solve(t, x, low, high, nonnegative, widen=False)
            if found is not None:
                break
        else:
            found = _solve(t, x, *boxes[-1], nonnegative, widen=True)
    if found is None:
        raise InternalError("controlled rounding found no rounding matching both margins")
    out, widened = found
    rows, cols = _margins(t, out)
    if not (np.array_equal(rows, R) and np.array_equal(cols, C)):
        raise InternalError("controlled rounding: a margin does not match its target")
    if nonnegative and np.any(out < 0):
        raise InternalError("controlled rounding: a negative count")
    return Rounded(out, widened)


def controlled_round_widened(
    problems: Sequence[TwoWayTable], *, nonnegative: bool
) -> list[Rounded]:
    """:func:`controlled_round` of each problem, with how many cells left their box."""
    return [_round_one(p, nonnegative) for p in problems]


def controlled_round_many(
    problems: Sequence[TwoWayTable], *, nonnegative: bool
) -> list[np.ndarray]:
    """:func:`controlled_round` of each problem (each solved on its own: the same
    integers as alone)."""
    return [r.values for r in controlled_round_widened(problems, nonnegative=nonnegative)]


def controlled_round(
    x: np.ndarray,
    row: np.ndarray,
    col: np.ndarray,
    row_targets: np.ndarray,
    col_targets: np.ndarray,
    *,
    nonnegative: bool,
) -> np.ndarray:
    """The integers closest to x in L1 with row and column sums exactly the targets,
    each floor(x) or ceil(x) where such a rounding exists (module docstring)."""
    problem = TwoWayTable(x, row, col, row_targets, col_targets)
    return controlled_round_many([problem], nonnegative=nonnegative)[0]
