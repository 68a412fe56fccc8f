"""Two-way tables with both margins fixed: a real fit, then controlled rounding.

Cells are indexed by a row and a column (e.g. county x age-sex cell within one
state: the county totals are the row margin, the state's age-sex cells the
column margin). The real fit matches both margins: from a strictly positive
start by iterative proportional fitting (Deming and Stephan 1940; Sinkhorn) when
cells must be non-negative, otherwise by the additive least squares adjustment
x = z + a_row + b_col (closed form). Integers come from controlled rounding
(Cox 1987, "A constructive procedure for unbiased controlled rounding"): each
cell becomes floor(x) or ceil(x) and both margins stay exact. Such a rounding
exists for any real table with integer margins (the transportation polytope is
integral); it is found as an integer maximum flow source -> row -> column -> sink
(``scipy.sparse.csgraph.maximum_flow``, Dinic's algorithm), each row -> column
edge carrying the cell's choice of ceil over floor.

Pure post-processing of noisy values; deterministic.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from ..errors import InternalError

__all__ = ["controlled_round", "fit_two_way"]

POSITIVE_START = 1e-3  # counts; the fit's start for cells the noise pushed to or below zero
RAKING_TOLERANCE = 1e-12  # relative to the largest row target, after a column step
MAX_RAKING_STEPS = 20_000
SNAP = 1e-7  # an estimate this close to an integer is that integer


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
    z = np.asarray(z, dtype=np.float64)
    R = np.asarray(row_targets, dtype=np.float64)
    C = np.asarray(col_targets, dtype=np.float64)
    nr, nc = R.size, C.size
    if not nonnegative:
        per_row = np.bincount(row, minlength=nr)
        x = z + ((R - np.bincount(row, z, nr)) / np.maximum(per_row, 1))[row]
        per_col = np.bincount(col, minlength=nc)
        x += ((C - np.bincount(col, x, nc)) / np.maximum(per_col, 1))[col]
        return x, 1
    x = np.maximum(z, POSITIVE_START)
    x[(R[row] <= 0) | (C[col] <= 0)] = 0.0
    tolerance = RAKING_TOLERANCE * max(1.0, float(np.max(R, initial=0.0)))
    if z.size == nr * nc:
        # Every row meets every column (one block, e.g. the counties of one state by the
        # age-sex cells): rake a dense matrix, axis sums instead of scattered bincounts.
        place = row.astype(np.int64) * nc + col
        dense = np.empty(nr * nc)
        dense[place] = x
        dense, steps = _rake_dense(dense.reshape(nr, nc), R, C, tolerance)
        return dense.reshape(-1)[place], steps
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


def _rake_dense(x: np.ndarray, R: np.ndarray, C: np.ndarray, tolerance: float):
    steps = 0
    cols_ok = np.max(np.abs(x.sum(axis=0) - C), initial=0.0) <= tolerance
    while steps < MAX_RAKING_STEPS:
        rs = x.sum(axis=1)
        if cols_ok and np.max(np.abs(rs - R), initial=0.0) <= tolerance:
            break
        steps += 1
        x *= np.divide(R, rs, out=np.zeros_like(R), where=rs > 0)[:, None]
        cs = x.sum(axis=0)
        x *= np.divide(C, cs, out=np.zeros_like(C), where=cs > 0)[None, :]
        cols_ok = True
    return x, steps


def _flow(low, cap, row, col, r_need, c_need):
    nr, nc = r_need.size, c_need.size
    src, sink = 0, nr + nc + 1
    live = cap > 0
    heads = np.concatenate([np.zeros(nr, np.int64), 1 + row[live], 1 + nr + np.arange(nc)])
    tails = np.concatenate([1 + np.arange(nr), 1 + nr + col[live], np.full(nc, sink)])
    caps = np.concatenate([r_need, cap[live], c_need]).astype(np.int32)
    keep = caps > 0
    graph = sp.csr_matrix(
        (caps[keep], (heads[keep], tails[keep])), shape=(sink + 1, sink + 1), dtype=np.int32
    )
    graph.sort_indices()
    result = maximum_flow(graph, src, sink, method="dinic")
    out = low.copy()
    if result.flow_value != int(r_need.sum()):
        return None
    flow = result.flow.tocoo()
    nodes = np.int64(sink + 1)
    keys = flow.row.astype(np.int64) * nodes + flow.col
    order = np.argsort(keys, kind="stable")
    keys, data = keys[order], flow.data[order]
    wanted = (1 + row[live]) * nodes + (1 + nr + col[live])
    at = np.minimum(np.searchsorted(keys, wanted), max(keys.size - 1, 0))
    found = (keys.size > 0) & (keys[at] == wanted) if keys.size else np.zeros(wanted.size, bool)
    out[live] += np.where(found, data[at] if keys.size else 0, 0).astype(np.int64)
    return out


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
    R = np.asarray(row_targets, dtype=np.int64)
    C = np.asarray(col_targets, dtype=np.int64)
    x = np.maximum(x, 0.0) if nonnegative else np.asarray(x, dtype=np.float64)
    nearest = np.rint(x)
    snapped = np.abs(x - nearest) <= SNAP
    # First the strict box (near-integers fixed, others floor or ceil); if float error in
    # the fit made it infeasible, near-integers may also move by one either way.
    boxes = [
        (np.where(snapped, nearest, np.floor(x)), np.where(snapped, nearest, np.ceil(x))),
        (np.floor(x - 2 * SNAP), np.ceil(x + 2 * SNAP)),
    ]
    for low_f, high_f in boxes:
        if nonnegative:
            low_f = np.maximum(low_f, 0.0)
        low = low_f.astype(np.int64)
        cap = (high_f - low_f).astype(np.int64)
        r_need = R - np.bincount(row, low, R.size).astype(np.int64)
        c_need = C - np.bincount(col, low, C.size).astype(np.int64)
        if np.any(r_need < 0) or np.any(c_need < 0) or r_need.sum() != c_need.sum():
            continue
        out = _flow(low, cap, row, col, r_need, c_need)
        if out is not None:
            break
    else:
        raise InternalError("controlled rounding found no rounding matching both margins")
    if not (
        np.array_equal(np.bincount(row, out, R.size).astype(np.int64), R)
        and np.array_equal(np.bincount(col, out, C.size).astype(np.int64), C)
    ):
        raise InternalError("controlled rounding: a margin does not match its target")
    return out
