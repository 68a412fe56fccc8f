"""Which margins must agree, and in which order the top-down step fixes them.

Consistency rule: every pair of tables agrees on its common margin (geography at
the coarser of the two levels, the non-geography keys both have). The least
squares step needs these equalities without redundancy; the top-down step needs,
for each table, the maximal set of margins already fixed by earlier tables or by
the geography totals. A table whose fixed margins are one margin, or two margins
forming a two-way table (rows x columns within each group), is solved exactly;
anything else is refused by :func:`check_combinable` before any budget is spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .structure import (
    HasShape,
    Hierarchy,
    Margin,
    PostprocessError,
    TableStructure,
    common_margin,
    describe_margin,
    validate_shapes,
)

__all__ = [
    "Constraint",
    "FixedMargin",
    "OwnMargin",
    "Plan",
    "TablePlan",
    "check_combinable",
    "plan",
]

GEOGRAPHY = "geography totals"


@dataclass(frozen=True)
class Constraint:
    """Tables ``a`` and ``b`` (positions) must agree on ``margin``."""

    a: int
    b: int
    margin: Margin


@dataclass(frozen=True)
class FixedMargin:
    """A margin fixed before a table is processed; ``source`` is a table position or None."""

    margin: Margin
    source: int | None  # None: the geography totals


@dataclass(frozen=True)
class OwnMargin:
    """A margin a table shares with a later table, fixed first from the table's own estimates.

    ``fixed``: the one or two maximal margins already fixed that it must match (rows
    first for two), as for a table.
    """

    margin: Margin
    fixed: tuple[FixedMargin, ...]


@dataclass(frozen=True)
class TablePlan:
    """How one table is fitted: children of one fixed margin, or a two-way table.

    A fixed margin whose ``source`` is the table itself is one of its ``own`` margins,
    fitted just before the table (in the order of ``own``).
    """

    table: int
    fixed: tuple[FixedMargin, ...]  # one or two maximal margins; rows first for two
    own: tuple[OwnMargin, ...] = ()

    @property
    def two_way(self) -> bool:
        return len(self.fixed) == 2

    @property
    def takes(self) -> tuple[FixedMargin, ...]:
        """Every margin fixed before the table that it or its own margins must match."""
        return (*self.fixed, *(f for o in self.own for f in o.fixed))


@dataclass(frozen=True)
class Plan:
    structures: tuple[TableStructure, ...]
    constraints: tuple[Constraint, ...]
    order: tuple[TablePlan, ...]  # tables in processing order
    finest_level: int


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> bool:
        ri, rj = self.find(i), self.find(j)
        if ri == rj:
            return False
        self.parent[max(ri, rj)] = min(ri, rj)
        return True


def _constraints(structures: Sequence[TableStructure]) -> tuple[Constraint, ...]:
    """A non-redundant set of equalities equivalent to all pairwise common margins.

    For each distinct pair margin m, pairs whose common margin is strictly finer
    than m (and implies it) already make their tables agree on m; among the pairs
    whose common margin is exactly m, a spanning forest (cheapest pairs first)
    completes the agreement. Equality is transitive, so this is equivalent.
    """
    n = len(structures)
    pairs = {}
    for i in range(n):
        for j in range(i + 1, n):
            pairs[(i, j)] = common_margin(structures[i], structures[j])
    margins = sorted(set(pairs.values()), key=lambda m: (-m.level, -len(m.keys), m.keys))
    out = []
    for m in margins:
        uf = _UnionFind(n)
        for (i, j), pm in pairs.items():
            if pm != m and pm.implies(m):
                uf.union(i, j)
        exact = [p for p, pm in pairs.items() if pm == m]
        exact.sort(key=lambda p: (structures[p[0]].cells + structures[p[1]].cells, p))
        for i, j in exact:
            if uf.union(i, j):
                out.append(Constraint(i, j, m))
    return tuple(out)


def _maximal(candidates: list[FixedMargin]) -> list[FixedMargin]:
    """Drop margins implied by another candidate (the first of equal ones is kept)."""
    kept: list[FixedMargin] = []
    for c in candidates:
        if any(k.margin.implies(c.margin) for k in kept):
            continue
        kept = [k for k in kept if not c.margin.implies(k.margin)]
        kept.append(c)
    return kept


def _source_name(fixed: FixedMargin, structures, hierarchy) -> str:
    what = describe_margin(fixed.margin, hierarchy)
    if fixed.source is None:
        return f"{what} ({GEOGRAPHY})"
    return f"{what} (from table {structures[fixed.source].name!r})"


def _two_sorted(fixed: list[FixedMargin]) -> tuple[FixedMargin, ...]:
    if len(fixed) == 2:
        fixed.sort(key=lambda f: (-f.margin.level, f.source is not None, f.source or 0))
    return tuple(fixed)


def _margin_table(s: TableStructure, margin: Margin) -> TableStructure:
    """``margin`` of table ``s`` as a table shape (for its common margins with others)."""
    keys = tuple(k for k in s.keys if k in margin.keys or s.keys.index(k) == s.geo_axis)
    sizes = tuple(s.key_size(k) for k in keys)
    geo_axis = None if s.geo_axis is None else keys.index(s.keys[s.geo_axis])
    return TableStructure(s.name, keys, sizes, s.level, geo_axis)


def _own_margins(
    t: int,
    fixed: list[FixedMargin],
    structures: Sequence[TableStructure],
    later: Sequence[int],
    done: Sequence[int],
) -> tuple[list[FixedMargin], tuple[OwnMargin, ...]]:
    """Margins table ``t`` shares with ``later`` tables, to fix from its own estimates first.

    Top-down fixes a table's cells to the margins of the tables before it only; a
    margin it shares with a later, more precise table (a county x sex table with a
    large budget beside a state x age x sex one) would otherwise be whatever the
    earlier table's projection and rounding made of it, and the later table would
    have to absorb that. Fixed first from the least squares estimate (where every
    table's measurements of it are weighted by their inverse variances), the margin
    moves only by its own rounding. The first such margin (in the order of the later
    tables) is taken that is not the whole table, not implied by what is fixed, and
    leaves the table and the margin solvable exactly (at most two fixed margins each);
    at most one. With none, the table keeps the plain plan.
    """
    s = structures[t]
    wanted = []
    for u in later:
        m = common_margin(s, structures[u])
        if m == s.full_margin or any(f.margin.implies(m) for f in fixed):
            continue
        if any(w.implies(m) for w in wanted):
            continue
        wanted = [w for w in wanted if not m.implies(w)] + [m]
    for m in wanted:
        shape = _margin_table(s, m)
        candidates = [FixedMargin(Margin(m.level, ()), None)]
        candidates += [FixedMargin(common_margin(shape, structures[u]), u) for u in done]
        own_fixed = _maximal(candidates)
        trial = _maximal([*fixed, FixedMargin(m, t)])
        if len(own_fixed) > 2 or len(trial) > 2:
            continue
        # One own margin: two fitted apart could disagree on their common margin.
        return trial, (OwnMargin(m, _two_sorted(own_fixed)),)
    return fixed, ()


def _order(structures: Sequence[TableStructure], hierarchy: Hierarchy | None):
    positions = sorted(range(len(structures)), key=lambda i: (structures[i].level, i))
    done: list[int] = []
    order = []
    for k, t in enumerate(positions):
        s = structures[t]
        candidates = [FixedMargin(Margin(s.level, ()), None)]
        candidates += [FixedMargin(common_margin(s, structures[u]), u) for u in done]
        fixed = _maximal(candidates)
        if len(fixed) > 2:
            names = "; ".join(_source_name(f, structures, hierarchy) for f in fixed)
            raise PostprocessError(
                f"table {s.name!r} cannot be made consistent exactly: its cells would have "
                f"to match {len(fixed)} fixed margins that are not nested ({names}); "
                "at most two can be matched exactly (a two-way table); leave one of the "
                "tables named here out of the consistency step"
            )
        fixed, own = _own_margins(t, fixed, structures, positions[k + 1 :], done)
        order.append(TablePlan(t, _two_sorted(fixed), own))
        done.append(t)
    return tuple(order)


def plan(tables: Sequence[HasShape], hierarchy: Hierarchy | None) -> Plan:
    """Validate the shapes and derive the equalities and the top-down order."""
    structures = tuple(validate_shapes(list(tables), hierarchy))
    finest = max(s.level for s in structures)
    return Plan(structures, _constraints(structures), _order(structures, hierarchy), finest)


def check_combinable(tables: Sequence[HasShape], hierarchy: Hierarchy | None) -> None:
    """Raise :class:`PostprocessError` unless ``make_consistent`` can solve these tables exactly.

    ``tables`` need only ``name``, ``keys`` and ``sizes`` (e.g. :class:`TableShape`);
    no values are read, so this runs before any budget is spent.
    """
    plan(tables, hierarchy)
