"""The noisy tables' values and variances, checked; the name of a method.

The least squares weights every table by its public noise variance. Its solvers
(conjugate gradients; with national tables, regularised factorizations refined
against the matrix) reach their tolerance only while the variances stay within
a bounded ratio of each other: :func:`variance_refusal` says, from the shapes and
variances alone (before any budget is spent), when they would not.

Pure post-processing of noisy values and public facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .plan import Plan
from .structure import NoisyCounts, PostprocessError

__all__ = [
    "MAX_COUPLED_VARIANCE_RATIO",
    "MAX_VARIANCE_RATIO",
    "checked_values",
    "method_name",
    "variance_refusal",
]

# Largest variance / smallest among the combined tables. Measured on the demo's tables
# (200 counties): the conjugate gradients converged with one table at 2.5e5 and 4e7 times
# another, failed at 2.5e6; the factorized solves with a national table converged at
# 1.2e4, failed at 3.5e4. The limits keep a factor of 10 or more below the failures.
MAX_VARIANCE_RATIO = 10**5
MAX_COUPLED_VARIANCE_RATIO = 10**3


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


def variance_refusal(p: Plan, variances: Sequence[Fraction], coupled: bool) -> str | None:
    """Why the least squares cannot weigh these tables' variances accurately, or None.

    ``coupled``: national tables solved with the groups (:mod:`.coupled`). Needs the
    shapes and the public variances only, so it runs before any budget is spent.
    """
    limit = MAX_COUPLED_VARIANCE_RATIO if coupled else MAX_VARIANCE_RATIO
    high = max(range(len(variances)), key=lambda t: variances[t])
    low = min(range(len(variances)), key=lambda t: variances[t])
    if variances[high] <= limit * variances[low]:
        return None
    names = p.structures[high].name, p.structures[low].name
    solver = "with a national table, " if coupled else ""
    return (
        f"the noise variance of table {names[0]!r} ({float(variances[high]):.4g}) is "
        f"{float(variances[high] / variances[low]):.3g} times that of table {names[1]!r} "
        f"({float(variances[low]):.4g}); {solver}the least squares is accurate up to a "
        f"ratio of {limit:,}; give the two tables closer budget shares, or leave one of "
        "them out of the post-processing"
    )
