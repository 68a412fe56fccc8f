"""National tables in the per-group least squares, exactly: a Schur complement over their margins.

Tables keyed by the hierarchy split into independent groups, one per top-level
position (:mod:`.groups`); a national table (no hierarchy key) shares margins
with every group. Write the global least squares of :mod:`.wls` over *blocks*
b, the groups and one block holding the national tables, as

    minimise    sum_b (x_b - y_b)^T V_b^-1 (x_b - y_b)
    subject to  A_b x_b = 0 for every block,    sum_b M_b x_b = 0,

where A_b holds the plan's constraints between two tables of block b, and the
signed map M_b takes block b's cells to the K *coupling cells*: the rows of the
plan's constraints between a national table and a grouped one (its margin is
national, so every group adds to each row). For the demo plus a national
age x sex table, K = 232.

Theorem (exact decomposition). Let P_b = I - V_b A_b^T (A_b V_b A_b^T)^+ A_b
(block b's own least squares: x̂_b = P_b y_b), Σ_b = P_b V_b (the covariance of
x̂_b when y_b has covariance V_b), ẑ_b = M_b x̂_b and C_b = M_b Σ_b M_b^T (K x K).
If μ solves (sum_b C_b) μ = sum_b ẑ_b, then x_b = P_b (y_b - V_b M_b^T μ)
= x̂_b - Σ_b M_b^T μ is the global least squares solution.

Proof. The objective is strictly convex (V_b > 0) and the constraints are
linear and feasible, so the minimiser x* is unique, and x is the minimiser
exactly when, for some multipliers α_b and μ (Karush-Kuhn-Tucker),
(1) V_b^-1 (x_b - y_b) + A_b^T α_b + M_b^T μ = 0, (2) A_b x_b = 0 and
(3) sum_b M_b x_b = 0. For a fixed μ, (1)-(2) are the optimality conditions of
block b's own least squares with data y_b - V_b M_b^T μ, whose unique solution
is P_b (y_b - V_b M_b^T μ) = x̂_b - Σ_b M_b^T μ. Substituted into (3) they give
sum_b ẑ_b - (sum_b C_b) μ = 0. The multiplier of x* solves it, so it is
consistent, and any solution μ makes (1)-(3) hold, so gives x*. ∎
Each block's contribution z_b = M_b x_b = ẑ_b - C_b μ is then fixed and the
block is solved alone again: the groups never meet, the driver solves one K x K
system from the blocks' (ẑ_b, C_b).

Numerics: A_b V_b A_b^T is sparse, positive semi-definite and may be singular
(a margin implied by two others, e.g. three tables agreeing pairwise). It is
factorized once per block (SuperLU) with a relative 2^-40 added to its diagonal,
and every solve is refined against the matrix itself until the residual meets
the tolerance (iterated regularisation converges on consistent systems). The
K right-hand sides of Σ_b M_b^T are one multi-column solve with that factor,
not K conjugate gradient runs. All steps are sparse products and SuperLU
solves in a fixed order, the same functions on every engine: equal inputs give
equal bits with the same libraries (tests/unit/postprocess/test_postprocess_spark.py checks the
Spark path's floats against the driver's).

Pure post-processing of noisy values and public facts; deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from ..errors import InternalError
from .plan import Constraint, Plan
from .structure import (
    TOP,
    Hierarchy,
    TableStructure,
    common_margin,
    describe_margin,
    margin_index,
    margin_size,
)
from .wls import DEFAULT_TOLERANCE, constraint_system, shape_key

__all__ = [
    "MAX_COVARIANCE_ENTRIES",
    "BlockSystem",
    "Coupling",
    "block_estimate",
    "block_system",
    "coupled_refusal",
    "coupling_multiplier",
    "coupling_of",
    "verify_national",
]

REGULARISATION = 2.0**-40  # relative to the diagonal; removed again by the refinement
RELATIVE_TOLERANCE = 2.0**-36  # of the covariance solves, relative to the right-hand side
MAX_REFINEMENTS = 20
# One K x K covariance per block travels to the driver (a Spark task's part): at most
# 2**26 float64 entries in all (512 MiB), i.e. K <= 1,136 coupling cells for 51 states.
MAX_COVARIANCE_ENTRIES = 2**26


@dataclass(frozen=True)
class Coupling:
    """The constraints between a national and a grouped table, as K coupling cells."""

    national: tuple[int, ...]  # plan positions of the tables without a hierarchy key
    links: tuple[Constraint, ...]
    starts: tuple[int, ...]  # each link's first coupling cell
    size: int  # K

    def blocks(self, hierarchy: Hierarchy) -> int:
        """The groups and the national block."""
        return hierarchy.sizes[TOP] + 1


def coupling_of(p: Plan, hierarchy: Hierarchy | None) -> Coupling | None:
    """The coupling of a plan with national and grouped tables; None without national ones."""
    national = tuple(t for t, s in enumerate(p.structures) if s.level < TOP)
    if hierarchy is None or not national or len(national) == len(p.structures):
        return None
    links = tuple(
        c
        for c in p.constraints
        if (p.structures[c.a].level < TOP) != (p.structures[c.b].level < TOP)
    )
    sizes = [margin_size(c.margin, list(p.structures), hierarchy) for c in links]
    starts = tuple(int(s) for s in np.cumsum([0, *sizes])[:-1])
    return Coupling(national, links, starts, int(sum(sizes)))


def coupled_refusal(p: Plan, hierarchy: Hierarchy | None) -> str | None:
    """Why the national tables of ``p`` cannot be solved per group, or None when they can.

    Needs the shapes only, so it runs before any budget is spent.
    """
    national = [s for s in p.structures if s.level < TOP]
    if hierarchy is None or len(national) == len(p.structures):
        return "no combined table is keyed by a hierarchy level, so there are no groups"
    for tp in p.order:
        s = p.structures[tp.table]
        for fixed in tp.takes:
            if s.level > TOP and fixed.margin.level < TOP and fixed.source is not None:
                return (
                    f"table {s.name!r} (by {hierarchy.levels[s.level]}) takes the margin "
                    f"{describe_margin(fixed.margin, hierarchy)} from the national table "
                    f"{p.structures[fixed.source].name!r}, so its top-down step couples every "
                    f"{hierarchy.levels[TOP]}; combine a table by {hierarchy.levels[TOP]} with "
                    "the same keys, or leave the national table out"
                )
    coupling = coupling_of(p, hierarchy)
    entries = coupling.blocks(hierarchy) * coupling.size**2
    if entries > MAX_COVARIANCE_ENTRIES:
        names = ", ".join(repr(s.name) for s in national)
        return (
            f"the national table(s) {names} share {coupling.size:,} margin cells with the "
            f"grouped tables; per-group post-processing sends one {coupling.size:,} x "
            f"{coupling.size:,} covariance per {hierarchy.levels[TOP]} and the national "
            f"block ({coupling.blocks(hierarchy)} blocks, {entries:,} entries) to the driver, "
            f"above its limit of {MAX_COVARIANCE_ENTRIES:,}; use national tables with fewer "
            "cells"
        )
    return None


class _Factor:
    """A regularised SuperLU factor of a PSD matrix, each solve refined against the matrix."""

    def __init__(self, matrix: sp.csr_matrix) -> None:
        diagonal = matrix.diagonal()
        shift = REGULARISATION * np.where(diagonal > 0, diagonal, 1.0)
        self.matrix = matrix
        self.lu = splu((matrix + sp.diags(shift)).tocsc(), permc_spec="COLAMD")

    def solve(self, rhs: np.ndarray, tolerance: float) -> tuple[np.ndarray, int, float]:
        """x with max |rhs - matrix x| <= tolerance; the refinement steps and that residual."""
        x = self.lu.solve(rhs)
        for step in range(1, MAX_REFINEMENTS + 1):
            residual = rhs - self.matrix @ x
            largest = float(np.max(np.abs(residual))) if residual.size else 0.0
            if largest <= tolerance:
                return x, step, largest
            x = x + self.lu.solve(residual)
        raise InternalError(
            f"coupled least squares: a factorized solve kept a residual of {largest:.3g} after "
            f"{MAX_REFINEMENTS} refinements (tolerance {tolerance:.3g})"
        )


@dataclass(frozen=True)
class BlockSystem:
    """What one block's solves need besides its data, and its covariances (no data in them).

    ``rows`` (q x n) picks the block's summary rows: cells of its top-level or national
    tables, totals of its finer tables. ``covariance`` is C_b = M_b Σ_b M_b^T and
    ``sensitivity`` is rows Σ_b M_b^T (q x K): a summary row moves by -sensitivity μ.
    """

    v: np.ndarray
    A: sp.csr_matrix | None  # the block's own constraints (r x n); None without any
    AT: sp.csr_matrix | None
    factor: _Factor | None
    M: sp.csr_matrix  # K x n, signed
    MT: sp.csr_matrix
    rows: sp.csr_matrix
    covariance: np.ndarray
    sensitivity: np.ndarray
    refinements: int


def _coupling_map(
    structures: Sequence[TableStructure],
    tables: Sequence[int],
    coupling: Coupling,
    hierarchy: Hierarchy | None,
) -> sp.csr_matrix:
    """M_b: +1 (the constraint's first table) or -1 (its second) from each cell to its row."""
    offsets = np.cumsum([0, *(s.cells for s in structures)])
    local = {t: k for k, t in enumerate(tables)}
    rows, cols, signs = [], [], []
    for link, start in zip(coupling.links, coupling.starts, strict=True):
        for t, sign in ((link.a, 1.0), (link.b, -1.0)):
            if t in local:
                k = local[t]
                rows.append(start + margin_index(structures[k], link.margin, hierarchy))
                cols.append(np.arange(offsets[k], offsets[k + 1], dtype=np.int64))
                signs.append(np.full(structures[k].cells, sign))
    n = int(offsets[-1])
    if not rows:
        return sp.csr_matrix((coupling.size, n))
    return sp.csr_matrix(
        (np.concatenate(signs), (np.concatenate(rows), np.concatenate(cols))),
        shape=(coupling.size, n),
    )


def _summary_rows(structures: Sequence[TableStructure]) -> sp.csr_matrix:
    """Identity rows for the cells of top-level and national tables, one sum row per finer one."""
    offsets = np.cumsum([0, *(s.cells for s in structures)])
    rows, cols, q = [], [], 0
    for k, s in enumerate(structures):
        cells = np.arange(offsets[k], offsets[k + 1], dtype=np.int64)
        rows.append(q + (np.arange(s.cells) if s.level <= TOP else np.zeros(s.cells, np.int64)))
        cols.append(cells)
        q += s.cells if s.level <= TOP else 1
    data = np.ones(int(offsets[-1]))
    return sp.csr_matrix(
        (data, (np.concatenate(rows), np.concatenate(cols))), (q, int(offsets[-1]))
    )


def block_system(
    structures: Sequence[TableStructure],
    tables: Sequence[int],
    variances: Sequence,
    p: Plan,
    coupling: Coupling,
    hierarchy: Hierarchy | None,
    systems: dict | None = None,
    covariances: bool = True,
) -> BlockSystem:
    """Block ``tables`` (plan positions; ``structures`` their shapes inside the block).

    ``systems`` caches by shape (blocks of equal shape have equal systems, bit for bit).
    Without ``covariances`` (a second pass) the covariance and sensitivity are empty.
    """
    key = (shape_key(structures, hierarchy), tuple(tables)) if systems is not None else None
    if key is not None and key in systems and (systems[key].covariance.size or not covariances):
        return systems[key]
    local = {t: k for k, t in enumerate(tables)}
    own = [
        Constraint(local[c.a], local[c.b], c.margin)
        for c in p.constraints
        if c.a in local and c.b in local
    ]
    block_variances = [variances[t] for t in tables]
    M = _coupling_map(structures, tables, coupling, hierarchy)
    rows = _summary_rows(structures)
    v = np.concatenate(
        [np.full(s.cells, float(w)) for s, w in zip(structures, block_variances, strict=True)]
    )
    H = (M @ sp.diags(v)).T.tocsr()  # V_b M_b^T, n x K
    MH, RH = (M @ H).toarray(), (rows @ H).toarray()
    if not covariances:
        MH, RH = np.zeros((0, 0)), np.zeros((0, 0))
    A = AT = factor = None
    refinements = 0
    if own:
        system = constraint_system(structures, block_variances, own, hierarchy)
        A, AT = system.C, system.CT
        factor = _Factor((A @ sp.diags(v) @ AT).tocsr())
    if own and covariances:
        AH = (A @ H).toarray()
        scale = float(np.max(np.abs(AH))) if AH.size else 0.0
        lam, refinements, _ = factor.solve(AH, RELATIVE_TOLERANCE * max(scale, 1.0))
        MH = MH - (M @ sp.diags(v) @ AT) @ lam
        RH = RH - (rows @ sp.diags(v) @ AT) @ lam
    covariance = (MH + MH.T) / 2  # symmetric in exact arithmetic
    out = BlockSystem(v, A, AT, factor, M, M.T.tocsr(), rows, covariance, RH, refinements)
    if key is not None:
        systems[key] = out
    return out


def block_estimate(
    system: BlockSystem, y: np.ndarray, multiplier: np.ndarray | None = None
) -> tuple[np.ndarray, int, float]:
    """P_b (y - V_b M_b^T μ): the block's least squares, its coupling contribution fixed by μ.

    Without ``multiplier``, the block's own estimate x̂_b. Returns the estimate, the
    refinement steps and the largest margin disagreement inside the block (counts).
    """
    y = np.asarray(y, dtype=np.float64)
    if multiplier is not None:
        y = y - system.v * (system.MT @ multiplier)
    if system.factor is None:
        return y, 0, 0.0
    lam, steps, residual = system.factor.solve(system.A @ y, DEFAULT_TOLERANCE / 4)
    estimate = y - system.v * (system.AT @ lam)
    residual = float(np.max(np.abs(system.A @ estimate)))
    if not residual <= DEFAULT_TOLERANCE:
        raise InternalError(
            f"coupled least squares: a block's margins disagree by {residual:.3g} "
            f"(tolerance {DEFAULT_TOLERANCE:g})"
        )
    return estimate, steps, residual


def coupling_multiplier(
    covariances: Sequence[np.ndarray], contributions: Sequence[np.ndarray]
) -> np.ndarray:
    """μ solving (sum_b C_b) μ = sum_b ẑ_b, the blocks summed in the order given."""
    total = np.zeros_like(covariances[0])
    rhs = np.zeros_like(contributions[0])
    for covariance, contribution in zip(covariances, contributions, strict=True):
        total = total + covariance
        rhs = rhs + contribution
    if rhs.size == 0:
        return rhs
    # The residual of this system is the national margins' disagreement, in counts.
    mu, _, _ = _Factor(sp.csr_matrix(total)).solve(rhs, DEFAULT_TOLERANCE / 4)
    return mu


def verify_national(
    p: Plan, coupling: Coupling, fixed: dict[int, np.ndarray], hierarchy: Hierarchy
) -> None:
    """Every national table agrees exactly with every top-level table (``fixed``: full tables).

    The groups' own margins are checked per group (:func:`.groups.verify_group`); these
    join a national table and a top-level table, both fixed by the top step, and the
    finer tables agree with them through the top-level tables.
    """
    structures = list(p.structures)
    for n in coupling.national:
        for t in fixed:
            if t == n or structures[t].level > TOP:
                continue
            a, b = structures[n], structures[t]
            margin = common_margin(a, b)
            size = margin_size(margin, structures, hierarchy)
            ma = np.bincount(margin_index(a, margin, hierarchy), fixed[n].astype(float), size)
            mb = np.bincount(margin_index(b, margin, hierarchy), fixed[t].astype(float), size)
            if not np.array_equal(ma, mb):
                raise InternalError(f"tables {a.name!r} and {b.name!r} disagree on their margin")
