"""Weighted least squares consistency of overlapping noisy count tables.

Minimises sum_t sum_cells (z - y)^2 / v_t subject to C z = 0, where each block of
rows of C says that two tables agree on one common margin. With V = diag(v) the
solution is z = y - V C^T lambda, where lambda solves the normal equations
(C V C^T) lambda = C y (Hay, Rastogi, Miklau and Suciu 2010, "Boosting the
accuracy of differentially private histograms through consistency", section 4,
generalised from a tree of equal variances to arbitrary margins with unequal
public variances). The system is positive semi-definite and consistent; it is
solved by Jacobi-preconditioned conjugate gradients in constraint space. Null
space components of lambda do not change z, and the residual of the normal
equations is exactly the constraint violation C z, so the stopping rule bounds
the disagreement of every margin cell directly (absolute tolerance, in counts).

Pure post-processing: reads only noisy values and public variances, costs no
privacy. Deterministic: fixed operation order, numpy pairwise sums (no threaded
BLAS reductions), so equal inputs give equal outputs bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import InternalError
from .plan import Constraint
from .structure import Hierarchy, TableStructure, margin_index, margin_size

__all__ = ["WlsResult", "solve_wls"]

DEFAULT_TOLERANCE = 1e-7  # counts; far below the 1/2 that could move a rounding decision
MAX_ITERATIONS = 5000


@dataclass(frozen=True)
class WlsResult:
    estimates: list[np.ndarray]  # float64, one per table, same layout as the input
    iterations: int
    max_residual: float  # max |C z| over all constraint cells, in counts


def _constraint_matrix(
    structures: Sequence[TableStructure],
    constraints: Sequence[Constraint],
    hierarchy: Hierarchy | None,
    offsets: np.ndarray,
) -> sp.csr_matrix:
    rows, cols, vals = [], [], []
    row0 = 0
    for c in constraints:
        size = margin_size(c.margin, list(structures), hierarchy)
        for t, sign in ((c.a, 1.0), (c.b, -1.0)):
            idx = margin_index(structures[t], c.margin, hierarchy)
            rows.append(idx + row0)
            cols.append(np.arange(idx.size, dtype=np.int64) + offsets[t])
            vals.append(np.full(idx.size, sign))
        row0 += size
    n = int(offsets[-1])
    if not constraints:
        return sp.csr_matrix((0, n))
    return sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row0, n)
    )


def solve_wls(
    structures: Sequence[TableStructure],
    values: Sequence[np.ndarray],
    variances: Sequence[float],
    constraints: Sequence[Constraint],
    hierarchy: Hierarchy | None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
) -> WlsResult:
    """Weighted least squares estimates agreeing on every constrained margin (to ``tolerance``)."""
    sizes = [s.cells for s in structures]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    y = np.concatenate([np.asarray(v, dtype=np.float64) for v in values])
    v = np.concatenate([np.full(n, float(w)) for n, w in zip(sizes, variances, strict=True)])
    C = _constraint_matrix(structures, constraints, hierarchy, offsets)
    CT = C.T.tocsr()
    if C.shape[0] == 0:
        return WlsResult([y[offsets[i] : offsets[i + 1]].copy() for i in range(len(sizes))], 0, 0.0)
    # diag(C V C^T): C has one +-1 per (row, cell), so this is the variance-weighted count.
    diag = (C.multiply(C)) @ v
    inv_diag = np.where(diag > 0, 1.0 / np.where(diag > 0, diag, 1.0), 0.0)

    def normal(p: np.ndarray) -> np.ndarray:
        return C @ (v * (CT @ p))

    lam = np.zeros(C.shape[0])
    r = C @ y
    iterations = 0
    if np.max(np.abs(r)) > tolerance:
        z = inv_diag * r
        p = z.copy()
        rz = float(np.sum(r * z))
        while iterations < MAX_ITERATIONS:
            iterations += 1
            Ap = normal(p)
            pAp = float(np.sum(p * Ap))
            if pAp <= 0:
                break
            alpha = rz / pAp
            lam += alpha * p
            r -= alpha * Ap
            if iterations % 50 == 0:
                r = C @ (y - v * (CT @ lam))  # refresh the recursive residual against drift
            if np.max(np.abs(r)) <= tolerance / 4:
                break
            z = inv_diag * r
            rz_new = float(np.sum(r * z))
            p = z + (rz_new / rz) * p
            rz = rz_new
    est = y - v * (CT @ lam)
    residual = float(np.max(np.abs(C @ est)))
    if not residual <= tolerance:
        raise InternalError(
            f"weighted least squares did not converge: max margin disagreement {residual:.3g} "
            f"after {iterations} iterations (tolerance {tolerance:g})"
        )
    return WlsResult(
        [est[offsets[i] : offsets[i + 1]] for i in range(len(sizes))], iterations, residual
    )
