"""The per-group consistency step as functions of columns, for engines that group rows.

An engine holding the noisy cells as rows (top-level position ``top``, table
position ``table``, cell index ``cell`` in the table's C order, noisy count
``value``) groups them by ``top`` and calls, for each group, :meth:`GroupSolver.part`
(first pass), then on the driver :meth:`GroupSolver.top` on every group's part,
then for each group :meth:`GroupSolver.fit` (second pass). These call the
functions of :mod:`.groups` that `make_consistent` calls on the driver, on the
same inputs in the same order, so the result is the same bit for bit. The
second pass solves the group's least squares again (deterministic, the same
bits) rather than storing the first pass's estimates.

Pure post-processing of noisy values and public facts; deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import InternalError
from .consistent import checked_values, method_name
from .groups import (
    TOP,
    GroupPart,
    TopFixed,
    coupling_table,
    fit_one_group,
    fit_top_from_summaries,
    group_cells,
    group_hierarchy,
    group_part,
    group_structures,
    solve_group_wls,
    verify_group,
)
from .plan import Plan, plan
from .structure import Hierarchy, NoisyCounts, PostprocessError, TableShape
from .topdown import FitOptions

__all__ = ["GroupSolver", "group_solver"]

Columns = dict[str, np.ndarray]


@dataclass(frozen=True)
class GroupSolver:
    """Public facts of one consistency problem: shapes, variances, hierarchy, options."""

    plan: Plan
    hierarchy: Hierarchy
    variances: tuple[Fraction, ...]
    options: FitOptions | None  # None: least squares estimates only (float64)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.plan.structures)

    @property
    def method(self) -> str:
        """The method `make_consistent` reports for the same options."""
        if self.options is None:
            return method_name(False, False)
        return method_name(self.options.nonnegative, self.options.integer)

    @property
    def groups(self) -> int:
        return self.hierarchy.sizes[TOP]

    def cells(self, values: Sequence[np.ndarray]) -> Columns:
        """Every table's cells as rows (top, table, cell, value), table by table in cell order."""
        tops, tables, cells, out = [], [], [], []
        for t, (s, v) in enumerate(zip(self.plan.structures, values, strict=True)):
            stride = int(np.prod(s.sizes[s.geo_axis + 1 :], dtype=np.int64))
            geo = (np.arange(s.cells, dtype=np.int64) // stride) % s.sizes[s.geo_axis]
            tops.append(self.hierarchy.ancestors(s.level, TOP)[geo].astype(np.int32))
            tables.append(np.full(s.cells, t, dtype=np.int32))
            cells.append(np.arange(s.cells, dtype=np.int64))
            out.append(np.asarray(v, dtype=np.int64))
        return {
            "top": np.concatenate(tops),
            "table": np.concatenate(tables),
            "cell": np.concatenate(cells),
            "value": np.concatenate(out),
        }

    def _solve(self, group: int, table: np.ndarray, cell: np.ndarray, value: np.ndarray):
        sub_h, positions = group_hierarchy(self.hierarchy, group)
        sub_s = group_structures(self.plan.structures, positions)
        order = np.lexsort((cell, table))
        table, cell, value = table[order], cell[order], value[order]
        bounds = np.searchsorted(table, np.arange(len(sub_s) + 1))
        expected, values = [], []
        for t, s in enumerate(self.plan.structures):
            want = group_cells(s, positions)
            got = cell[bounds[t] : bounds[t + 1]]
            if not np.array_equal(got, want):
                raise InternalError(
                    f"table {s.name!r}: group {group} has {got.size} cells, expected "
                    f"{want.size} (every cell of the table once)"
                )
            expected.append(want)
            values.append(value[bounds[t] : bounds[t + 1]])
        wls = solve_group_wls(self.plan, self.variances, sub_s, sub_h, values)
        return sub_h, positions, sub_s, expected, wls

    def part(self, group: int, table: np.ndarray, cell: np.ndarray, value: np.ndarray) -> Columns:
        """First pass: the group's least squares, reduced to what the top step needs.

        Rows: top-level tables' cells (``cell`` >= 0) and finer tables' group totals
        (``cell`` -1), with the group's conjugate gradient steps and residual.
        """
        sub_h, _, sub_s, expected, wls = self._solve(group, table, cell, value)
        p = group_part(group, self.plan, sub_s, sub_h, wls)
        tables, cells, estimates = [], [], []
        for t in range(len(sub_s)):
            if t in p.top_estimates:
                tables.append(np.full(expected[t].size, t, dtype=np.int32))
                cells.append(expected[t])
                estimates.append(p.top_estimates[t])
            else:
                tables.append(np.array([t], dtype=np.int32))
                cells.append(np.array([-1], dtype=np.int64))
                estimates.append(np.array([p.totals[t]]))
        n = sum(c.size for c in cells)
        return {
            "top": np.full(n, group, dtype=np.int32),
            "table": np.concatenate(tables),
            "cell": np.concatenate(cells),
            "estimate": np.concatenate(estimates),
            "iterations": np.full(n, wls.iterations, dtype=np.int32),
            "residual": np.full(n, wls.max_residual),
        }

    def top(self, parts: Mapping[str, np.ndarray]) -> TopFixed:
        """On the driver: the national and top-level totals and tables from every part."""
        rows = {k: np.asarray(v) for k, v in parts.items()}
        order = np.lexsort((rows["cell"], rows["table"], rows["top"]))
        rows = {k: v[order] for k, v in rows.items()}
        out = []
        starts = np.searchsorted(rows["top"], np.arange(self.groups + 1))
        for g in range(self.groups):
            piece = {k: v[starts[g] : starts[g + 1]] for k, v in rows.items()}
            top_estimates, totals = {}, {}
            for t, s in enumerate(self.plan.structures):
                mine = piece["table"] == t
                if s.level == TOP:
                    top_estimates[t] = piece["estimate"][mine]
                else:
                    totals[t] = float(piece["estimate"][mine][0])
            out.append(GroupPart(g, top_estimates, totals, 0, 0.0))
        return fit_top_from_summaries(self.plan, self.hierarchy, out, self.options)

    def fit(
        self,
        group: int,
        table: np.ndarray,
        cell: np.ndarray,
        value: np.ndarray,
        top: TopFixed | None,
    ) -> Columns:
        """Second pass: the group's consistent cells (top, table, cell, value), table order.

        ``value`` is int64 when integer, else float64 (the least squares alone when the
        solver's options are None; ``top`` is then unused).
        """
        sub_h, positions, sub_s, expected, wls = self._solve(group, table, cell, value)
        if self.options is None:
            fixed = wls.estimates
        else:
            sub = fit_one_group(
                group, self.plan, sub_s, sub_h, positions, wls.estimates, top, self.options
            )
            if self.options.integer:
                verify_group(self.plan, sub, self.options)
            fixed = [sub.fixed[t] for t in range(len(sub_s))]
        n = sum(c.size for c in expected)
        return {
            "top": np.full(n, group, dtype=np.int32),
            "table": np.concatenate(
                [np.full(c.size, t, dtype=np.int32) for t, c in enumerate(expected)]
            ),
            "cell": np.concatenate(expected),
            "value": np.concatenate(fixed),
        }


def group_solver(
    tables: Sequence[NoisyCounts | TableShape],
    hierarchy: Hierarchy | None,
    variances: Sequence[Fraction] | None = None,
    *,
    nonnegative: bool = True,
    integer: bool = True,
) -> GroupSolver:
    """The solver of ``make_consistent(tables, hierarchy, ...)`` one top-level group at a time.

    Raises :class:`PostprocessError` naming the table when a table couples the
    groups (it has no hierarchy key: a national table), before any work.
    """
    p = plan(tables, hierarchy)
    coupling = coupling_table(p, hierarchy)
    if coupling is not None:
        raise PostprocessError(
            f"table {coupling!r} has no hierarchy key, so it couples every top-level "
            "group; per-group post-processing needs every combined table keyed by a "
            "hierarchy level (post-process it on the driver, or key it by the top level)"
        )
    if variances is None:
        _, variances = checked_values(tables, p)
    options = FitOptions(nonnegative, integer) if (nonnegative or integer) else None
    return GroupSolver(p, hierarchy, tuple(Fraction(v) for v in variances), options)
