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

__all__ = ["Constraint", "FixedMargin", "Plan", "TablePlan", "check_combinable", "plan"]

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
class TablePlan:
    """How one table is fitted: children of one fixed margin, or a two-way table."""

    table: int
    fixed: tuple[FixedMargin, ...]  # one or two maximal margins; rows first for two

    @property
    def two_way(self) -> bool:
        return len(self.fixed) == 2


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


def _order(structures: Sequence[TableStructure], hierarchy: Hierarchy | None):
    positions = sorted(range(len(structures)), key=lambda i: (structures[i].level, i))
    done: list[int] = []
    order = []
    for t in positions:
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
        if len(fixed) == 2:
            fixed.sort(key=lambda f: (-f.margin.level, f.source is not None, f.source or 0))
        order.append(TablePlan(t, tuple(fixed)))
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
