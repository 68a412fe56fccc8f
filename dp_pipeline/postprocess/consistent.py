"""Consistent, non-negative integer count tables: least squares, then top-down.

:func:`make_consistent` combines overlapping noisy count tables into one
consistent set: weighted least squares with the exact public variances over all
pairwise common margins (:mod:`.wls`; Hay, Rastogi, Miklau and Suciu 2010,
"Boosting the accuracy of differentially private histograms through
consistency"), then, optionally, non-negative integers fixed top-down
(:mod:`.topdown`).

Guarantee: pure post-processing. It reads only the released noisy values and
public facts (the hierarchy, domain sizes, noise variances), so the output is
as differentially private as the input and costs no privacy (Dwork and Roth
2014, Proposition 2.1). Deterministic: the same inputs give the same outputs
bit for bit. With ``integer=True`` every pairwise common margin agrees exactly
in integers, checked before returning.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ..errors import InternalError
from .groups import consistent_by_group, coupling_table
from .plan import Plan, plan
from .structure import (
    Hierarchy,
    NoisyCounts,
    PostprocessError,
    common_margin,
    margin_index,
    margin_size,
)
from .topdown import FitOptions, Problem, group_level, run_topdown
from .wls import solve_wls

__all__ = ["ConsistentTables", "make_consistent"]


@dataclass(frozen=True)
class ConsistentTables:
    """Consistent estimates per table (int64 when integer, else float64), input layout.

    Diagnostics: ``wls_iterations`` (conjugate gradient steps), ``wls_max_residual``
    (largest margin disagreement before the top-down step, in counts),
    ``raking_steps`` (most proportional-fitting steps of a two-way table),
    ``groups`` (independent top-down groups), ``seconds`` (wall time per stage).
    """

    values: dict[str, np.ndarray]
    method: str
    wls_iterations: int = 0
    wls_max_residual: float = 0.0
    raking_steps: int = 0
    groups: int = 1
    seconds: dict[str, float] = field(default_factory=dict)


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


def _verify(p: Plan, out: list[np.ndarray], hierarchy: Hierarchy | None, nonnegative: bool):
    for t, s in enumerate(p.structures):
        if nonnegative and np.any(out[t] < 0):
            raise InternalError(f"table {s.name!r}: a negative count after the top-down step")
    for i, a in enumerate(p.structures):
        for j in range(i + 1, len(p.structures)):
            b = p.structures[j]
            m = common_margin(a, b)
            size = margin_size(m, [a, b], hierarchy)
            # Float sums of integers are exact below 2**53 (a table's total is far below).
            ma = np.bincount(margin_index(a, m, hierarchy), out[i].astype(np.float64), size)
            mb = np.bincount(margin_index(b, m, hierarchy), out[j].astype(np.float64), size)
            if not np.array_equal(ma, mb):
                raise InternalError(
                    f"tables {a.name!r} and {b.name!r} disagree on their common margin"
                )


def method_name(nonnegative: bool, integer: bool) -> str:
    if not (nonnegative or integer):
        return "wls"
    sign = "nonnegative-" if nonnegative else ""
    return "wls+topdown-" + sign + ("integer" if integer else "real")


def _by_group(p, values, variances, hierarchy, nonnegative, integer) -> ConsistentTables:
    """Every table has a hierarchy key: one least squares and top-down per top-level group."""
    options = FitOptions(nonnegative, integer) if (nonnegative or integer) else None
    solved = consistent_by_group(p, values, variances, hierarchy, options)
    seconds = dict(solved.seconds)
    if integer:
        t0 = time.perf_counter()
        _verify(p, solved.values, hierarchy, nonnegative)
        seconds["verify"] = time.perf_counter() - t0
    names = [s.name for s in p.structures]
    return ConsistentTables(
        dict(zip(names, solved.values, strict=True)),
        method_name(nonnegative, integer),
        solved.iterations,
        solved.max_residual,
        solved.raking_steps,
        hierarchy.sizes[0],
        seconds,
    )


def make_consistent(
    tables: Sequence[NoisyCounts],
    hierarchy: Hierarchy | None,
    *,
    nonnegative: bool = True,
    integer: bool = True,
) -> ConsistentTables:
    """One consistent set of tables from overlapping noisy count tables.

    Every pair of tables agrees on its common margin: geography at the coarser
    of the two levels (national if either has no hierarchy key) by the
    non-geography keys both have. With neither ``nonnegative`` nor ``integer``
    the result is the weighted least squares estimate (agreeing to 1e-7 counts);
    otherwise the top-down step makes it non-negative and/or integer, with
    exact agreement when ``integer``. Raises :class:`PostprocessError` on bad
    input (before any work) and ``InternalError`` if a margin check fails.
    """
    started = time.perf_counter()
    p = plan(tables, hierarchy)
    values, variances = checked_values(tables, p)
    if coupling_table(p, hierarchy) is None:
        return _by_group(p, values, variances, hierarchy, nonnegative, integer)
    wls = solve_wls(p.structures, values, variances, p.constraints, hierarchy)
    seconds = {"wls": time.perf_counter() - started}
    names = [s.name for s in p.structures]
    if not (nonnegative or integer):
        return ConsistentTables(
            dict(zip(names, wls.estimates, strict=True)),
            "wls",
            wls.iterations,
            wls.max_residual,
            seconds=seconds,
        )
    t0 = time.perf_counter()
    problem = Problem(p.structures, p.order, hierarchy, wls.estimates)
    level = group_level(p)
    run_topdown(problem, FitOptions(nonnegative, integer), level)
    out = [problem.fixed[t] for t in range(len(p.structures))]
    seconds["topdown"] = time.perf_counter() - t0
    if integer:
        t0 = time.perf_counter()
        _verify(p, out, hierarchy, nonnegative)
        seconds["verify"] = time.perf_counter() - t0
    return ConsistentTables(
        dict(zip(names, out, strict=True)),
        method_name(nonnegative, integer),
        wls.iterations,
        wls.max_residual,
        problem.raking_steps,
        1 if level < 0 else hierarchy.sizes[level],
        seconds,
    )
