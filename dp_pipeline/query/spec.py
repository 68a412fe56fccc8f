"""`QuerySpec`: one DP aggregation (count, sum or mean over declared cells), validated whole.

Everything here is declarative and engine-free. The pandas engine and the
Spark engine both validate their parameters through `QuerySpec` (domains in
`dp_pipeline.query.domain`, value bounds in `dp_pipeline.query.bounds`) and
report the same `dp_pipeline.query.diagnostics.Diagnostics`, so one rule set
governs both and their releases are bit-identical.

Bounding. A *privacy unit* (one value of the optional ``privacy_unit`` column,
or every row when there is none) contributes to at most ``max_cells`` cells per
table and at most ``max_per_cell`` rows per cell; summed values are clamped into
``[lower, upper]`` and rounded to integer multiples of ``granularity``, so the
noised quantity is an integer sum in granularity units. The sensitivity vector
these bounds imply is what the accountant is told.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cached_property

from dp_pipeline.digest import digest_of
from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.mechanisms.registry import mechanism_to_dict
from dp_pipeline.query.bounds import ValueBounds, sum_units_problem
from dp_pipeline.query.domain import DEFAULT_CELL_LIMIT, CellDomain, build_cell_domain, positive_int
from dp_pipeline.query.sensitivity import sensitivity_vector
from dp_pipeline.randomness import MasterKey
from dp_pipeline.rational import exact_rational

__all__ = ["DEFAULT_NOISE_PARTITIONS", "QuerySpec", "SharedRows"]

DEFAULT_NOISE_PARTITIONS = 16
# Granularity units must be exact in float64 so both engines clamp identically.
STATISTICS = ("count", "sum", "mean")
Mechanism = DiscreteGaussian | DiscreteLaplace
NEIGHBOURING = ("add_remove", "replace")
ON_INVALID = ("drop", "error")


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


# Stated in every refusal of the sum limits of `dp_pipeline.query.exact_sums`.
@dataclass(frozen=True)
class QuerySpec:
    """The validated parameters of one DP aggregation, identical for both engines."""

    statistic: str
    cells: CellDomain
    noise: DiscreteGaussian | DiscreteLaplace
    key: MasterKey | None  # None only in the copies shipped to Spark tasks (`without_key`)
    release_id: str
    table: str
    privacy_unit: str | None
    max_cells: int
    max_per_cell: int
    column: str | None = None
    value_bounds: ValueBounds | None = None
    count_noise: DiscreteGaussian | DiscreteLaplace | None = None
    neighbouring: str = "add_remove"
    on_invalid: str = "drop"
    noise_partitions: int = DEFAULT_NOISE_PARTITIONS
    confidence: Fraction = Fraction(95, 100)
    delta: Fraction = Fraction(1, 10**6)
    # The digest of the release this query belongs to (`dp_pipeline.release.identity`);
    # empty in the library API, where the query's own digest identifies it.
    release_digest: str = ""
    # Tables combined by post-processing rank rows alike (None: the table's own rule).
    shared_rows: SharedRows | None = None

    @classmethod
    def build(
        cls,
        statistic: str,
        *,
        by: object,
        domains: object,
        noise: object,
        key: object,
        release_id: object,
        table: object,
        privacy_unit: object = None,
        max_cells: object = 1,
        max_per_cell: object = 1,
        column: object = None,
        bounds: object = None,
        granularity: object = 1,
        count_noise: object = None,
        neighbouring: object = "add_remove",
        on_invalid: object = "drop",
        noise_partitions: object = DEFAULT_NOISE_PARTITIONS,
        cell_limit: object = DEFAULT_CELL_LIMIT,
        confidence: object = Fraction(95, 100),
        delta: object = Fraction(1, 10**6),
        release_digest: str = "",
        shared_rows: SharedRows | None = None,
    ) -> QuerySpec:
        """Validate everything that does not need the data; raise before any work."""
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
        if not isinstance(noise, DiscreteGaussian | DiscreteLaplace):
            raise TypeError(
                f"noise must be a DiscreteGaussian or DiscreteLaplace, got {type(noise).__name__}"
            )
        if count_noise is not None:
            if statistic != "mean":
                raise ValueError("count_noise is only used by mean")
            if not isinstance(count_noise, DiscreteGaussian | DiscreteLaplace):
                raise TypeError(
                    f"count_noise must be a DiscreteGaussian or DiscreteLaplace, "
                    f"got {type(count_noise).__name__}"
                )
        if not isinstance(key, MasterKey):
            raise TypeError(f"key must be a dp_pipeline MasterKey, got {type(key).__name__}")
        for name, value in (("release_id", release_id), ("table", table)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        cells = build_cell_domain(by, domains, cell_limit)
        if privacy_unit is not None and not isinstance(privacy_unit, str):
            raise TypeError(f"privacy_unit must be a column name or None, got {privacy_unit!r}")
        if privacy_unit in cells.columns:
            raise ValueError(f"privacy_unit {privacy_unit!r} cannot also be a key column")
        max_cells = positive_int(max_cells, "max_cells")
        max_per_cell = positive_int(max_per_cell, "max_per_cell")
        value_bounds = None
        if statistic == "count":
            if column is not None or bounds is not None:
                raise ValueError("count takes no column or bounds; use sum or mean")
        else:
            if not isinstance(column, str):
                raise TypeError(
                    f"{statistic} needs column=<name of the summed column>, got {column!r}"
                )
            if column in cells.columns or column == privacy_unit:
                raise ValueError(f"summed column {column!r} cannot be a key or privacy unit column")
            if bounds is None:
                raise ValueError(
                    f"{statistic} of column {column!r} needs bounds=(lower, upper); bounds are "
                    f"never taken from the data"
                )
            value_bounds = ValueBounds.build(bounds, granularity)
            problem = sum_units_problem(
                value_bounds.max_abs_units, 1 if privacy_unit is None else max_per_cell
            )
            if problem is not None:
                raise ValueError(
                    f"max_per_cell {max_per_cell} with bounds {bounds!r} and granularity "
                    f"{granularity!r}: {problem}; lower max_per_cell, use tighter bounds or a "
                    f"coarser granularity"
                )
        if neighbouring not in NEIGHBOURING:
            raise ValueError(f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}")
        if on_invalid not in ON_INVALID:
            raise ValueError(f"on_invalid must be one of {ON_INVALID}, got {on_invalid!r}")
        noise_partitions = positive_int(noise_partitions, "noise_partitions")
        confidence = exact_rational(confidence, "confidence")
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence}")
        delta = exact_rational(delta, "delta")
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        if shared_rows is not None:
            if not isinstance(shared_rows, SharedRows):
                raise TypeError(f"shared_rows must be a SharedRows, got {shared_rows!r}")
            if statistic != "count" or (max_cells, max_per_cell) != (1, 1):
                raise ValueError(
                    f"table {table!r}: shared rows need a count with max_cells = max_per_cell "
                    f"= 1, got {statistic} with {max_cells} and {max_per_cell}"
                )
            missing = [c for c in cells.columns if c not in shared_rows.cells.columns]
            if missing:
                raise ValueError(f"table {table!r}: shared rows lack the key(s) {missing}")
        return cls(
            statistic=statistic,
            cells=cells,
            noise=noise,
            key=key,
            release_id=release_id,
            table=table,
            privacy_unit=privacy_unit,
            max_cells=max_cells,
            max_per_cell=max_per_cell,
            column=column,
            value_bounds=value_bounds,
            count_noise=count_noise
            if count_noise is not None
            else (noise if statistic == "mean" else None),
            neighbouring=neighbouring,
            on_invalid=on_invalid,
            noise_partitions=noise_partitions,
            confidence=confidence,
            delta=delta,
            release_digest=release_digest,
            shared_rows=shared_rows,
        )

    def without_key(self) -> QuerySpec:
        """This query without its master key: what Spark tasks receive.

        Aggregation tasks need no key material at all (bounding salts are derived
        on the driver); noise tasks get derived `StreamKey`s beside this copy.
        """
        return replace(self, key=None)

    def master_key(self) -> MasterKey:
        """The master key (driver only); an internal error on a shipped copy."""
        if self.key is None:
            raise InternalError(
                f"query {self.table!r}: the master key was needed on a copy made for Spark tasks"
            )
        return self.key

    def canonical(self) -> dict:
        """Every parameter that can change a released number, as exact JSON values.

        Not the key, the stream labels' names (release id, table) or what only
        shapes reports (confidence, delta of the margins) or errors (on_invalid).
        """
        bounds = self.value_bounds
        return {
            "statistic": self.statistic,
            "cells": [domain.canonical() for domain in self.cells.domains],
            "noise": mechanism_to_dict(self.noise),
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
            "noise_partitions": self.noise_partitions,
            # Only when set, so every other query keeps its digest (and its noise).
            **({} if self.shared_rows is None else {"shared_rows": self.shared_rows.canonical()}),
        }

    @cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of `canonical`: two queries share it only if they compute alike."""
        return digest_of(self.canonical())

    @property
    def effective_max_cells(self) -> int:
        """Cells one unit can change; without a privacy unit each row is a unit (1 cell)."""
        if self.privacy_unit is None:
            return 1
        return min(self.max_cells, self.cells.total)

    @property
    def effective_max_per_cell(self) -> int:
        return 1 if self.privacy_unit is None else self.max_per_cell

    def _sensitivity(self, statistic: str) -> tuple[int, ...]:
        bounds = self.value_bounds if statistic == "sum" else None
        return sensitivity_vector(
            statistic,
            max_cells=self.max_cells,
            max_per_cell=self.max_per_cell,
            neighbouring=self.neighbouring,
            cells=self.cells.total,
            privacy_unit=self.privacy_unit is not None,
            lower=None if bounds is None else bounds.lower_units,
            upper=None if bounds is None else bounds.upper_units,
        )

    def count_sensitivity(self) -> tuple[int, ...]:
        """Per-coordinate L∞ change of the count vector between neighbours.

        Adding or removing a unit changes at most ``max_cells`` counts by at most
        ``max_per_cell`` each. Replacing one changes at most twice as many cells
        (capped at the cell count); a cell both left and entered changes by at most
        ``max_per_cell`` too, since both counts lie in [0, max_per_cell]. Computed by
        `dp_pipeline.query.sensitivity.sensitivity_vector`, as the planner's.
        """
        return self._sensitivity("count")

    def sum_sensitivity(self) -> tuple[int, ...]:
        """Per-coordinate change of the sum vector, in granularity units.

        Add/remove: a unit's sum in a cell lies in [m·L, m·U] (m = max_per_cell,
        L, U the bounds in units), so it changes by at most m·max(|L|, |U|).
        Replace: a cell whose old and new contributions are both present changes
        by at most m·(U − L), which exceeds m·max(|L|, |U|) when L < 0 < U; each
        of the (up to 2·max_cells, at most the cell count) coordinates is therefore
        bounded by m·max(U − L, |L|, |U|), an upper bound on every neighbouring
        pattern. Computed by `dp_pipeline.query.sensitivity.sensitivity_vector`.
        """
        if self.value_bounds is None:
            raise ValueError("a count has no sum sensitivity")
        return self._sensitivity("sum")

    def measures(
        self,
    ) -> tuple[tuple[str, DiscreteGaussian | DiscreteLaplace, tuple[int, ...]], ...]:
        """(output value, mechanism, sensitivity vector) of every noised vector."""
        if self.statistic == "count":
            return (("count", self.noise, self.count_sensitivity()),)
        if self.statistic == "sum":
            return (("sum", self.noise, self.sum_sensitivity()),)
        return (
            ("sum", self.noise, self.sum_sensitivity()),
            ("count", self.count_noise, self.count_sensitivity()),
        )

    def stream_labels(self, value: str, partition: int) -> tuple[str | int, ...]:
        """Labels of the noise stream of one noise partition of one noised vector.

        (release id, table, release digest, query digest, statistic, measure,
        partition): the names a user chose, then what is measured. Two queries
        that compute anything differently (another statistic, domain, order,
        bound or noise) never share a stream, even under the same release id
        and table; a release's queries also carry the release's digest, which
        covers its whole spec and its input's fingerprint.
        """
        return (
            "query-noise/v2",
            self.release_id,
            self.table,
            self.release_digest,
            self.digest,
            self.statistic,
            value,
            partition,
        )
