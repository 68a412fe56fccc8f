"""Exact rounding of lattice losses onto a coarser grid, shared by the coarsened and the
tilted lattice FFT (`coarse_lattice`, `tilted_lattice`).

`floor_ratio` / `floor_times` give floor(j / r) and floor(j·r) for integers j and a
rational r exactly (int64 where no product can overflow, else a float estimate recomputed
in integers wherever it lies near an integer), so a loss rounded up or down onto the grid
is rounded by the exact rule the bracket's proof assumes; `choose_grid` picks the grid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.lattice import LatticeComponent, fraction_gcd

__all__ = ["UNIT_ROUNDOFF", "choose_grid", "floor_product", "floor_ratio", "floor_times"]

UNIT_ROUNDOFF = 2.0**-53


def floor_product(values: np.ndarray, p: int, q: int) -> np.ndarray:
    """floor(v·p/q) for integers v, exactly: int64 arithmetic when no product can overflow;
    else a float estimate, recomputed in integers wherever v·p/q lies within 16 ulps of an
    integer (elsewhere the float product, within 2 ulps, has the same floor)."""
    values = values.astype(np.int64)
    reach = int(np.max(np.abs(values))) if len(values) else 0
    if reach * max(p, q) < 2**62:
        return (values * p) // q
    ratio = p / q  # correctly rounded
    if reach >= 2**52 or reach * abs(ratio) >= 2.0**50:
        return np.asarray((values.astype(object) * p) // q, dtype=object)
    product = values * ratio
    estimate = np.floor(product)
    near = np.abs(product - np.round(product)) <= 16 * UNIT_ROUNDOFF * np.abs(product) + 1e-300
    result = estimate.astype(np.int64)
    for index in np.flatnonzero(near):
        result[index] = (int(values[index]) * p) // q
    return result


def floor_ratio(numerators: np.ndarray, ratio: Fraction) -> np.ndarray:
    """floor(j / ratio) for integers j, exactly."""
    return floor_product(numerators, ratio.denominator, ratio.numerator)


def floor_times(indices: np.ndarray, ratio: Fraction) -> np.ndarray:
    """floor(j · ratio) for integers j, exactly."""
    return floor_product(indices, ratio.numerator, ratio.denominator)


def choose_grid(components: Sequence[LatticeComponent], finest: float) -> Fraction:
    """The grid: the finest divisor, >= ``finest``, of the common step of the components
    (coarsest steps first) that can stay exact; a power of 1/2 if none can."""
    common: Fraction | None = None
    for component in sorted(components, key=lambda c: c.step, reverse=True):
        candidate = component.step if common is None else fraction_gcd([common, component.step])
        if float(candidate) >= finest:
            common = candidate
    if common is None:
        grid = Fraction(1, 2 ** max(0, math.floor(math.log2(1 / finest))))
        return grid if float(grid) >= finest else grid * 2
    return common / max(1, math.floor(float(common) / finest))
