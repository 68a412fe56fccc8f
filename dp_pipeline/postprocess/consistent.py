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

import numpy as np

from ..errors import InternalError
from .coupled import coupled_refusal, coupling_of
from .group_solver import GroupSolver
from .groups import consistent_by_group, coupling_table
from .inputs import checked_values, method_name, variance_refusal
from .plan import Plan, plan
from .structure import (
    Hierarchy,
    Margin,
    NoisyCounts,
    PostprocessError,
    common_margin,
    margin_index,
    margin_size,
)
from .topdown import FitOptions, Problem, add_widened, fit_groups, group_level, run_topdown
from .wls import solve_wls

__all__ = ["ConsistentTables", "checked_values", "make_consistent", "solve_by_blocks"]


@dataclass(frozen=True)
class ConsistentTables:
    """Consistent estimates per table (int64 when integer, else float64), input layout.

    Diagnostics: ``wls_iterations`` (conjugate gradient steps; with national tables
    per block, the factorized solves' refinement steps), ``wls_max_residual``
    (largest margin disagreement before the top-down step, in counts),
    ``raking_steps`` (most block-ascent steps of a two-way table's projection),
    ``groups`` (independent top-down groups), ``seconds`` (wall time per stage).
    ``least_squares``: after a top-down step, the least squares estimates it started
    from (per table, float64; with national tables solved as one more block, each
    block's estimates with its coupling fixed, as the engines take each cell's move
    from); None otherwise. ``widened``: per table (by name, every table), how many of
    its cells a controlled rounding took outside the floor/ceil box because no rounding
    inside it meets the fixed margins (:attr:`.rounding.Rounded.widened`); 0 without
    an integer step.
    """

    values: dict[str, np.ndarray]
    method: str
    wls_iterations: int = 0
    wls_max_residual: float = 0.0
    raking_steps: int = 0
    groups: int = 1
    seconds: dict[str, float] = field(default_factory=dict)
    least_squares: dict[str, np.ndarray] | None = None
    widened: dict[str, int] = field(default_factory=dict)


def _widened_by_name(p: Plan, widened: dict[int, int]) -> dict[str, int]:
    return {s.name: int(widened.get(t, 0)) for t, s in enumerate(p.structures)}


def _verify(p: Plan, out: list[np.ndarray], hierarchy: Hierarchy | None, nonnegative: bool):
    for t, s in enumerate(p.structures):
        if nonnegative and np.any(out[t] < 0):
            raise InternalError(f"table {s.name!r}: a negative count after the top-down step")
    # Each table's values as floats, and each (table, margin) sum, once: a table shares
    # the same margin with several others (its geography total with every table).
    floats: dict[int, np.ndarray] = {}
    sums: dict[tuple[int, Margin], np.ndarray] = {}

    def margin_sums(t: int, m: Margin, size: int) -> np.ndarray:
        if (t, m) not in sums:
            if t not in floats:
                floats[t] = out[t].astype(np.float64)
            index = margin_index(p.structures[t], m, hierarchy)
            sums[t, m] = np.bincount(index, floats[t], size)
        return sums[t, m]

    for i, a in enumerate(p.structures):
        for j in range(i + 1, len(p.structures)):
            b = p.structures[j]
            m = common_margin(a, b)
            size = margin_size(m, [a, b], hierarchy)
            # Float sums of integers are exact below 2**53 (a table's total is far below).
            if not np.array_equal(margin_sums(i, m, size), margin_sums(j, m, size)):
                raise InternalError(
                    f"tables {a.name!r} and {b.name!r} disagree on their common margin"
                )


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
        None
        if solved.least_squares is None
        else dict(zip(names, solved.least_squares, strict=True)),
        _widened_by_name(p, solved.widened),
    )


def _coupled(p, values, variances, hierarchy, nonnegative, integer) -> ConsistentTables:
    """National tables too: the groups and the national block, exactly (:mod:`.coupled`)."""
    started = time.perf_counter()
    options = FitOptions(nonnegative, integer) if (nonnegative or integer) else None
    solver = GroupSolver(p, hierarchy, tuple(variances), options, coupling_of(p, hierarchy))
    out, diagnostics = solve_by_blocks(solver, values)
    seconds = {"blocks": time.perf_counter() - started}
    if integer:
        t0 = time.perf_counter()
        _verify(p, out, hierarchy, nonnegative)
        seconds["verify"] = time.perf_counter() - t0
    return ConsistentTables(
        {s.name: v for s, v in zip(p.structures, out, strict=True)},
        solver.method,
        diagnostics["iterations"],
        diagnostics["max_residual"],
        diagnostics["raking_steps"],
        hierarchy.sizes[0],
        seconds,
        _least_squares(p, diagnostics.get("least_squares")),
        _widened_by_name(p, diagnostics["widened"]),
    )


def _least_squares(p: Plan, estimates: list | None) -> dict[str, np.ndarray] | None:
    """The top-down step's least squares estimates by table name, when every cell has one."""
    if estimates is None or any(e is None for e in estimates):
        return None
    return {s.name: e for s, e in zip(p.structures, estimates, strict=True)}


def _alone(p: Plan) -> bool:
    """One table without a geography key: no margin to agree with anything."""
    return len(p.structures) == 1 and p.structures[0].geo_axis is None


def _cell_by_cell(p: Plan, values, nonnegative: bool, integer: bool) -> ConsistentTables:
    """A table alone: each cell its own closest non-negative (integer) value.

    With no margin to keep, the closest non-negative table (least squares metric) is
    max(x, 0) cell by cell, and the closest integers are each cell's nearest. Fixing
    the table's own total first instead (the top-down step's national total) would
    take the mass raised at the cells below 0 from every positive cell, large ones
    included (a bias of about one noise standard deviation on the large cells of a
    table with many empty ones). For a true count >= 0 no cell moves away from it.
    """
    (s,) = p.structures
    x = np.asarray(values[0], dtype=np.float64)
    out = np.maximum(x, 0.0) if nonnegative else x.copy()
    if integer:
        out = np.rint(out).astype(np.int64)
    return ConsistentTables(
        {s.name: out},
        method_name(nonnegative, integer),
        least_squares={s.name: x.copy()} if (nonnegative or integer) else None,
        widened={s.name: 0},
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
    input, or variances too far apart for the solver (:func:`.inputs.variance_refusal`),
    before any work, and ``InternalError`` if a margin check fails.

    A table alone without a geography key shares no margin: each cell is made
    non-negative and/or integer on its own (:func:`_cell_by_cell`). Solved one
    top-level group at a time when every table has a hierarchy key;
    with national tables too, as one more block combined exactly over their
    shared margins (:mod:`.coupled`), unless :func:`.coupled.coupled_refusal`
    says it cannot be (then, as without a hierarchy, one global solve).
    """
    started = time.perf_counter()
    p = plan(tables, hierarchy)
    values, variances = checked_values(tables, p)
    grouped = coupling_table(p, hierarchy) is None
    coupled = not grouped and coupled_refusal(p, hierarchy) is None
    reason = variance_refusal(p, variances, coupled)
    if reason is not None:
        raise PostprocessError(reason)
    if _alone(p):
        return _cell_by_cell(p, values, nonnegative, integer)
    if grouped:
        return _by_group(p, values, variances, hierarchy, nonnegative, integer)
    if coupled:
        return _coupled(p, values, variances, hierarchy, nonnegative, integer)
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
            widened=_widened_by_name(p, {}),
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
        dict(zip(names, wls.estimates, strict=True)),
        _widened_by_name(p, problem.widened),
    )


def solve_by_blocks(solver: GroupSolver, values: Sequence[np.ndarray]) -> tuple[list, dict]:
    """On the driver, what an engine gets from :meth:`GroupSolver.part`, ``top`` and ``fit``.

    The same functions on the same rows (blocks of equal shape share one system, the
    same bits; the groups' top-down steps run together, as :func:`.topdown.fit_groups`
    gives each what :func:`.topdown.fit_group` would). Returns every table's values
    (cell order) and the diagnostics (most refinement steps, largest residual, projection steps);
    the caller verifies the margins (integers: :func:`_verify`).
    """
    columns = solver.cells(list(values))
    order = np.argsort(columns["top"], kind="stable")
    columns = {k: v[order] for k, v in columns.items()}
    starts = np.searchsorted(columns["top"], np.arange(solver.blocks + 1))
    rows = [
        tuple(columns[k][starts[b] : starts[b + 1]] for k in ("table", "cell", "value"))
        for b in range(solver.blocks)
    ]
    systems: dict = {}
    top = None
    diagnostics: dict = {"iterations": 0, "max_residual": 0.0, "raking_steps": 0, "widened": {}}
    if solver.two_pass:
        parts = [solver.part(b, *rows[b], systems=systems) for b in range(solver.blocks)]
        merged = {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}
        top = solver.top(merged)
        diagnostics["iterations"] = int(np.max(merged["iterations"]))
        diagnostics["max_residual"] = float(np.max(merged["residual"]))
        diagnostics["raking_steps"] = int(top.raking_steps)
        diagnostics["widened"] = dict(top.widened)
    fitted = [solver.fitted(b, *rows[b], top, systems) for b in range(solver.blocks)]
    problems = [fixed for _, fixed in fitted if isinstance(fixed, Problem)]
    fit_groups(problems, solver.options)
    out: list = [None] * len(solver.plan.structures)
    # With a top-down step, the least squares estimates it started from (the same ones
    # `GroupSolver.fit` takes each cell's move from): no second solve is needed for them.
    least_squares: list = [None] * len(solver.plan.structures)
    for expected, fixed in fitted:
        estimates = [None] * len(expected)
        if isinstance(fixed, Problem):
            diagnostics["raking_steps"] = max(diagnostics["raking_steps"], fixed.raking_steps)
            add_widened(diagnostics["widened"], fixed.widened)
            estimates = list(fixed.estimates)
            fixed = solver.fitted_values(fixed, check=False)  # the caller checks every margin
        elif top is not None and top.least_squares is not None:  # the national block
            estimates = [top.least_squares.get(t) for t in range(len(expected))]
        for t, (cells, value) in enumerate(zip(expected, fixed, strict=True)):
            if cells.size:
                if out[t] is None:
                    out[t] = np.empty(solver.plan.structures[t].cells, dtype=value.dtype)
                out[t][cells] = value
                if solver.options is not None and estimates[t] is not None:
                    if least_squares[t] is None:
                        least_squares[t] = np.empty(solver.plan.structures[t].cells)
                    least_squares[t][cells] = estimates[t]
    diagnostics["least_squares"] = least_squares if solver.options is not None else None
    return out, diagnostics
