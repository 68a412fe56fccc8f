"""What a DP aggregation computes, one parameter object per statistic: `CountQuery`, `SumQuery`,
`MeanQuery`. Key-free: no master key, stream labels or noise partitions (those are the run
context, `dp_pipeline.query.context.RunContext`).

Bounding. A *privacy unit* (one value of the optional ``privacy_unit`` column,
or every row when there is none) contributes to at most ``max_cells`` cells per
table and at most ``max_per_cell`` rows per cell; summed values are clamped into
``[lower, upper]`` and rounded to integer multiples of ``granularity``, so the
noised quantity is an integer sum in granularity units. The sensitivity vector
these bounds imply (`dp_pipeline.query.sensitivity.sensitivity_vector`, the one
function the planner and the engines both call) is what the accountant is told.

The release planner builds the same objects with ``noise=None`` (the noise is
calibrated from their sensitivity) and then `with_noise`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from fractions import Fraction
from typing import Any, ClassVar

from dp_pipeline.accounting.events import PrivacyEvent
from dp_pipeline.errors import DPTypeError, DPValueError, InternalError
from dp_pipeline.mechanisms.registry import mechanism_to_dict
from dp_pipeline.query.aggregation_checks import (
    DEFAULT_CONFIDENCE,
    DEFAULT_REPORT_DELTA,
    Mechanism,
    check_summed_column,
    checked_noise,
    checked_parameters,
    summed_value_bounds,
)
from dp_pipeline.query.bounds import ValueBounds
from dp_pipeline.query.domain import DEFAULT_CELL_LIMIT, CellDomain, Domains, KeyColumns
from dp_pipeline.query.hierarchy import HierarchyRule
from dp_pipeline.query.sensitivity import sensitivity_vector
from dp_pipeline.rational import RationalLike

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "CountQuery",
    "MeanQuery",
    "Mechanism",
    "SharedRows",
    "SumQuery",
    "aggregation_query",
]


@dataclass(frozen=True)
class SharedRows:
    """Count tables of one group keep the same row of every privacy unit.

    ``cells`` is the product of the union of the group's key columns: each row
    is ranked by its cell index there (the same in every table of the group),
    with one keyed salt for the ``group``, so every table keeps the unit's best
    row and the tables' true margins agree. Needs ``max_cells = max_per_cell = 1``.
    """

    cells: CellDomain
    group: str

    def canonical(self) -> dict:
        return {"cells": [d.canonical() for d in self.cells.domains], "group": self.group}


@dataclass(frozen=True)
class Aggregation:
    """The validated, key-free parameters of one DP aggregation over declared cells.

    ``noise`` is None only while a release plan calibrates it (`with_noise`).
    """

    statistic: ClassVar[str] = ""
    cells: CellDomain
    noise: Mechanism | None
    privacy_unit: str | None
    max_cells: int
    max_per_cell: int
    column: str | None = None
    value_bounds: ValueBounds | None = None
    count_noise: Mechanism | None = None
    neighbouring: str = "add_remove"
    on_invalid: str = "drop"
    confidence: Fraction = DEFAULT_CONFIDENCE
    delta: Fraction = DEFAULT_REPORT_DELTA
    # Tables combined by post-processing rank rows alike (None: the table's own rule).
    shared_rows: SharedRows | None = None
    # Tables made consistent over a public hierarchy drop rows that break it.
    hierarchy: HierarchyRule | None = None

    @classmethod
    def _checked(cls, **parameters) -> Aggregation:
        """A ``cls`` of the parameters `checked_parameters` validates (the same keywords)."""
        return cls(**checked_parameters(**parameters))

    @classmethod
    def _retyped(cls, query: Aggregation) -> Aggregation:
        """``query``'s parameters as a ``cls`` (a sum's or mean's cells are a count's)."""
        return cls(**{field.name: getattr(query, field.name) for field in fields(query)})

    def with_shared_rows(self, shared_rows: SharedRows, table: str) -> Aggregation:
        """This count or sum ranking each unit's rows as its group does (``table`` names errors)."""
        if not isinstance(shared_rows, SharedRows):
            raise DPTypeError(f"shared_rows must be a SharedRows, got {shared_rows!r}")
        if self.statistic not in ("count", "sum") or (self.max_cells, self.max_per_cell) != (1, 1):
            raise DPValueError(
                f"table {table!r}: shared rows need a count or sum with max_cells = "
                f"max_per_cell = 1, got {self.statistic} with {self.max_cells} and "
                f"{self.max_per_cell}"
            )
        missing = [c for c in self.cells.columns if c not in shared_rows.cells.columns]
        if missing:
            raise DPValueError(f"table {table!r}: shared rows lack the key(s) {missing}")
        return replace(self, shared_rows=shared_rows)

    def with_hierarchy(self, hierarchy: HierarchyRule) -> Aggregation:
        """This query dropping the rows that break ``hierarchy`` (`dp_pipeline.query.hierarchy`)."""
        if not isinstance(hierarchy, HierarchyRule):
            raise DPTypeError(f"hierarchy must be a HierarchyRule, got {hierarchy!r}")
        return replace(self, hierarchy=hierarchy)

    def counting_cells(self, cells: CellDomain) -> CountQuery:
        """A count over ``cells`` with this query's unit, bounds and noise, own row rule."""
        values = {field.name: getattr(self, field.name) for field in fields(self)}
        values.update(cells=cells, column=None, value_bounds=None, count_noise=None)
        return CountQuery(**{**values, "shared_rows": None, "hierarchy": None})

    def with_noise(self, noise: Mechanism, count_noise: Mechanism | None = None) -> Aggregation:
        """This query with its (calibrated) mechanisms; a mean's count defaults to ``noise``."""
        noise = checked_noise(noise, "noise", False)
        if self.statistic != "mean":
            if count_noise is not None:
                raise DPValueError("count_noise is only used by mean")
            return replace(self, noise=noise)
        count_noise = checked_noise(count_noise, "count_noise", True)
        return replace(self, noise=noise, count_noise=count_noise or noise)

    def mechanism(self) -> Mechanism:
        """The noise, which must have been set (an internal error in an uncalibrated plan)."""
        if self.noise is None:
            raise InternalError(f"{self.statistic} query: its noise was never calibrated")
        return self.noise

    def canonical(self) -> dict:
        """Every parameter that can change a released number, as exact JSON values.

        Not what only shapes reports (confidence, delta of the margins) or errors
        (on_invalid); the run context adds its noise partitions.
        """
        bounds = self.value_bounds
        return {
            "statistic": self.statistic,
            "cells": [domain.canonical() for domain in self.cells.domains],
            "noise": mechanism_to_dict(self.mechanism()),
            "count_noise": None
            if self.count_noise is None
            else mechanism_to_dict(self.count_noise),
            "privacy_unit": self.privacy_unit,
            "max_cells": self.max_cells,
            "max_per_cell": self.max_per_cell,
            "column": self.column,
            "bounds": None
            if bounds is None
            else [str(bounds.lower), str(bounds.upper), str(bounds.granularity)],
            "neighbouring": self.neighbouring,
            # Only when set, so every other query keeps its digest (and its noise).
            **({} if self.shared_rows is None else {"shared_rows": self.shared_rows.canonical()}),
            **({} if self.hierarchy is None else {"hierarchy": self.hierarchy.canonical()}),
        }

    @property
    def effective_max_cells(self) -> int:
        """Cells one unit can change; without a privacy unit each row is a unit (1 cell)."""
        if self.privacy_unit is None:
            return 1
        return min(self.max_cells, self.cells.total)

    @property
    def effective_max_per_cell(self) -> int:
        return 1 if self.privacy_unit is None else self.max_per_cell

    def sensitivity(self, measure: str) -> tuple[int, ...]:
        """Per-coordinate L∞ change of the ``measure`` ("count" or "sum") vector between
        neighbours, in noised integer units (granularity units for a sum), from
        `dp_pipeline.query.sensitivity.sensitivity_vector` (derivation there)."""
        bounds = self.value_bounds if measure == "sum" else None
        if measure == "sum" and bounds is None:
            raise DPValueError("a count has no sum sensitivity")
        return sensitivity_vector(
            measure,
            max_cells=self.max_cells,
            max_per_cell=self.max_per_cell,
            neighbouring=self.neighbouring,
            cells=self.cells.total,
            privacy_unit=self.privacy_unit is not None,
            lower=None if bounds is None else bounds.lower_units,
            upper=None if bounds is None else bounds.upper_units,
        )

    def count_sensitivity(self) -> tuple[int, ...]:
        """The count vector's sensitivity (`sensitivity`)."""
        return self.sensitivity("count")

    def sum_sensitivity(self) -> tuple[int, ...]:
        """The sum vector's sensitivity in granularity units (`sensitivity`)."""
        return self.sensitivity("sum")

    @classmethod
    def parameter_sources(cls) -> tuple[Callable[..., Aggregation], ...]:
        """The builds whose parameters make this statistic's public signature."""
        raise InternalError(f"{cls.__name__} does not define its parameter sources")

    def measures(self) -> tuple[tuple[str, Mechanism, tuple[int, ...]], ...]:
        """(output value, mechanism, sensitivity vector) of every noised vector."""
        raise InternalError(f"{type(self).__name__} does not define its measures")

    def events(self) -> tuple[PrivacyEvent, ...]:
        """What one run costs: a `PrivacyEvent` (mechanism, shifts, one run) per noised vector."""
        return tuple(PrivacyEvent(noise, tuple(shifts), 1) for _, noise, shifts in self.measures())


@dataclass(frozen=True)
class CountQuery(Aggregation):
    """Noisy row count of every declared cell (zero counts included): columns by + count.

    Each unit changes at most ``max_cells`` counts by at most ``max_per_cell``;
    that sensitivity vector is what the accountant is told.
    """

    statistic: ClassVar[str] = "count"

    @classmethod
    def build(
        cls,
        *,
        by: KeyColumns,
        domains: Domains,
        noise: Mechanism | None = None,
        privacy_unit: str | None = None,
        max_cells: int = 1,
        max_per_cell: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence: RationalLike = DEFAULT_CONFIDENCE,
        delta: RationalLike | None = None,
        allow_no_noise: bool = False,
    ) -> CountQuery:
        """Validate everything that does not need the data; raise before any work."""
        return cls._checked(**_without_cls(locals()))

    @classmethod
    def parameter_sources(cls) -> tuple:
        """The builds whose parameters make this statistic's public signature."""
        return (CountQuery.build,)

    def measures(self) -> tuple[tuple[str, Mechanism, tuple[int, ...]], ...]:
        return (("count", self.mechanism(), self.count_sensitivity()),)


@dataclass(frozen=True)
class SumQuery(Aggregation):
    """Noisy sum of ``column`` per cell: by + sum.

    Values are clamped into ``bounds`` and rounded to multiples of
    ``granularity``; the noise is added to the integer sum in granularity units.
    """

    statistic: ClassVar[str] = "sum"

    @classmethod
    def build(
        cls,
        column: str,
        *,
        bounds: tuple[RationalLike, RationalLike],
        granularity: RationalLike = 1,
        **cells: Any,
    ) -> SumQuery:
        """Validate everything that does not need the data; raise before any work.

        ``cells``: the arguments of `CountQuery.build` (cells, noise, contribution bounds).
        """
        query = cls._retyped(CountQuery.build(**cells))
        check_summed_column(cls.statistic, column, query.cells, query.privacy_unit, bounds)
        return replace(
            query, column=column, value_bounds=summed_value_bounds(query, bounds, granularity)
        )

    @classmethod
    def parameter_sources(cls) -> tuple:
        return (SumQuery.build, *CountQuery.parameter_sources())

    def measures(self) -> tuple[tuple[str, Mechanism, tuple[int, ...]], ...]:
        return (("sum", self.mechanism(), self.sum_sensitivity()),)


@dataclass(frozen=True)
class MeanQuery(SumQuery):
    """Noisy sum, noisy count and mean = sum / max(count, 1) clipped into bounds.

    The budget is split between the sum (``noise``) and the count
    (``count_noise``, default the same mechanism); both are composed by the
    accountant and the result's ``budget_split`` states each share of ρ.
    """

    statistic: ClassVar[str] = "mean"

    @classmethod
    def build(
        cls, column: str, *, count_noise: Mechanism | None = None, **sum_arguments: Any
    ) -> MeanQuery:
        """Validate everything that does not need the data; raise before any work.

        ``sum_arguments``: the arguments of `SumQuery.build` but its column.
        """
        count_noise = checked_noise(count_noise, "count_noise", True)
        query = super().build(column, **sum_arguments)
        return replace(query, count_noise=count_noise if count_noise is not None else query.noise)

    @classmethod
    def parameter_sources(cls) -> tuple:
        return (MeanQuery.build, *SumQuery.parameter_sources())

    def measures(self) -> tuple[tuple[str, Mechanism, tuple[int, ...]], ...]:
        count_noise = self.count_noise if self.count_noise is not None else self.mechanism()
        return (
            ("sum", self.mechanism(), self.sum_sensitivity()),
            ("count", count_noise, self.count_sensitivity()),
        )


AGGREGATIONS: dict[str, type[Aggregation]] = {
    query.statistic: query for query in (CountQuery, SumQuery, MeanQuery)
}


def aggregation_query(statistic: str, **parameters) -> Aggregation:
    """The parameter object of ``statistic`` ("count", "sum" or "mean"), validated."""
    if statistic not in AGGREGATIONS:
        raise DPValueError(f"statistic must be one of {tuple(AGGREGATIONS)}, got {statistic!r}")
    kind = AGGREGATIONS[statistic]
    if statistic == "count" and (
        parameters.get("column") is not None or parameters.get("bounds") is not None
    ):
        raise DPValueError("count takes no column or bounds; use sum or mean")
    if statistic == "count":
        parameters = {k: v for k, v in parameters.items() if k not in ("column", "bounds")}
    if statistic != "mean" and parameters.get("count_noise") is not None:
        raise DPValueError("count_noise is only used by mean")
    if statistic != "mean":
        parameters.pop("count_noise", None)
    if statistic == "count":
        parameters.pop("granularity", None)
    elif "column" not in parameters:
        parameters["column"] = None
    return kind.build(**parameters)


def _without_cls(local_vars: dict) -> dict:
    return {name: value for name, value in local_vars.items() if name != "cls"}
