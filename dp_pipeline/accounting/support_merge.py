"""The merges of `support_composition`: exact-support pmfs on an integer lattice, composed
by direct convolution under a work budget.

A `Pmf` holds masses at int64 positions (in units of the composition's γ) with their
error budget: each mass within ``relative`` of its exact value, plus ``absolute`` in total
(underflow), and ``dropped`` P-mass not represented. `merge` convolves two of them and
`self_power` one with itself; each result carries the budget of `support_composition`'s module
docstring (a product is one rounding, the k products landing on one position are summed
non-negative terms: R_a + R_b + (k + 1)·u, rounded up), so every bound built on them is a
rigorous bracket. A merge over the caps raises `TooLargeError` before it allocates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dp_pipeline.errors import DPError

__all__ = ["Budget", "Pmf", "TooLargeError", "errors", "merge", "self_power"]

_U = 2.0**-53
_TINY = 2.0**-1074
_MAX_PRODUCT = 1 << 23  # products formed by one merge (time: about 0.2 s at most)
_MAX_POINTS = 1 << 20  # distinct losses kept after a merge
_RESIDUE_POINTS = 1 << 14  # points of the side looped over in a merge by residues
_MAX_POSITION = 1 << 62


@dataclass(frozen=True)
class Pmf:
    positions: np.ndarray  # int64, increasing, in units of γ
    masses: np.ndarray
    relative: float  # each mass within this relative error of its exact value
    absolute: float  # plus at most this in total (underflow)
    dropped: float  # P-mass not represented (its loss unknown)


class TooLargeError(DPError):
    pass


class Budget:
    def __init__(self, prune: float, max_work: int, sparse_weight: int = 1) -> None:
        self.work = 0
        self.prune = prune  # merged masses below this are dropped
        self.max_work = max_work
        self.sparse_weight = sparse_weight  # a product merged by sorting counts this many

    def charge(self, products: int) -> None:
        self.work += products
        if products > _MAX_PRODUCT or self.work > self.max_work:
            raise TooLargeError


def merge(a: Pmf, b: Pmf, budget: Budget) -> Pmf:
    low = int(a.positions[0]) + int(b.positions[0])
    high = int(a.positions[-1]) + int(b.positions[-1])
    if max(abs(low), abs(high)) >= _MAX_POSITION:
        raise TooLargeError
    # blocks of one side shifted by the other's positions that do not overlap (a wide
    # lattice beside a fine one): the outer sum is already sorted, with no repeats
    if (
        len(a.masses) > 1
        and len(b.masses) > 1
        and np.min(np.diff(b.positions)) > int(a.positions[-1]) - int(a.positions[0])
    ):
        a, b = b, a
    separate = len(a.masses) == 1 or (
        np.min(np.diff(a.positions)) > int(b.positions[-1]) - int(b.positions[0])
    )
    # every merged position is low + g·j (g the gcd of both sides' gaps): binned in units
    # of g, a sum of lattices with a common step is a dense merge, not a sort
    g = math.gcd(_step(a.positions), _step(b.positions)) or 1
    span = (high - low) // g + 1
    count = len(a.masses) * len(b.masses)
    sparse = not separate and span > 4 * count + 1024
    budget.charge(count * (budget.sparse_weight if sparse else 1))
    a_span = (int(a.positions[-1]) - int(a.positions[0])) // g + 1
    b_span = (int(b.positions[-1]) - int(b.positions[0])) // g + 1
    if not separate and not sparse and a_span * b_span <= 4 * count + 1024:
        # both sides laid out densely in units of g (zeros between): their direct
        # convolution adds the same non-zero products per position as the binning
        # (a zero product adds nothing, exactly), without the count-long outer arrays
        sums = np.convolve(_dense(a, g, a_span), _dense(b, g, b_span))
        kept = np.flatnonzero(sums)
        merged_positions = kept.astype(np.int64) * g + low
        merged = sums[kept]
        return _merged(a, b, merged_positions, merged, count, span, budget)
    if not separate:
        by_residue = _residue_merge(a, b, count) or _residue_merge(b, a, count)
        if by_residue is not None:
            return _merged(a, b, *by_residue, count, span, budget)
    positions = np.add.outer(a.positions, b.positions).ravel()
    products = np.multiply.outer(a.masses, b.masses).ravel()
    if separate:
        merged_positions, merged = positions, products
    elif not sparse:
        sums = np.bincount((positions - low) // g, weights=products, minlength=span)
        kept = np.flatnonzero(sums)
        merged_positions = kept.astype(np.int64) * g + low
        merged = sums[kept]
    else:
        merged_positions, inverse = np.unique(positions, return_inverse=True)
        merged = np.bincount(inverse.ravel(), weights=products)
    return _merged(a, b, merged_positions, merged, count, span, budget)


def _residue_merge(x: Pmf, y: Pmf, count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The merge of ``x``, dense on the lattice of its own gaps' gcd s, with ``y``, whose
    positions are y_0 + r + s·q (r in [0, s)): every sum lands on row k = i + q of the
    column of its residue r, so each point of ``y`` adds its mass times the dense ``x``
    into one row span of that column, in order (a zero product adds nothing, exactly);
    read row by row, the positions come out increasing. None where ``x`` is not dense
    (over 4 slots per point), the rows x columns over 4 per product, or ``y`` too long
    for its loop. (positions, masses)."""
    s = _step(x.positions)
    if s == 0 or len(y.masses) > _RESIDUE_POINTS:
        return None
    x_first, y_first = int(x.positions[0]), int(y.positions[0])
    x_span = (int(x.positions[-1]) - x_first) // s + 1
    if x_span > 4 * len(x.masses) + 16:
        return None
    quotients, residues = np.divmod(y.positions - y_first, s)
    columns, column_of = np.unique(residues, return_inverse=True)
    rows = x_span + int(quotients[-1])  # y is increasing: its last quotient is the largest
    if rows * len(columns) > 4 * count + 1024:
        return None
    dense = _dense(x, s, x_span)
    table = np.zeros((rows, len(columns)))
    for column, row, mass in zip(
        column_of.tolist(), quotients.tolist(), y.masses.tolist(), strict=True
    ):
        table[row : row + x_span, column] += mass * dense
    flat = table.ravel()  # row by row: positions x_0 + y_0 + s·k + r, increasing
    kept = np.flatnonzero(flat)
    positions = (x_first + y_first) + s * (kept // len(columns)) + columns[kept % len(columns)]
    return positions.astype(np.int64), flat[kept]


def _dense(pmf: Pmf, g: int, span: int) -> np.ndarray:
    """The masses of ``pmf`` at their positions in units of ``g`` from the first, zeros
    between (``span`` long)."""
    dense = np.zeros(span)
    dense[(pmf.positions - pmf.positions[0]) // g] = pmf.masses
    return dense


def _merged(a: Pmf, b: Pmf, merged_positions, merged, count: int, span: int, budget: Budget) -> Pmf:
    """The merge of ``a`` and ``b`` from its summed masses: error terms and pruning."""
    k = min(len(a.masses), len(b.masses))
    relative = (a.relative + b.relative + (k + 1) * _U) * (1 + 1e-6) + a.relative * b.relative
    absolute = (a.absolute + b.absolute) * (1 + relative) + _TINY * count
    keep = merged >= budget.prune
    dropped = (
        a.dropped + b.dropped + float(math.fsum(merged[~keep])) * (1 + relative) + _TINY * span
    )
    if int(np.count_nonzero(keep)) > _MAX_POINTS:
        raise TooLargeError
    return Pmf(merged_positions[keep], merged[keep], relative, absolute, dropped)


def _step(positions: np.ndarray) -> int:
    """The gcd of the gaps between ``positions`` (0 for a single point)."""
    return int(np.gcd.reduce(np.diff(positions))) if len(positions) > 1 else 0


def self_power(pmf: Pmf, count: int, budget: Budget) -> Pmf:
    result = None
    while count:
        if count & 1:
            result = pmf if result is None else merge(result, pmf, budget)
        count >>= 1
        if count:
            pmf = merge(pmf, pmf, budget)
    return result


def errors(pmf: Pmf) -> tuple[float, float, float]:
    return pmf.relative, pmf.absolute, pmf.dropped
