"""Exact integer cell sums and the public clamp before noise (numpy, every engine path).

The rule (`dp_pipeline.query.bounds.ValueBounds` and `QuerySpec` enforce it before
any data is read):

1. A summed value is at most ``B <= MAX_SUM_UNITS = 2**31`` granularity units
   in absolute value, and one unit's sum in one cell at most
   ``max_per_cell * B <= SUM_LIMIT = 2**62``.
2. Every partial and cell total is accumulated exactly: never in an int64 that
   can wrap. Below ``2**63`` the totals are plain int64 (proven from a bound on
   the sum of the absolute values of the terms); beyond, they are kept as two
   int64 limbs (`CellTotals`).
3. Each exact cell total is clamped into ``[-SUM_LIMIT, SUM_LIMIT]`` before the
   noise is added (`CellTotals.clamped`; the Spark SQL path does the same on its
   DECIMAL(38,0) totals).

Why the clamp costs nothing. ``x -> clip(x, -2**62, 2**62)`` is 1-Lipschitz, so
for neighbouring inputs ``|clip(x) - clip(y)| <= |x - y|`` in every
coordinate: the sensitivity vector the accountant is told still bounds the
change, and the privacy analysis is unchanged. The clamp is public (the same
constant for every input) and changes a cell only when its exact total leaves
``±2**62``, which by rule 1 needs more than ``2**62 / B >= 2**31`` rows in that
cell. So a cell with fewer than ``2**31`` rows is released from its exact sum,
and a larger one from its exact sum clamped to ``±2**62``: never a wrapped
value, and never an error whose presence depends on the data.

Why the noisy value cannot overflow: see `saturating_add`.
"""

from __future__ import annotations

import numpy as np

from dp_pipeline.errors import DPTypeError

__all__ = [
    "MAX_SUM_UNITS",
    "SUM_LIMIT",
    "CellTotals",
    "cell_totals",
    "saturating_add",
]

# Largest |value| of a summed row, in granularity units (rule 1).
MAX_SUM_UNITS = 2**31
# Every cell total is clamped into [-SUM_LIMIT, SUM_LIMIT] before noise (rule 3).
SUM_LIMIT = 2**62
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
# float64 adds integers exactly while every partial sum stays below 2**53 in magnitude.
_FLOAT_EXACT = 2**53
_LIMB_BITS = 32
_LIMB_MASK = np.int64(2**_LIMB_BITS - 1)
# Terms summed into one int64 limb at a time: 2**31 terms below 2**32 stay below 2**63.
_LIMB_CHUNK = 2**31


class CellTotals:
    """Dense exact integer totals, one per cell, that never wrap.

    Plain form (``high is None``): ``low`` holds the totals and ``bound`` is an
    upper bound on the sum of the absolute values of every term added so far,
    kept below ``2**63``, so no partial sum of ``low`` can have wrapped.

    Limb form: the total of a cell is ``high * 2**32 + low`` with
    ``0 <= low < 2**32`` after every operation. ``high`` is then about
    ``total / 2**32``; the totals of ``r`` rows of at most ``2**31`` units are
    below ``r * 2**31``, so ``high`` stays below ``2**62`` for any ``r < 2**63``
    (counts are int64 too).
    """

    __slots__ = ("bound", "high", "low")

    def __init__(self, low: np.ndarray, bound: int, high: np.ndarray | None = None) -> None:
        self.low = low
        self.bound = bound
        self.high = high

    @classmethod
    def zeros(cls, size: int) -> CellTotals:
        return cls(np.zeros(size, dtype=np.int64), 0)

    def _to_limbs(self) -> None:
        if self.high is None:
            # Arithmetic shift: low = high * 2**32 + (low & mask) for negative values too.
            self.high = self.low >> np.int64(_LIMB_BITS)
            self.low = self.low & _LIMB_MASK

    def _carry(self) -> None:
        """Move ``low``'s bits above 2**32 into ``high`` (requires 0 <= low < 2**63)."""
        self.high += self.low >> np.int64(_LIMB_BITS)
        self.low &= _LIMB_MASK

    def add(self, other: CellTotals) -> None:
        """``self += other`` exactly (plain int64 while the bounds prove it cannot wrap)."""
        if self.high is None and other.high is None and self.bound + other.bound < 2**63:
            self.low += other.low
            self.bound += other.bound
            return
        self._to_limbs()
        if other.high is None:
            high, low = other.low >> np.int64(_LIMB_BITS), other.low & _LIMB_MASK
        else:
            high, low = other.high, other.low
        self.low += low  # two values below 2**32: below 2**33
        self.high += high
        self._carry()
        self.bound = max(self.bound, other.bound)  # unused in limb form

    def clamped(self) -> np.ndarray:
        """The exact totals clamped into ``[-SUM_LIMIT, SUM_LIMIT]`` (int64).

        In limb form, ``high >= 2**30`` means total >= 2**62, and
        ``high < -2**30`` means total <= -2**62 - 1 (``low < 2**32``); in between,
        ``high * 2**32 + low`` lies in [-2**62, 2**62) and is computed without wrapping.
        """
        if self.high is None:
            return np.clip(self.low, -SUM_LIMIT, SUM_LIMIT)
        top = SUM_LIMIT >> _LIMB_BITS
        inside = (self.high >= -top) & (self.high < top)
        exact = np.where(inside, self.high, 0) * np.int64(2**_LIMB_BITS) + self.low
        return np.where(
            inside, exact, np.where(self.high < 0, np.int64(-SUM_LIMIT), np.int64(SUM_LIMIT))
        )

    def exact(self) -> list[int]:
        """The totals as Python ints (for tests and checks; not on a hot path)."""
        if self.high is None:
            return [int(v) for v in self.low]
        return [(int(h) << _LIMB_BITS) + int(v) for h, v in zip(self.high, self.low, strict=True)]


def _bincount_sums(cells: np.ndarray, weights: np.ndarray, total: int) -> np.ndarray:
    return np.bincount(cells, weights=weights, minlength=total).astype(np.int64)


def cell_totals(cells: np.ndarray, weights: np.ndarray, total: int) -> CellTotals:
    """Exact per-cell sums of int64 ``weights`` (cell indexes in ``[0, total)``).

    With ``n`` terms of magnitude at most ``W`` (both known before summing), no
    partial sum exceeds ``n * W``:

    - ``n * W < 2**53``: a float64 ``bincount``; every partial sum is an integer
      below 2**53, which float64 represents, so each addition is exact.
    - ``n * W < 2**63``: int64 accumulation, which therefore cannot wrap.
    - otherwise: each term is split into limbs ``w = h * 2**32 + l`` with
      ``0 <= l < 2**32`` and ``|h| <= 2**31``, summed in int64 chunks of at most
      ``2**31`` terms (limb sums below ``2**63``), and carried into a limb-form
      `CellTotals`. Exact whenever the true totals are below ``2**94``.
    """
    n = weights.size
    if n == 0:
        return CellTotals.zeros(total)
    largest = max(int(weights.max()), -int(weights.min()))
    bound = n * largest
    if bound < _FLOAT_EXACT:
        return CellTotals(_bincount_sums(cells, weights, total), bound)
    weights = weights.astype(np.int64, copy=False)
    if bound < 2**63:
        out = np.zeros(total, dtype=np.int64)
        np.add.at(out, cells, weights)
        return CellTotals(out, bound)
    out = CellTotals.zeros(total)
    out._to_limbs()
    for start in range(0, n, _LIMB_CHUNK):
        part_cells = cells[start : start + _LIMB_CHUNK]
        part = weights[start : start + _LIMB_CHUNK]
        high = np.zeros(total, dtype=np.int64)
        low = np.zeros(total, dtype=np.int64)
        np.add.at(high, part_cells, part >> np.int64(_LIMB_BITS))
        np.add.at(low, part_cells, part & _LIMB_MASK)
        # low < 2**31 * 2**32 = 2**63: carry it into high before the next chunk.
        high += low >> np.int64(_LIMB_BITS)
        low &= _LIMB_MASK
        out.add(CellTotals(low, 0, high))
    return out


def saturating_add(values: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """``clip(values + noise, int64 range)``, computed exactly: never a wrapped value.

    For int64 operands the exact sum lies in ``[-2**64, 2**64 - 2]``, so a
    wrapped int64 sum differs from it by exactly ``±2**64``. That happens
    exactly where both operands have the same sign and the wrapped sum the
    other one; the exact sum is then beyond the int64 end on the operands'
    side, which is what is returned. Noise given as exact Python ints (object
    arrays from very wide samplers) is added in Python integers and clamped the
    same way. The true ``values`` are already inside ``[-SUM_LIMIT, SUM_LIMIT]``
    (the pre-noise clamp), so only noise beyond about ``2**62`` can reach the
    int64 ends. Clamping the noisy value is post-processing: it costs no privacy.
    """
    if values.dtype != np.int64:
        raise DPTypeError(f"true values must be int64, got {values.dtype}")
    if noise.dtype == object:
        exact = [int(v) + int(z) for v, z in zip(values.tolist(), noise.tolist(), strict=True)]
        return np.array([min(max(t, _INT64_MIN), _INT64_MAX) for t in exact], dtype=np.int64)
    noise = noise.astype(np.int64, copy=False)
    total = values + noise
    overflow = ((values ^ total) & (noise ^ total)) < 0
    if overflow.any():
        total[overflow] = np.where(noise[overflow] < 0, np.int64(_INT64_MIN), np.int64(_INT64_MAX))
    return total
