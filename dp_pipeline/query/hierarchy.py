"""`HierarchyRule`: the public geography a row must agree with (key-free, no data).

Tables made consistent over a public hierarchy (each county in one state) must
describe the same persons, or their margins cannot agree: a row whose state is
not its county's state would be counted in its county's state by the county
tables (through the mapping) and in another state by the state tables, and a
row with a null county would be counted by the state tables only. Every table
of such a set drops these rows, before contribution bounding, under the
invalid-row reason code ``hierarchy_mismatch``.

A row keeps the rule when its finest checked level (the finest hierarchy level
among the set's keys) has a value in its domain, and every coarser checked
level holds exactly that value's ancestor in the mapping (a null coarser value
breaks the rule). The engines apply it with one lookup per coarser level:
`dp_pipeline.engines.numpy_rules.hierarchy_breaks` (pandas, the Parquet pass)
and `dp_pipeline.engines.spark_sql.coding.hierarchy_broken` (Spark SQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dp_pipeline.digest import digest_of
from dp_pipeline.errors import DPValueError
from dp_pipeline.query.domain import Domain

__all__ = ["HIERARCHY_MISMATCH", "HIERARCHY_RULE", "HierarchyRule"]

HIERARCHY_MISMATCH = "hierarchy_mismatch"
# The rule a breaking row breaks, as the on_invalid="error" messages state it.
HIERARCHY_RULE = (
    "break the public hierarchy mapping (the finest geography is null or outside its "
    "domain, or a coarser geography is not its ancestor in the mapping)"
)


@dataclass(frozen=True, eq=False)
class HierarchyRule:
    """The finest checked geography, the coarser ones, and each coarser one's ancestors.

    ``ancestors[i][j]`` is the position, in ``coarser[i]``'s domain, of the
    ancestor of position ``j`` of ``finest``'s domain (int64, one per position).
    Compared by identity; `canonical` names what it checks.
    """

    finest: Domain
    coarser: tuple[Domain, ...]
    ancestors: tuple[np.ndarray, ...]

    @classmethod
    def build(
        cls, finest: Domain, coarser: Sequence[Domain], ancestors: Sequence[Sequence[int]]
    ) -> HierarchyRule:
        """Check the shapes: one ancestor per finest position, each inside its level's domain."""
        coarser = tuple(coarser)
        arrays = tuple(np.asarray(a, dtype=np.int64) for a in ancestors)
        if len(arrays) != len(coarser):
            raise DPValueError(
                f"hierarchy rule: {len(coarser)} coarser level(s) but {len(arrays)} ancestor lists"
            )
        for domain, array in zip(coarser, arrays, strict=True):
            if array.shape != (finest.size,):
                raise DPValueError(
                    f"hierarchy rule: level {domain.column!r} needs one ancestor for each of the "
                    f"{finest.size} values of {finest.column!r}, got {array.size}"
                )
            if array.size and (array.min() < 0 or array.max() >= domain.size):
                raise DPValueError(
                    f"hierarchy rule: an ancestor in level {domain.column!r} lies outside its "
                    f"domain of {domain.size} values"
                )
            array.setflags(write=False)
        return cls(finest, coarser, arrays)

    @property
    def columns(self) -> tuple[str, ...]:
        """The checked key columns, finest first."""
        return (self.finest.column, *(d.column for d in self.coarser))

    @property
    def domains(self) -> tuple[Domain, ...]:
        return (self.finest, *self.coarser)

    @cached_property
    def _canonical(self) -> dict:
        return {
            "finest": self.finest.canonical(),
            "coarser": [d.canonical() for d in self.coarser],
            "ancestors": digest_of([a.tolist() for a in self.ancestors]),
        }

    def canonical(self) -> dict:
        """The checked domains and a digest of the ancestors (exact JSON values)."""
        return self._canonical

    @cached_property
    def key(self) -> str:
        """SHA-256 (hex) of `canonical`: equal rules have equal keys (engines share one
        lookup among the tables of a set by it)."""
        return digest_of(self._canonical)

    def __repr__(self) -> str:
        return f"HierarchyRule({' -> '.join(reversed(self.columns))})"
