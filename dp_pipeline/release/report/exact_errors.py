"""Exact, mergeable tallies of a table's cell errors (estimate − truth), batch by batch.

The report's accuracy figures must not depend on how a table is split into
batches, so every figure is accumulated exactly and rounded once at the end:
integer errors as Python ints (int64 inside a batch only where it cannot
overflow), float errors (estimates that are not whole) as exact dyadic
rationals (`exact_float_sums`). The error histogram keeps the exact
distribution of the errors (distinct value → count), so its bins and counts are
those of the whole table. Memory: O(groups + distinct errors), not O(cells).
Synthetic input only: these are true-value comparisons, never published for
real data.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dp_pipeline.errors import DPValueError

__all__ = ["ErrorTally", "exact_float_sums", "exact_sums", "histogram_counts"]

# An int64 sum of a batch cannot overflow while its largest |value| × its size is at most this.
_INT64_LIMIT = 2**63 - 1
# A float's 53-bit significand as two int64 halves: sums of up to 2**36 halves fit in int64.
_HALF_BITS = 26
_MAX_FLOAT_BATCH = 2**36
# Veltkamp's splitter for float64 (2**27 + 1): the exact square as two floats.
_SPLITTER = 134217729.0


def _integral(total: Fraction) -> int | Fraction:
    return total.numerator if total.denominator == 1 else total


def exact_float_sums(values: np.ndarray, groups: np.ndarray, size: int) -> list[int | Fraction]:
    """Exact per-group sums of float64 ``values`` (group ``groups[i]`` in ``range(size)``).

    Each float is significand × 2^exponent with a 53-bit integer significand
    (`np.frexp`); the significands are summed in int64 per (group, exponent), in
    two 26-bit halves so no sum overflows, and combined as Python ints: the sums
    are exact rationals, whatever the order or batching of the values.
    """
    if values.size > _MAX_FLOAT_BATCH:
        raise DPValueError(f"{values.size:,} values in one batch; at most {_MAX_FLOAT_BATCH:,}")
    if not np.isfinite(values).all():
        bad = values[~np.isfinite(values)][0].item()
        raise DPValueError(f"a value of {bad!r} is not finite; exact sums need finite numbers")
    fraction, exponent = np.frexp(values)
    significand = np.ldexp(fraction, 53).astype(np.int64)  # exact: 53 bits
    high = significand >> _HALF_BITS
    low = significand - (high << _HALF_BITS)
    keys, inverse = np.unique(
        groups.astype(np.int64) * 4096 + (exponent.astype(np.int64) + 2048), return_inverse=True
    )
    high_sums = np.zeros(keys.size, dtype=np.int64)
    low_sums = np.zeros(keys.size, dtype=np.int64)
    np.add.at(high_sums, inverse, high)
    np.add.at(low_sums, inverse, low)
    totals = [Fraction(0)] * size
    parts = zip(keys.tolist(), high_sums.tolist(), low_sums.tolist(), strict=True)
    for key, high_sum, low_sum in parts:
        group, shift = divmod(key, 4096)
        scaled = (high_sum << _HALF_BITS) + low_sum
        power = shift - 2048 - 53
        totals[group] += scaled * 2**power if power >= 0 else Fraction(scaled, 2**-power)
    return [_integral(total) for total in totals]


def exact_sums(values: np.ndarray, groups: np.ndarray | None, size: int) -> list[int | Fraction]:
    """Exact per-group sums of an integer or float64 array (``groups`` None: one group)."""
    if values.dtype.kind == "f":
        if groups is None:
            groups = np.zeros(values.size, dtype=np.int64)
        return exact_float_sums(values, groups, size)
    largest = int(np.abs(values).max()) if values.size else 0
    if largest * values.size <= _INT64_LIMIT:
        if size == 1:
            return [int(values.sum(dtype=np.int64))]
        sums = np.zeros(size, dtype=np.int64)
        np.add.at(sums, groups, values)
        return sums.tolist()
    if groups is None:
        groups = np.zeros(values.size, dtype=np.int64)
    sums = np.zeros(size, dtype=object)  # Python ints: exact at any size
    np.add.at(sums, groups, values.astype(object))
    return [int(total) for total in sums]


def _squares(errors: np.ndarray) -> list[np.ndarray]:
    """Arrays whose elementwise sum is errors² exactly (ints; floats by Dekker's product).

    float64: p = fl(e²) and its rounding error (Dekker 1971, exact barring underflow
    below 2^-1022, far below any count's error); int64: e² where it fits, else
    Python ints.
    """
    if errors.dtype.kind == "f":
        square = errors * errors
        scaled = _SPLITTER * errors
        high = scaled - (scaled - errors)
        low = errors - high
        return [square, ((high * high - square) + 2 * high * low) + low * low]
    largest = int(np.abs(errors).max()) if errors.size else 0
    if largest < 2**31:
        return [errors * errors]
    return [errors.astype(object) ** 2]


def _sum_of(arrays: list[np.ndarray]) -> int | Fraction:
    total = 0
    for array in arrays:
        if array.dtype == object:
            total += sum(array.tolist())
        else:
            total += exact_sums(array, None, 1)[0]
    return total


class ErrorTally:
    """The exact tally of one column's cell errors: sums, extremes, distribution, groups.

    ``groups``: the number of geography groups whose error sums are kept
    (0: none); each batch's cells name their group. ``margin``: the margin of
    error the within-margin count compares |error| with.
    """

    def __init__(self, margin: int, groups: int = 0) -> None:
        self.margin = margin
        self.cells = 0
        self.sum_abs: int | Fraction = 0
        self.sum_squares: int | Fraction = 0
        self.max_abs: int | float = 0
        self.within = 0
        self.total: int | Fraction = 0
        self.group_sums: list[int | Fraction] = [0] * groups
        self._values: np.ndarray = np.zeros(0, dtype=np.int64)
        self._counts: np.ndarray = np.zeros(0, dtype=np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_size = 0

    def add(self, errors: np.ndarray, group_of: np.ndarray | None = None) -> None:
        """Tally a batch of errors (int64 or float64), with each cell's group position."""
        if errors.size == 0:
            return
        magnitude = np.abs(errors)
        self.cells += int(errors.size)
        self.sum_abs += exact_sums(magnitude, None, 1)[0]
        self.sum_squares += _sum_of(_squares(errors))
        largest = magnitude.max()
        largest = float(largest) if errors.dtype.kind == "f" else int(largest)
        self.max_abs = max(self.max_abs, largest)
        self.within += int(np.count_nonzero(magnitude <= self.margin))
        batch_total = exact_sums(errors, None, 1)[0]
        self.total += batch_total
        if self.group_sums:
            for group, value in enumerate(exact_sums(errors, group_of, len(self.group_sums))):
                self.group_sums[group] += value
        values, counts = _distinct(errors)
        self._pending.append((values, counts))
        self._pending_size += values.size
        if self._pending_size > max(2 * self._values.size, 1 << 16):
            self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        values = np.concatenate([self._values, *(v for v, _ in self._pending)])
        counts = np.concatenate([self._counts, *(c for _, c in self._pending)])
        self._values, inverse = np.unique(values, return_inverse=True)
        self._counts = np.zeros(self._values.size, dtype=np.int64)
        np.add.at(self._counts, inverse, counts)
        self._pending, self._pending_size = [], 0

    def distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct errors (float64, ascending) and how many cells have each."""
        self._compact()
        return self._values.astype(np.float64), self._counts.copy()


def _distinct(errors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct errors, ascending, and their counts (integers over a narrow range:
    one bincount, O(cells); otherwise one sort)."""
    if errors.dtype.kind == "i":
        smallest, largest = int(errors.min()), int(errors.max())
        if largest - smallest <= 4 * errors.size + 1024:
            counts = np.bincount(errors - smallest)
            present = np.flatnonzero(counts)
            return present + smallest, counts[present].astype(np.int64)
    values, counts = np.unique(errors, return_counts=True)
    return values, counts.astype(np.int64)


def histogram_counts(values: np.ndarray, counts: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``np.histogram(errors, bins=edges)``'s counts from the errors' distribution.

    Bins are half-open [e_i, e_i+1) and the last one closed, as numpy's.
    """
    bins = edges.size - 1
    index = np.searchsorted(edges, values, side="right") - 1
    index[values == edges[-1]] = bins - 1
    result = np.zeros(bins, dtype=np.int64)
    inside = (index >= 0) & (index < bins)
    np.add.at(result, index[inside], counts[inside])
    return result
