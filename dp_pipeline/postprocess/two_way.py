"""Two-way tables with both margins fixed: a real fit, then controlled rounding.

Cells are indexed by a row and a column (e.g. county x age-sex cell within one
state: the county totals are the row margin, the state's age-sex cells the
column margin). The real fit is the Euclidean projection of the estimates z on
the tables with those margins: the closest x (least squares; one table has one
noise variance, so this is the inverse-variance metric) with every row and
column sum at its target and, when cells must be non-negative, x >= 0. Without
the sign constraint it is the additive adjustment x = z + a_row + b_col (closed
form). With it, x = max(z - a_row - b_col, 0) for the multipliers (a, b) that
maximise the Lagrangian dual (Karush-Kuhn-Tucker); the dual is maximised one
block at a time, all row multipliers exactly, then all column multipliers
exactly (block coordinate ascent, which converges for this smooth concave dual;
Bertsekas, Nonlinear Programming, Section 2.7), each row's multiplier being the
threshold of a projection on a scaled simplex (Held, Wolfe and Crowder 1974),
found by Newton steps on a convex piecewise-linear function (finite: each step
keeps or shrinks the set of positive cells). Unlike proportional fitting
(raking), which moves a cell in proportion to its size, the projection moves
every positive cell of a row and column by the same amount, so the largest
cells are not the ones that take the adjustment. Integers come from controlled
rounding (:mod:`.rounding`): each cell becomes floor(x) or ceil(x) and both
margins stay exact.

Pure post-processing of noisy values; deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .rounding import SNAP, TwoWayTable, batches, controlled_round, controlled_round_many

__all__ = [
    "SNAP",
    "TwoWayTable",
    "controlled_round",
    "controlled_round_many",
    "fit_two_way",
    "fit_two_way_many",
]

# Relative to the largest row target: how far the last row step moved a row sum. 1e-9
# stops three ascent steps before 1e-12 did (9 steps against 12 on the demo's tables)
# with the same published integers there: the controlled rounding keeps the integer
# margins exact whatever is left (at most 1e-9 of the largest row target per row sum).
PROJECTION_TOLERANCE = 1e-9
MAX_PROJECTION_STEPS = 10_000


def fit_two_way(
    z: np.ndarray,
    row: np.ndarray,
    col: np.ndarray,
    row_targets: np.ndarray,
    col_targets: np.ndarray,
    *,
    nonnegative: bool,
) -> tuple[np.ndarray, int]:
    """The closest real x to z (Euclidean) whose row and column sums are the targets.

    With ``nonnegative`` also x >= 0. Returns (x, steps of the block ascent).
    Requires equal totals of row and column targets within every connected block
    (and, with ``nonnegative``, a non-negative table with those margins).
    """
    table = TwoWayTable(z, row, col, row_targets, col_targets)
    ((x, steps),) = fit_two_way_many([table], nonnegative=nonnegative)
    return x, steps


def fit_two_way_many(
    tables: Sequence[TwoWayTable], *, nonnegative: bool
) -> list[tuple[np.ndarray, int]]:
    """:func:`fit_two_way` of each table; small complete tables (every row meets every
    column) of the same shape are projected together, in one array.

    Bit for bit each table's own result: every row's and column's multiplier is found
    from its own cells alone and stops at its own fixed point, and a table stops at its
    own tolerance; a table done is kept as it is while the others go on.
    """
    out: list[tuple[np.ndarray, int] | None] = [None] * len(tables)
    dense: dict[int, list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]]] = {}
    for k, t in enumerate(tables):
        z = np.asarray(t.values, dtype=np.float64)
        R = np.asarray(t.row_targets, dtype=np.float64)
        C = np.asarray(t.col_targets, dtype=np.float64)
        nr, nc = R.size, C.size
        if not nonnegative:
            out[k] = (_additive_fit(z, t.row, t.col, R, C), 1)
            continue
        tolerance = PROJECTION_TOLERANCE * max(1.0, float(np.max(R, initial=0.0)))
        if z.size != nr * nc:
            out[k] = _project_scattered(z, t.row, t.col, R, C, tolerance)
            continue
        # Every row meets every column (one block, e.g. the counties of one state by the
        # age-sex cells): a dense matrix, axis sums instead of scattered bincounts.
        place = t.row.astype(np.int64) * nc + t.col
        dense.setdefault((nr, nc), []).append((k, z, place, R, C, tolerance))
    for same_shape in dense.values():
        for batch in batches([b[1].size for b in same_shape]):
            _project_together([same_shape[i] for i in batch], out)
    return out


def _project_together(block, out) -> None:
    """Project complete tables of one shape in one array.

    Every row and column is summed along a contiguous axis of its own length, as alone:
    tables of other shapes are not padded in (a pairwise sum with padding differs).
    """
    nc = block[0][4].size
    rows = block[0][3].size
    stack = np.full((len(block), rows, nc), -np.inf)
    R_stack = np.zeros((len(block), rows))
    flat = stack.reshape(len(block), -1)
    for g, (_, z, place, R, _, _) in enumerate(block):
        flat[g, place] = z
        R_stack[g, : R.size] = R
    C_stack = np.stack([C for *_, C, _ in block])
    x, steps = _project_dense(stack, R_stack, C_stack, np.array([b[-1] for b in block]))
    x = x.reshape(len(block), -1)
    for g, (k, _, place, _, _, _) in enumerate(block):
        out[k] = (x[g, place], int(steps[g]))


def _additive_fit(z, row, col, R, C) -> np.ndarray:
    """The least squares x = z + a_row + b_col with the target margins (closed form)."""
    nr, nc = R.size, C.size
    per_row = np.bincount(row, minlength=nr)
    x = z + ((R - np.bincount(row, z, nr)) / np.maximum(per_row, 1))[row]
    per_col = np.bincount(col, minlength=nc)
    x += ((C - np.bincount(col, x, nc)) / np.maximum(per_col, 1))[col]
    return x


def _thresholds(sums, cells, targets: np.ndarray, start: np.ndarray):
    """Per line (row or column), t with sum over its cells of max(w - t, 0) = target.

    ``sums(t, lines)`` gives, for the listed lines, the number of their cells above t
    and the sum of their excesses max(w - t, 0); ``cells(lines)`` their number of cells
    and the cells' sum. Newton's step t <- t + (excess - target) / (number above t) on
    this convex, decreasing, piecewise-linear function lands at or left of the root
    from anywhere right of the smallest cell, then moves right without passing it; a
    line stops when its number above t repeats (its cells above t are then the same,
    so t is the root). A start with no cell above it is replaced by the mean shift
    (sum of the cells - target) / cells, which is left of the root. Lines with a
    target of 0 or less get +inf (every cell 0). Each line depends on its own cells
    and start only. Returns t and each line's number of cells above it.
    """
    t = np.where(targets > 0, start, np.inf)
    count = np.full(targets.shape, -1, dtype=np.int64)
    lines = np.flatnonzero(targets > 0)
    first = True
    while lines.size:
        tl = t[lines]
        above, excess = sums(tl, lines)
        done = above == count[lines]
        with np.errstate(invalid="ignore"):  # inf - inf where no cell is above
            step = tl + np.divide(
                excess - targets[lines], above, out=np.zeros_like(tl), where=above > 0
            )
        if first and not np.all(above > 0):
            restart = np.flatnonzero(above == 0)
            n, total = cells(lines[restart])
            step[restart] = (total - targets[lines[restart]]) / n
        if not first:  # left of the root: t only moves right (guards against float error)
            step = np.maximum(step, tl)
        t[lines] = np.where(done, tl, step)
        count[lines] = np.where(above > 0, above, -1)
        lines = lines[~done]
        first = False
    return t, np.maximum(count, 0)


def _row_sums(W: np.ndarray, scratch: np.ndarray, above: np.ndarray):
    """``sums`` and ``cells`` of :func:`_thresholds` for the rows of W (-inf: no cell).

    Rows are summed along their contiguous axis, a row alone as within the whole array.
    ``scratch`` (float64) and ``above`` (bool), each at least W's size, are reused by
    every Newton step instead of two new arrays per step.
    """
    whole, width = W.shape

    def sums(t, lines):
        n = lines.size
        d = scratch[: n * width].reshape(n, width)
        np.subtract(W if n == whole else W[lines], t[:, None], out=d)
        np.maximum(d, 0.0, out=d)
        positive = above[: n * width].reshape(n, width)
        np.greater(d, 0.0, out=positive)
        return np.count_nonzero(positive, axis=1), d.sum(axis=1)

    def cells(lines):
        part = W[lines]
        finite = np.isfinite(part)
        return np.count_nonzero(finite, axis=1), np.where(finite, part, 0.0).sum(axis=1)

    return sums, cells


def _project_dense(Z: np.ndarray, R: np.ndarray, C: np.ndarray, tolerance: np.ndarray):
    """Project matrices Z[g] (rows x columns; -inf marks no cell) on their margins, x >= 0.

    Each matrix stops when its row multipliers move its row sums by at most its
    tolerance (its column sums exact); after that its multipliers are kept while the
    others go on. Returns (x, steps per matrix).
    """
    g, nr, nc = Z.shape
    ZT = np.ascontiguousarray(Z.transpose(0, 2, 1))  # columns as contiguous rows
    finite = np.isfinite(Z)
    # Starts: each row's mean shift, the exact root when no cell is clipped.
    a = (np.where(finite, Z, 0.0).sum(axis=2) - R) / np.maximum(finite.sum(axis=2), 1)
    b = np.zeros((g, nc))
    live = R > 0
    steps = np.zeros(g, dtype=np.int64)
    going = np.ones(g, dtype=bool)
    # One buffer for the shifted matrix and two for the Newton steps, whatever the step.
    shifted = np.empty(Z.size)
    scratch = np.empty(Z.size)
    positive = np.empty(Z.size, dtype=bool)
    by_row = shifted.reshape(g, nr, nc)
    by_col = shifted.reshape(g, nc, nr)
    while True:
        np.subtract(Z, b[:, None, :], out=by_row)
        W = by_row.reshape(g * nr, nc)
        new_a, above = _thresholds(*_row_sums(W, scratch, positive), R.reshape(-1), a.reshape(-1))
        new_a, above = new_a.reshape(g, nr), above.reshape(g, nr)
        if steps.any():
            moved = np.zeros_like(a)
            np.subtract(new_a, a, out=moved, where=live)
            moved = above * np.abs(moved)
            going &= (np.max(moved, axis=1, initial=0.0) > tolerance) & (
                steps < MAX_PROJECTION_STEPS
            )
        a = np.where(going[:, None], new_a, a)
        if not going.any():
            break
        np.subtract(ZT, a[:, None, :], out=by_col)
        W = by_col.reshape(g * nc, nr)
        new_b, _ = _thresholds(*_row_sums(W, scratch, positive), C.reshape(-1), b.reshape(-1))
        b = np.where(going[:, None], new_b.reshape(g, nc), b)
        steps += going
    x = np.maximum(Z - a[:, :, None] - b[:, None, :], 0.0)
    return x, steps


def _all_lines(t: np.ndarray, which: np.ndarray, n: int) -> np.ndarray:
    """Thresholds of the listed lines, +inf for the others (no cell above)."""
    out = np.full(n, np.inf)
    out[which] = t
    return out


def _project_scattered(z, row, col, R, C, tolerance) -> tuple[np.ndarray, int]:
    """:func:`_project_dense` of one table given by its cells' rows and columns."""
    nr, nc = R.size, C.size
    live = (R[row] > 0) & (C[col] > 0)  # the others are 0 in every table with these margins
    w, r, c = z[live], row[live], col[live]
    per_row = np.maximum(np.bincount(r, minlength=nr), 1)
    a = (np.bincount(r, w, nr) - R) / per_row
    b = np.zeros(nc)

    def line_sums(W, lines, n):
        def sums(t, which):
            d = np.maximum(W - _all_lines(t, which, n)[lines], 0.0)
            return (
                np.bincount(lines[d > 0], minlength=n)[which],
                np.bincount(lines, d, n)[which],
            )

        def cells(which):
            return np.bincount(lines, minlength=n)[which], np.bincount(lines, W, n)[which]

        return sums, cells

    steps = 0
    while steps < MAX_PROJECTION_STEPS:
        steps += 1
        a, _ = _thresholds(*line_sums(w - b[c], r, nr), R, a)
        b, _ = _thresholds(*line_sums(w - a[r], c, nc), C, b)
        x = np.maximum(w - a[r] - b[c], 0.0)
        if np.max(np.abs(np.bincount(r, x, nr) - R), initial=0.0) <= tolerance:
            break
    out = np.zeros(z.size)
    out[live] = x
    return out, steps
