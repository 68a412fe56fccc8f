"""Weighted least squares consistency of overlapping noisy count tables.

Minimises sum_t sum_cells (z - y)^2 / v_t subject to C z = 0, where each block of
rows of C says that two tables agree on one common margin. With V = diag(v) the
solution is z = y - V C^T lambda, where lambda solves the normal equations
(C V C^T) lambda = C y (Hay, Rastogi, Miklau and Suciu 2010, "Boosting the
accuracy of differentially private histograms through consistency",
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

__all__ = ["ConstraintSystem", "WlsResult", "constraint_system", "shape_key", "solve_wls"]

DEFAULT_TOLERANCE = 1e-7  # counts; far below the 1/2 that could move a rounding decision
MAX_ITERATIONS = 5000


@dataclass(frozen=True)
class WlsResult:
    estimates: list[np.ndarray]  # float64, one per table, same layout as the input
    iterations: int
    max_residual: float  # max |C z| over all constraint cells, in counts


def _transposed_constraints(
    structures: Sequence[TableStructure],
    constraints: Sequence[Constraint],
    hierarchy: Hierarchy | None,
) -> sp.csr_matrix:
    """C^T as CSR (one row per cell, one column per constraint cell), built directly.

    Each cell of a table has one +-1 in every constraint the table is part of, so
    every table's block has a fixed number of entries per row and needs no sort.
    """
    starts = np.cumsum(
        [0] + [margin_size(c.margin, list(structures), hierarchy) for c in constraints]
    )
    # 32-bit indices when they fit: half the memory traffic of every mat-vec.
    nnz = sum(s.cells * sum(t in (c.a, c.b) for c in constraints) for t, s in enumerate(structures))
    index_type = np.int32 if max(int(starts[-1]), nnz) < 2**31 - 1 else np.int64
    # One CSR built from concatenated rows (sp.vstack copies through COO, 5x slower).
    indices_parts, sign_parts, counts = [], [], []
    for t, s in enumerate(structures):
        mine = [ci for ci, c in enumerate(constraints) if t in (c.a, c.b)]
        indices = np.empty((s.cells, len(mine)), dtype=index_type)
        signs = np.empty((s.cells, len(mine)))
        for j, ci in enumerate(mine):
            indices[:, j] = margin_index(s, constraints[ci].margin, hierarchy) + starts[ci]
            # +1 in the first table of a constraint, -1 in the second.
            signs[:, j] = 1.0 if constraints[ci].a == t else -1.0
        indices_parts.append(indices.reshape(-1))
        sign_parts.append(signs.reshape(-1))
        counts.append(np.full(s.cells, len(mine), dtype=np.int64))
    indptr = np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(index_type)
    signs = np.concatenate(sign_parts)
    return sp.csr_matrix(
        (signs, np.concatenate(indices_parts), indptr),
        shape=(int(indptr.size - 1), int(starts[-1])),
    )


@dataclass(frozen=True)
class ConstraintSystem:
    """C^T and C (CSR) with the Jacobi preconditioner: what the solve needs besides y."""

    CT: sp.csr_matrix
    C: sp.csr_matrix
    v: np.ndarray  # per-cell variance
    inv_diag: np.ndarray


def shape_key(structures: Sequence[TableStructure], hierarchy: Hierarchy | None) -> tuple:
    """A key equal for two problems exactly when their constraint systems are equal.

    The system depends only on the tables' shapes and the hierarchy's parent maps
    (with the same constraints and variances), so states of equal shape share one.
    """
    shapes = tuple((s.name, s.keys, s.sizes, s.level, s.geo_axis) for s in structures)
    if hierarchy is None:
        return shapes, None
    parents = tuple(np.asarray(a, dtype=np.int64).tobytes() for a in hierarchy.parents)
    return shapes, (hierarchy.levels, hierarchy.sizes, parents)


def constraint_system(
    structures: Sequence[TableStructure],
    variances: Sequence[float],
    constraints: Sequence[Constraint],
    hierarchy: Hierarchy | None,
) -> ConstraintSystem:
    """The constraint matrices and preconditioner of one least squares problem."""
    sizes = [s.cells for s in structures]
    v = np.concatenate([np.full(n, float(w)) for n, w in zip(sizes, variances, strict=True)])
    CT = _transposed_constraints(structures, constraints, hierarchy)
    # C as CSR too: its mat-vec gathers per row (4x faster than the CSC view's scatter)
    # and adds each row's terms in the same column order, so the sums are the same.
    C = CT.T.tocsr()
    # diag(C V C^T): C has one +-1 per (row, cell), so this is the variance-weighted count.
    diag = abs(C) @ v
    inv_diag = np.where(diag > 0, 1.0 / np.where(diag > 0, diag, 1.0), 0.0)
    return ConstraintSystem(CT, C, v, inv_diag)


def solve_wls(
    structures: Sequence[TableStructure],
    values: Sequence[np.ndarray],
    variances: Sequence[float],
    constraints: Sequence[Constraint],
    hierarchy: Hierarchy | None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    systems: dict | None = None,
) -> WlsResult:
    """Weighted least squares estimates agreeing on every constrained margin (to ``tolerance``).

    ``systems``, when given, caches the constraint system by `shape_key` across
    calls (for one set of constraints and variances): a cached system is equal to
    a fresh one entry for entry, so the estimates are the same bit for bit.
    """
    sizes = [s.cells for s in structures]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    y = np.concatenate([np.asarray(v, dtype=np.float64) for v in values])
    if not constraints:
        return WlsResult([y[offsets[i] : offsets[i + 1]].copy() for i in range(len(sizes))], 0, 0.0)
    if systems is None:
        system = constraint_system(structures, variances, constraints, hierarchy)
    else:
        key = shape_key(structures, hierarchy)
        if key not in systems:
            systems[key] = constraint_system(structures, variances, constraints, hierarchy)
        system = systems[key]
    CT, C, v, inv_diag = system.CT, system.C, system.v, system.inv_diag

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
