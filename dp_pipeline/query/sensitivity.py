"""THE sensitivity function: the per-coordinate shifts one privacy unit can cause.

`QuerySpec` (and through it both engines and the selections) and the release
planner all call `sensitivity_vector`, so what the accountant is told before
any data is read is exactly what the engines enforce when they bound it.

Guarantee. Let a privacy unit touch at most L0 = ``max_cells`` cells, with at
most L∞ = ``max_per_cell`` rows per cell, and let every summed value lie in
``[lower, upper]`` (integers, in granularity units). Then for any two
neighbouring inputs the noised integer vectors differ in at most
``len(vector)`` coordinates, each by at most the vector's entry, and this
vector is the worst neighbour's shift pattern fed to the accountant (the
multivariate discrete Gaussian bound of Canonne, Kamath & Steinke 2020,
Section 4, or the sum of per-coordinate costs):

- add/remove one unit: min(L0, cells) coordinates; a count moves by L∞, a sum
  by L∞·max(|lower|, |upper|) (a unit's sum in a cell lies in
  [L∞·lower, L∞·upper] when lower <= 0 <= upper, or in a sub-range otherwise).
- replace one unit: the old unit leaves up to L0 cells and the new one enters
  as many, so min(2·L0, cells) coordinates (there are only ``cells``). A cell
  both left and entered changes by at most L∞ for a count (both counts lie in
  [0, L∞]) and by at most L∞·(upper − lower) for a sum; each coordinate is
  therefore bounded by L∞·max(|lower|, |upper|, upper − lower).

Without a privacy unit every row is its own unit: L0 = L∞ = 1 whatever the
declared bounds say.
"""

from __future__ import annotations

import numbers

from dp_pipeline.errors import InternalError

__all__ = ["NEIGHBOURING", "SENSITIVITY_STATISTICS", "sensitivity_vector"]

NEIGHBOURING = ("add_remove", "replace")
SENSITIVITY_STATISTICS = ("count", "sum")


def _positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InternalError(f"sensitivity_vector: {name} must be an integer >= 1, got {value!r}")
    return int(value)


def _integer(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InternalError(
            f"sensitivity_vector: {name} must be an integer (granularity units), got {value!r}"
        )
    return int(value)


def sensitivity_vector(
    statistic: str,
    *,
    max_cells: int,
    max_per_cell: int,
    neighbouring: str,
    cells: int,
    privacy_unit: bool = True,
    lower: int | None = None,
    upper: int | None = None,
) -> tuple[int, ...]:
    """Per-coordinate bound on how much one privacy unit changes a noised integer vector.

    ``statistic``: ``"count"`` (rows per cell) or ``"sum"`` (clamped values per cell, with
    ``lower``/``upper`` the value bounds in granularity units). ``max_cells`` (L0) and
    ``max_per_cell`` (L∞) are the contribution bounds, ``cells`` the number of cells the
    vector has, ``privacy_unit`` False when every row is its own unit (L0 = L∞ = 1).
    The result is an upper bound on every neighbouring pattern under ``neighbouring``
    (see the module docstring for the derivation). Arguments are validated by the
    callers' spec checks; a bad one here is an internal error.
    """
    if statistic not in SENSITIVITY_STATISTICS:
        raise InternalError(f"sensitivity_vector: statistic {statistic!r} is not count or sum")
    if neighbouring not in NEIGHBOURING:
        raise InternalError(f"sensitivity_vector: neighbouring {neighbouring!r} is unknown")
    cells = _positive(cells, "cells")
    l0 = _positive(max_cells, "max_cells") if privacy_unit else 1
    linf = _positive(max_per_cell, "max_per_cell") if privacy_unit else 1
    if statistic == "sum":
        if lower is None or upper is None:
            raise InternalError("sensitivity_vector: a sum needs its lower and upper bounds")
        low, high = _integer(lower, "lower"), _integer(upper, "upper")
        per_row = max(abs(low), abs(high))
        if neighbouring == "replace":
            per_row = max(per_row, high - low)
        move = linf * per_row
    else:
        move = linf
    if neighbouring == "replace":
        return (move,) * min(2 * l0, cells)
    return (move,) * min(l0, cells)
