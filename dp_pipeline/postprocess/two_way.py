"""Two-way tables with both margins fixed: a real fit, then controlled rounding.

Cells are indexed by a row and a column (e.g. county x age-sex cell within one
state: the county totals are the row margin, the state's age-sex cells the
column margin). The real fit matches both margins: from a strictly positive
start by iterative proportional fitting (Deming and Stephan 1940; Sinkhorn) when
cells must be non-negative, otherwise by the additive least squares adjustment
x = z + a_row + b_col (closed form). Integers come from controlled rounding
(:mod:`.rounding`): each cell becomes floor(x) or ceil(x) and both margins stay
exact.

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

POSITIVE_START = 1e-3  # counts; the fit's start for cells the noise pushed to or below zero
RAKING_TOLERANCE = 1e-12  # relative to the largest row target, after a column step
MAX_RAKING_STEPS = 20_000


def fit_two_way(
    z: np.ndarray,
    row: np.ndarray,
    col: np.ndarray,
    row_targets: np.ndarray,
    col_targets: np.ndarray,
    *,
    nonnegative: bool,
) -> tuple[np.ndarray, int]:
    """Real x close to z whose row and column sums are the targets; returns (x, steps).

    Requires equal totals of row and column targets within every connected block.
    """
    table = TwoWayTable(z, row, col, row_targets, col_targets)
    ((x, steps),) = fit_two_way_many([table], nonnegative=nonnegative)
    return x, steps


def fit_two_way_many(
    tables: Sequence[TwoWayTable], *, nonnegative: bool
) -> list[tuple[np.ndarray, int]]:
    """:func:`fit_two_way` of each table; small complete tables (every row meets every
    column) with the same number of columns rake together, in one array.

    Bit for bit each table's own result: every table keeps its own sums (a table's
    padding rows are zeros, added last), tolerance and number of steps; a table done
    raking is multiplied by exactly 1.0 until the others are done.
    """
    out: list[tuple[np.ndarray, int] | None] = [None] * len(tables)
    dense: dict[int, list[tuple[int, np.ndarray, np.ndarray, np.ndarray, float]]] = {}
    for k, t in enumerate(tables):
        z = np.asarray(t.values, dtype=np.float64)
        R = np.asarray(t.row_targets, dtype=np.float64)
        C = np.asarray(t.col_targets, dtype=np.float64)
        nr, nc = R.size, C.size
        if not nonnegative:
            out[k] = (_additive_fit(z, t.row, t.col, R, C), 1)
            continue
        x = np.maximum(z, POSITIVE_START)
        tolerance = RAKING_TOLERANCE * max(1.0, float(np.max(R, initial=0.0)))
        if z.size != nr * nc:
            x[(R[t.row] <= 0) | (C[t.col] <= 0)] = 0.0
            out[k] = _rake_scattered(x, t.row, t.col, R, C, tolerance)
            continue
        # Every row meets every column (one block, e.g. the counties of one state by the
        # age-sex cells): rake a dense matrix, axis sums instead of scattered bincounts.
        place = t.row.astype(np.int64) * nc + t.col
        if nr < 2 or nc < 2:  # numpy would sum a single row or column pairwise
            matrix = np.empty((1, nr, nc))
            matrix.reshape(-1)[place] = x
            _zero_empty_margins(matrix[0], R, C)
            matrix, steps = _rake_dense(matrix, R[None], C[None], [tolerance])
            out[k] = (matrix.reshape(-1)[place], int(steps[0]))
            continue
        dense.setdefault(nc, []).append((k, x, place, R, C, tolerance))
    for same_width in dense.values():
        for batch in batches([b[1].size for b in same_width]):
            _rake_together([same_width[i] for i in batch], out)
    return out


def _rake_together(block, out) -> None:
    """Rake complete tables of one width in one array (rows padded with zeros)."""
    nc = block[0][4].size
    rows = max(R.size for _, _, _, R, _, _ in block)
    stack = np.zeros((len(block), rows, nc))
    R_stack = np.zeros((len(block), rows))
    flat = stack.reshape(len(block), -1)
    for g, (_, x, place, R, C, _) in enumerate(block):
        flat[g, place] = x
        _zero_empty_margins(stack[g, : R.size], R, C)
        R_stack[g, : R.size] = R
    C_stack = np.stack([C for *_, C, _ in block])
    stack, steps = _rake_dense(stack, R_stack, C_stack, [b[-1] for b in block])
    for g, (k, _, place, _, _, _) in enumerate(block):
        out[k] = (flat[g, place], int(steps[g]))


def _zero_empty_margins(matrix: np.ndarray, R: np.ndarray, C: np.ndarray) -> None:
    """Cells of a row or column whose target is zero (or less) are zero: raking keeps them."""
    matrix[R <= 0, :] = 0.0
    matrix[:, C <= 0] = 0.0


def _additive_fit(z, row, col, R, C) -> np.ndarray:
    """The least squares x = z + a_row + b_col with the target margins (closed form)."""
    nr, nc = R.size, C.size
    per_row = np.bincount(row, minlength=nr)
    x = z + ((R - np.bincount(row, z, nr)) / np.maximum(per_row, 1))[row]
    per_col = np.bincount(col, minlength=nc)
    x += ((C - np.bincount(col, x, nc)) / np.maximum(per_col, 1))[col]
    return x


def _rake_scattered(x, row, col, R, C, tolerance) -> tuple[np.ndarray, int]:
    nr, nc = R.size, C.size
    steps = 0
    cols_ok = np.max(np.abs(np.bincount(col, x, nc) - C), initial=0.0) <= tolerance
    while steps < MAX_RAKING_STEPS:
        rs = np.bincount(row, x, nr)
        # After a column step the column sums are exact (to rounding), so rows decide.
        if cols_ok and np.max(np.abs(rs - R), initial=0.0) <= tolerance:
            break
        steps += 1
        x *= np.divide(R, rs, out=np.zeros(nr), where=rs > 0)[row]
        cs = np.bincount(col, x, nc)
        x *= np.divide(C, cs, out=np.zeros(nc), where=cs > 0)[col]
        cols_ok = True
    return x, steps


def _rake_dense(x: np.ndarray, R: np.ndarray, C: np.ndarray, tolerance):
    """Rake matrices x[g] (rows x columns) to row targets R[g] and column targets C[g].

    Each matrix stops at its own tolerance; after that it is multiplied by 1.0 (exactly
    itself) while others go on. Returns (x, steps per matrix).
    """
    tolerance = np.asarray(tolerance, dtype=np.float64)
    steps = np.zeros(x.shape[0], dtype=np.int64)
    cols_ok = np.max(np.abs(x.sum(axis=1) - C), axis=1, initial=0.0) <= tolerance
    going = np.ones(x.shape[0], dtype=bool)
    while True:
        going &= steps < MAX_RAKING_STEPS
        if not going.any():
            break
        rs = x.sum(axis=2)
        going &= ~(cols_ok & (np.max(np.abs(rs - R), axis=1, initial=0.0) <= tolerance))
        if not going.any():
            break
        steps += going
        factor = np.divide(R, rs, out=np.zeros_like(R), where=rs > 0)
        factor[~going] = 1.0
        x *= factor[:, :, None]
        cs = x.sum(axis=1)
        factor = np.divide(C, cs, out=np.zeros_like(C), where=cs > 0)
        factor[~going] = 1.0
        x *= factor[:, None, :]
        cols_ok[:] = True
    return x, steps
