"""The noisy tables' values and variances, checked; the name of a method.

Pure post-processing of noisy values and public facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .plan import Plan
from .structure import NoisyCounts, PostprocessError

__all__ = ["checked_values", "method_name"]


def checked_values(tables: Sequence[NoisyCounts], p: Plan) -> tuple[list, list]:
    values, variances = [], []
    for table, s in zip(tables, p.structures, strict=True):
        arr = np.asarray(table.values)
        if arr.dtype.kind not in "iu":
            raise PostprocessError(
                f"table {table.name!r}: values have dtype {arr.dtype}; noisy counts are integers"
            )
        if arr.ndim != 1 or arr.size != s.cells:
            raise PostprocessError(
                f"table {table.name!r}: {arr.size} values (shape {arr.shape}) for "
                f"{s.cells} cells ({' x '.join(map(str, s.sizes)) or 'scalar'}); give one "
                "value per cell in C order over the keys"
            )
        variance = table.variance
        if not isinstance(variance, Fraction | int) or isinstance(variance, bool):
            raise PostprocessError(
                f"table {table.name!r}: variance {variance!r} is not an exact rational "
                "(fractions.Fraction)"
            )
        if variance <= 0:
            raise PostprocessError(
                f"table {table.name!r}: variance {variance} must be > 0 (the noise variance)"
            )
        values.append(arr.astype(np.int64))
        variances.append(Fraction(variance))
    return values, variances


def method_name(nonnegative: bool, integer: bool) -> str:
    if not (nonnegative or integer):
        return "wls"
    sign = "nonnegative-" if nonnegative else ""
    return "wls+topdown-" + sign + ("integer" if integer else "real")
