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

With national tables (no hierarchy key) the national cells form one more
block, ``top`` equal to the number of groups: every block's part also carries
its coupling contribution and covariance (:mod:`.coupled`), the top step
solves for the multiplier μ and fixes the national tables first, and each
group's second pass solves with its national contribution fixed by μ.
:func:`.consistent.solve_by_blocks` runs the same functions on the driver.

Pure post-processing of noisy values and public facts; deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import InternalError
from .coupled import (
    Coupling,
    block_estimate,
    block_system,
    coupled_refusal,
    coupling_multiplier,
    coupling_of,
    verify_national,
)
from .groups import (
    TOP,
    GroupPart,
    TopFixed,
    coupling_table,
    fit_top_from_summaries,
    group_cells,
    group_hierarchy,
    group_part,
    group_problem,
    group_structures,
    solve_group_wls,
    verify_group,
)
from .inputs import checked_values, method_name, variance_refusal
from .margins import moves, size_classes
from .plan import Plan, plan
from .structure import Hierarchy, NoisyCounts, PostprocessError, TableShape
from .topdown import FitOptions, Problem, fit_group

__all__ = ["WIDENED_COLUMN", "GroupSolver", "group_solver", "widened_column"]

Columns = dict[str, np.ndarray]
# Per fitted cell: the cells its table's controlled roundings in the group took outside
# the floor/ceil box, on the table's first cell of the group (`widened_column`).
WIDENED_COLUMN = "widened"


@dataclass(frozen=True)
class GroupSolver:
    """Public facts of one consistency problem: shapes, variances, hierarchy, options."""

    plan: Plan
    hierarchy: Hierarchy
    variances: tuple[Fraction, ...]
    options: FitOptions | None  # None: least squares estimates only (float64)
    coupling: Coupling | None = None  # national tables: one more block (see the module)

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

    @property
    def blocks(self) -> int:
        """Values of ``top``: the groups, and the national block when there is one."""
        return self.groups + (self.coupling is not None)

    @property
    def two_pass(self) -> bool:
        """True when the first pass and the top step run (else :meth:`fit` takes ``top`` None)."""
        return self.options is not None or self.coupling is not None

    def cells(self, values: Sequence[np.ndarray]) -> Columns:
        """Every table's cells as rows (top, table, cell, value), table by table in cell order."""
        tops, tables, cells, out = [], [], [], []
        for t, (s, v) in enumerate(zip(self.plan.structures, values, strict=True)):
            if s.geo_axis is None:  # a national table: the national block
                tops.append(np.full(s.cells, self.groups, dtype=np.int32))
            else:
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

    def _split(self, group: int, table: np.ndarray, cell: np.ndarray, value: np.ndarray):
        """The block's hierarchy, positions and shapes, and per table its cells and values."""
        national = group == self.groups
        if national:
            sub_h, positions, sub_s = None, None, self.plan.structures
        else:
            sub_h, positions = group_hierarchy(self.hierarchy, group)
            sub_s = group_structures(self.plan.structures, positions)
        step, move = np.diff(table), np.diff(cell)
        if not np.all((step > 0) | ((step == 0) & (move > 0))):  # not yet in (table, cell) order
            order = np.lexsort((cell, table))
            table, cell, value = table[order], cell[order], value[order]
        bounds = np.searchsorted(table, np.arange(len(sub_s) + 1))
        expected, values = [], []
        for t, s in enumerate(self.plan.structures):
            if (s.geo_axis is None) != national:  # the other kind of block's table
                want = np.empty(0, dtype=np.int64)
            elif national:
                want = np.arange(s.cells, dtype=np.int64)
            else:
                want = group_cells(s, positions)
            got = cell[bounds[t] : bounds[t + 1]]
            if not np.array_equal(got, want):
                raise InternalError(
                    f"table {s.name!r}: group {group} has {got.size} cells, expected "
                    f"{want.size} (every cell of the table once)"
                )
            expected.append(want)
            values.append(value[bounds[t] : bounds[t + 1]])
        return sub_h, positions, sub_s, expected, values

    def _solve(self, group: int, table: np.ndarray, cell: np.ndarray, value: np.ndarray):
        sub_h, positions, sub_s, expected, values = self._split(group, table, cell, value)
        wls = solve_group_wls(self.plan, self.variances, sub_s, sub_h, values)
        return sub_h, positions, sub_s, expected, wls

    def _block(self, group: int, split, systems: dict | None, covariances: bool = True):
        """Block ``group``'s tables (plan positions), its system and its data."""
        sub_h, _, sub_s, expected, values = split
        tables = [t for t, e in enumerate(expected) if e.size]
        structures = [sub_s[t] for t in tables]
        system = block_system(
            structures,
            tables,
            self.variances,
            self.plan,
            self.coupling,
            sub_h,
            systems,
            covariances,
        )
        y = np.concatenate([values[t] for t in tables]).astype(np.float64)
        return tables, system, y

    def part(
        self,
        group: int,
        table: np.ndarray,
        cell: np.ndarray,
        value: np.ndarray,
        systems: dict | None = None,
    ) -> Columns:
        """First pass: the group's least squares, reduced to what the top step needs.

        Rows: top-level tables' cells (``cell`` >= 0) and finer tables' group totals
        (``cell`` -1), with the group's conjugate gradient steps and residual; ``coupling``
        is empty (rows x 0) unless the solver has national tables (:meth:`_coupled_part`).
        """
        if self.coupling is not None:
            return self._coupled_part(group, table, cell, value, systems)
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
            "coupling": np.zeros((n, 0)),
        }

    def _coupled_part(self, group, table, cell, value, systems) -> Columns:
        """A block's summary rows with their sensitivity to μ, then its K coupling rows.

        Summary rows as :meth:`part`'s (for the national block: its tables' cells);
        coupling rows have ``table`` -1, ``cell`` k, the contribution ẑ_k as
        ``estimate`` and row k of the covariance C_b as ``coupling``.
        """
        split = self._split(group, table, cell, value)
        expected = split[3]
        tables, system, y = self._block(group, split, systems)
        estimate, steps, residual = block_estimate(system, y)
        tabs, cells = [], []
        for t in tables:
            if self.plan.structures[t].level <= TOP:
                tabs.append(np.full(expected[t].size, t, dtype=np.int32))
                cells.append(expected[t])
            else:
                tabs.append(np.array([t], dtype=np.int32))
                cells.append(np.array([-1], dtype=np.int64))
        k = self.coupling.size
        tabs.append(np.full(k, -1, dtype=np.int32))
        cells.append(np.arange(k, dtype=np.int64))
        n = sum(c.size for c in cells)
        return {
            "top": np.full(n, group, dtype=np.int32),
            "table": np.concatenate(tabs),
            "cell": np.concatenate(cells),
            "estimate": np.concatenate([system.rows @ estimate, system.M @ estimate]),
            "iterations": np.full(n, steps, dtype=np.int32),
            "residual": np.full(n, residual),
            "coupling": np.concatenate([system.sensitivity, system.covariance]),
        }

    def top(self, parts: Mapping[str, np.ndarray]) -> TopFixed:
        """On the driver: the national and top-level totals and tables from every part."""
        rows = {k: np.asarray(v) for k, v in parts.items()}
        order = np.lexsort((rows["cell"], rows["table"], rows["top"]))
        rows = {k: v[order] for k, v in rows.items()}
        if self.coupling is not None:
            return self._coupled_top(rows)
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

    def _coupled_top(self, rows: Columns) -> TopFixed:
        starts = np.searchsorted(rows["top"], np.arange(self.blocks + 1))
        pieces = [
            {k: v[starts[b] : starts[b + 1]] for k, v in rows.items()} for b in range(self.blocks)
        ]
        links = [piece["table"] == -1 for piece in pieces]  # sorted first: table -1
        mu = coupling_multiplier(
            [piece["coupling"][mine] for piece, mine in zip(pieces, links, strict=True)],
            [piece["estimate"][mine] for piece, mine in zip(pieces, links, strict=True)],
        )
        parts, national = [], {}
        for b, (piece, mine) in enumerate(zip(pieces, links, strict=True)):
            table = piece["table"][~mine]
            moved = piece["estimate"][~mine] - piece["coupling"][~mine] @ mu
            top_estimates, totals = {}, {}
            for t, s in enumerate(self.plan.structures):
                if b == self.groups and s.level < TOP:
                    national[t] = moved[table == t]
                elif b < self.groups and s.level == TOP:
                    top_estimates[t] = moved[table == t]
                elif b < self.groups and s.level > TOP:
                    totals[t] = float(moved[table == t][0])
            if b < self.groups:
                parts.append(GroupPart(b, top_estimates, totals, 0, 0.0))
        if self.options is None:
            return TopFixed({}, national, 0, mu)
        top = fit_top_from_summaries(self.plan, self.hierarchy, parts, self.options, national, mu)
        if self.options.integer:
            verify_national(self.plan, self.coupling, top.fixed, self.hierarchy)
        return top

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
        solver's options are None; ``top`` is then unused). With options, also ``moved``:
        the most the top-down step can have added to each cell's error, in
        `.margins.MOVE_UNITS`-ths of a count (:func:`.margins.moves`; the truth taken
        as non-negative when the step is), for the margin of error of ``value``, and
        ``size_class``: each cell's class by its noisy value (`.margins.size_classes`),
        and ``widened`` (`widened_column`).
        """
        expected, fixed = self.fitted(group, table, cell, value, top)
        least_squares = None
        widened: dict[int, int] = {}
        if isinstance(fixed, Problem):
            least_squares = list(fixed.estimates)
            fit_group(fixed, self.options)
            widened = fixed.widened
            fixed = self.fitted_values(fixed)
        elif self.options is not None:  # the national block: its tables as the top fixed them
            least_squares = [top.least_squares.get(t) for t in range(len(expected))]
        columns = self.fitted_columns(group, expected, fixed)
        if least_squares is not None:
            # The fitted cells are in (table, cell) order; their noisy values' classes
            # give the margins per class of the noisy value (`.margins.size_classes`).
            columns["size_class"] = size_classes(value[np.lexsort((cell, table))])
            columns["moved"] = np.concatenate(
                [
                    moves(f, ls, self.options.nonnegative)
                    if np.size(f)
                    else np.empty(0, dtype=np.int64)
                    for f, ls in zip(fixed, least_squares, strict=True)
                ]
            )
            columns[WIDENED_COLUMN] = widened_column(expected, widened)
        return columns

    def fitted(self, group, table, cell, value, top, systems: dict | None = None):
        """The block's expected cells per table and its top-down problem (unsolved).

        Instead of a problem: its least squares estimates when the options are None,
        the national tables as fixed by ``top`` for the national block.
        """
        if self.coupling is None:
            sub_h, positions, sub_s, expected, wls = self._solve(group, table, cell, value)
            estimates = wls.estimates
        else:
            split = self._split(group, table, cell, value)
            sub_h, positions, sub_s, expected, _ = split
            if group == self.groups:
                return expected, [top.fixed[t] if e.size else e for t, e in enumerate(expected)]
            tables, system, y = self._block(group, split, systems, covariances=False)
            estimate, _, _ = block_estimate(system, y, top.multiplier)
            bounds = np.cumsum([0, *(expected[t].size for t in tables)])
            estimates = [None] * len(expected)
            for k, t in enumerate(tables):
                estimates[t] = estimate[bounds[k] : bounds[k + 1]]
            for t in self.coupling.national:
                estimates[t] = np.asarray(top.fixed[t], dtype=np.float64)
        if self.options is None:
            return expected, [e if x.size else x for e, x in zip(estimates, expected, strict=True)]
        return expected, group_problem(self.plan, sub_s, sub_h, positions, estimates, top)

    def fitted_values(self, sub: Problem, check: bool = True) -> list[np.ndarray]:
        """A solved group problem's tables (``check``: margins verified); national ones empty."""
        if check and self.options.integer:
            verify_group(self.plan, sub, self.options)
        return [
            sub.fixed[t] if s.geo_axis is not None else sub.fixed[t][:0]
            for t, s in enumerate(self.plan.structures)
        ]

    def fitted_columns(self, group: int, expected, fixed) -> Columns:
        n = sum(c.size for c in expected)
        return {
            "top": np.full(n, group, dtype=np.int32),
            "table": np.concatenate(
                [np.full(c.size, t, dtype=np.int32) for t, c in enumerate(expected)]
            ),
            "cell": np.concatenate(expected),
            "value": np.concatenate([np.asarray(f) for f in fixed]),
        }


def widened_column(expected: Sequence[np.ndarray], widened: dict[int, int]) -> np.ndarray:
    """Per fitted cell (table order), the group's widened cells of its table on the table's
    first cell, 0 elsewhere: summed over a table's cells, the table's widened count."""
    out = np.zeros(sum(c.size for c in expected), dtype=np.int64)
    starts = np.cumsum([0, *(c.size for c in expected)])
    for t, n in widened.items():
        if expected[t].size:
            out[starts[t]] = n
    return out


def group_solver(
    tables: Sequence[NoisyCounts | TableShape],
    hierarchy: Hierarchy | None,
    variances: Sequence[Fraction] | None = None,
    *,
    nonnegative: bool = True,
    integer: bool = True,
) -> GroupSolver:
    """The solver of ``make_consistent(tables, hierarchy, ...)`` one top-level group at a time.

    National tables (no hierarchy key) are one more block, solved exactly with the
    groups (:mod:`.coupled`). Raises :class:`PostprocessError` before any work when
    they cannot be (:func:`.coupled.coupled_refusal` says why).
    """
    p = plan(tables, hierarchy)
    coupling = None
    if coupling_table(p, hierarchy) is not None:
        reason = coupled_refusal(p, hierarchy)
        if reason is not None:
            raise PostprocessError(f"per-group post-processing: {reason}")
        coupling = coupling_of(p, hierarchy)
    if variances is None:
        _, variances = checked_values(tables, p)
    reason = variance_refusal(p, [Fraction(v) for v in variances], coupling is not None)
    if reason is not None:
        raise PostprocessError(f"per-group post-processing: {reason}")
    options = FitOptions(nonnegative, integer) if (nonnegative or integer) else None
    return GroupSolver(p, hierarchy, tuple(Fraction(v) for v in variances), options, coupling)
