"""The aggregation rules both engines share: domains, cells, bounds, sensitivity, diagnostics.

Everything here is declarative and engine-free. The pandas engine
(`dp_pipeline.engines.pandas.aggregate`) and the Spark engine (`dp_pipeline.spark`)
both validate their parameters through `QuerySpec`, index cells with the same
mixed-radix rule, and report the same `Diagnostics`, so one rule set governs
both and their releases are bit-identical.

Cells. Each key column has a declared `Domain` (an integer range or an
explicit list of values). A cell is one combination of key values; its *cell
index* is the mixed-radix number whose digits are the positions of the values
in their domains, the first key column most significant. The index gives a
total order of the cells that depends only on the declared domains, never on
the data or on the engine.

Bounding. A *privacy unit* (one value of the optional ``privacy_unit`` column,
or every row when there is none) contributes to at most ``max_cells`` cells per
table and at most ``max_per_cell`` rows per cell; summed values are clamped into
``[lower, upper]`` and rounded to integer multiples of ``granularity``, so the
noised quantity is an integer sum in granularity units. The sensitivity vector
these bounds imply is what the accountant is told.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property

import numpy as np
import pandas as pd

from dp_pipeline.digest import digest_of
from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.mechanisms.registry import mechanism_to_dict
from dp_pipeline.query.exact_sums import MAX_SUM_UNITS, SUM_LIMIT
from dp_pipeline.randomness import MasterKey
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = [
    "DEFAULT_CELL_LIMIT",
    "DEFAULT_NOISE_PARTITIONS",
    "CellDomain",
    "Diagnostics",
    "Domain",
    "QuerySpec",
    "ValueBounds",
    "build_cell_domain",
    "invalid_rows_error",
]

DEFAULT_NOISE_PARTITIONS = 16
DEFAULT_CELL_LIMIT = 10_000_000
# Cell indexes are int64 in both engines; keep well clear of overflow.
_MAX_CELL_LIMIT = 2**40
# Granularity units must be exact in float64 so both engines clamp identically.
_MAX_UNITS = 2**53
_STATISTICS = ("count", "sum", "mean")
Mechanism = DiscreteGaussian | DiscreteLaplace
_NEIGHBOURING = ("add_remove", "replace")
_ON_INVALID = ("drop", "error")
# Stated in every refusal of the sum limits of `dp_pipeline.query.exact_sums`.
SUM_UNITS_RULE = (
    f"a summed value may be at most 2**31 = {MAX_SUM_UNITS:,} granularity units in absolute "
    f"value, so that the sum of any cell of fewer than 2**31 rows is exact (totals are "
    f"clamped into ±2**62 before noise)"
)
UNIT_SUM_RULE = (
    f"one privacy unit's sum in one cell may be at most 2**62 = {SUM_LIMIT:,} granularity "
    f"units, so that it is summed exactly in int64"
)


def sum_units_problem(largest_units: int, max_per_cell: int | None) -> str | None:
    """The sum limit (if any) that bounds of ``largest_units`` granularity units break.

    None when both hold: ``largest_units <= 2**31`` and (with ``max_per_cell``)
    ``max_per_cell * largest_units <= 2**62``. Otherwise a sentence naming the
    value and the rule, for the caller to prefix with the field.
    """
    if largest_units > MAX_SUM_UNITS:
        return (
            f"the largest |bound| is {largest_units:,} granularity units, above the limit: "
            f"{SUM_UNITS_RULE}"
        )
    if max_per_cell is not None and max_per_cell * largest_units > SUM_LIMIT:
        return (
            f"max_per_cell x the largest |bound| is {max_per_cell * largest_units:,} "
            f"granularity units, above the limit: {UNIT_SUM_RULE}"
        )
    return None


def _is_integer(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _positive_int(value: object, name: str) -> int:
    if not _is_integer(value):
        raise TypeError(f"{name} must be a positive integer, got {value!r}")
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return int(value)


class Domain:
    """The declared values of one key column, in release order.

    Either an integer range (``Domain.integer_range(column, start, stop)``,
    ``stop`` exclusive like Python's ``range``) or an explicit list of distinct
    integers or distinct strings. Null, NaN, bool and unhashable values are
    refused, as are duplicates and empty domains; every message names the column.
    """

    __slots__ = ("_index", "column", "kind", "start", "stop", "values")

    def __init__(self, column: str, values: Sequence[object]) -> None:
        self.column = column
        if isinstance(values, str | bytes) or not isinstance(
            values, Sequence | np.ndarray | pd.Index
        ):
            raise TypeError(
                f"domain of column {column!r} must be a range or a list of values, "
                f"got {type(values).__name__}"
            )
        values = list(values)
        if not values:
            raise ValueError(f"domain of column {column!r} is empty; declare at least one value")
        seen: set[object] = set()
        kinds = set()
        for value in values:
            try:
                hash(value)
            except TypeError:
                raise TypeError(
                    f"domain of column {column!r}: value {value!r} is not hashable "
                    f"({type(value).__name__}); use integers or strings"
                ) from None
            if value is None or (isinstance(value, float) and math.isnan(value)):
                raise ValueError(
                    f"domain of column {column!r} contains the null value {value!r}; "
                    f"rows with null keys are dropped (or refused), never a cell"
                )
            if _is_integer(value):
                kinds.add("int")
            elif isinstance(value, str):
                kinds.add("str")
            else:
                raise TypeError(
                    f"domain of column {column!r}: value {value!r} has type "
                    f"{type(value).__name__}; domain values must be integers or strings"
                )
            normalized = int(value) if _is_integer(value) else value
            if normalized in seen:
                raise ValueError(
                    f"domain of column {column!r} lists {value!r} more than once; "
                    f"each value must appear exactly once"
                )
            seen.add(normalized)
        if len(kinds) > 1:
            raise TypeError(f"domain of column {column!r} mixes integers and strings; use one type")
        self.kind = kinds.pop()
        if self.kind == "int":
            self.values = np.array([int(v) for v in values], dtype=np.int64)
        else:
            self.values = np.array(values, dtype=object)
        self.start = None
        self.stop = None
        self._index = None

    @classmethod
    def integer_range(cls, column: str, start: int, stop: int) -> Domain:
        """The integers ``start, start + 1, ..., stop - 1`` (``stop`` exclusive)."""
        if not (_is_integer(start) and _is_integer(stop)):
            raise TypeError(
                f"domain of column {column!r}: range bounds must be integers, "
                f"got {start!r} and {stop!r}"
            )
        start, stop = int(start), int(stop)
        if stop <= start:
            raise ValueError(
                f"domain of column {column!r}: range({start}, {stop}) is empty; "
                f"declare at least one value"
            )
        if not (start >= -(2**62) and stop <= 2**62):
            raise ValueError(f"domain of column {column!r}: range({start}, {stop}) exceeds int64")
        domain = cls.__new__(cls)
        domain.column = column
        domain.kind = "int"
        domain.start, domain.stop = start, stop
        domain.values = None
        domain._index = None
        return domain

    @classmethod
    def from_spec(cls, column: str, spec: object) -> Domain:
        """A domain from a user's declaration: a ``range`` (step 1), a list/tuple, or a Domain."""
        if isinstance(spec, Domain):
            if spec.column != column:
                raise ValueError(
                    f"domain declared for column {column!r} was built for column {spec.column!r}"
                )
            return spec
        if isinstance(spec, range):
            if spec.step != 1:
                raise ValueError(
                    f"domain of column {column!r}: {spec!r} has step {spec.step}; "
                    f"only step-1 ranges are supported, pass an explicit list instead"
                )
            return cls.integer_range(column, spec.start, spec.stop)
        if isinstance(spec, set | frozenset | dict):
            raise TypeError(
                f"domain of column {column!r} is a {type(spec).__name__}, which has no "
                f"fixed order; pass a list (its order is the order of the released cells)"
            )
        return cls(column, spec)

    @property
    def is_range(self) -> bool:
        return self.start is not None

    @property
    def size(self) -> int:
        return self.stop - self.start if self.is_range else len(self.values)

    def value_array(self) -> np.ndarray:
        """All values in release order (int64, or object for strings)."""
        if self.is_range:
            return np.arange(self.start, self.stop, dtype=np.int64)
        return self.values

    def values_at(self, positions: np.ndarray) -> np.ndarray:
        """The domain values at the given positions (vectorized)."""
        if self.is_range:
            return positions.astype(np.int64) + np.int64(self.start)
        return self.values[positions]

    def positions(self, values: np.ndarray) -> np.ndarray:
        """Position of each value in this domain, -1 where it is not in the domain.

        ``values`` holds no nulls (callers separate them first); integer values
        for integer domains, strings for string domains.
        """
        if self.is_range:
            values = np.asarray(values)
            inside = (values >= self.start) & (values < self.stop)
            shifted = values.astype(np.int64)  # a copy: the caller's array stays intact
            if self.start:
                shifted -= np.int64(self.start)
            shifted[~inside] = -1
            return shifted
        if self._index is None:
            self._index = pd.Index(self.values)
        return self._index.get_indexer(values).astype(np.int64)

    def canonical(self) -> dict:
        """Everything that places a value in a cell: column, kind, values in order."""
        if self.is_range:
            return {"column": self.column, "kind": "int", "range": [self.start, self.stop]}
        values = [int(v) for v in self.values] if self.kind == "int" else list(self.values)
        return {"column": self.column, "kind": self.kind, "values": values}

    def __repr__(self) -> str:
        if self.is_range:
            return f"Domain({self.column!r}, range({self.start}, {self.stop}))"
        return f"Domain({self.column!r}, {self.size} {self.kind} values)"


@dataclass(frozen=True)
class CellDomain:
    """The product of the key domains; cell index = mixed-radix number of the positions."""

    domains: tuple[Domain, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(d.column for d in self.domains)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.domains)

    @property
    def total(self) -> int:
        return math.prod(self.sizes)

    @property
    def strides(self) -> tuple[int, ...]:
        """Weight of each column's position in the cell index (last column fastest)."""
        strides, weight = [], 1
        for size in reversed(self.sizes):
            strides.append(weight)
            weight *= size
        return tuple(reversed(strides))

    def cell_index(self, positions: Sequence[np.ndarray]) -> np.ndarray:
        """Cell index of rows whose key positions are all valid (>= 0)."""
        cells = np.zeros(len(positions[0]), dtype=np.int64)
        for pos, stride in zip(positions, self.strides, strict=True):
            if stride == 1:
                cells += pos
            else:
                cells += pos.astype(np.int64, copy=False) * np.int64(stride)
        return cells

    def decode(self, cells: np.ndarray) -> list[np.ndarray]:
        """The key values of each cell index, one array per key column."""
        out = []
        for domain, stride in zip(self.domains, self.strides, strict=True):
            positions = (cells // np.int64(stride)) % np.int64(domain.size)
            out.append(domain.values_at(positions))
        return out


def build_cell_domain(
    by: object, domains: object, cell_limit: int = DEFAULT_CELL_LIMIT
) -> CellDomain:
    """Validate ``by`` and ``domains`` and refuse a product above ``cell_limit`` cells.

    The limit is checked from the declared sizes alone, before any data is read.
    """
    columns = [by] if isinstance(by, str) else by
    if not isinstance(columns, Sequence) or isinstance(columns, bytes):
        raise TypeError(f"by must be a column name or a list of column names, got {by!r}")
    columns = list(columns)
    if not columns:
        raise ValueError("by must name at least one key column")
    for column in columns:
        if not isinstance(column, str):
            raise TypeError(f"by: column names must be strings, got {column!r}")
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise ValueError(f"by names column {duplicates[0]!r} more than once")
    if not isinstance(domains, Mapping):
        raise TypeError(
            f"domains must be a mapping from key column to its domain, got {type(domains).__name__}"
        )
    for column in columns:
        if column not in domains:
            raise ValueError(
                f"key column {column!r} has no declared domain; every key column needs one "
                f"(a range or a list of values) in domains"
            )
    extra = [c for c in domains if c not in columns]
    if extra:
        raise ValueError(f"domains declares column {extra[0]!r}, which is not in by={columns}")
    cell_limit = _positive_int(cell_limit, "cell_limit")
    if cell_limit > _MAX_CELL_LIMIT:
        raise ValueError(f"cell_limit must be <= 2**40, got {cell_limit}")
    built = tuple(Domain.from_spec(column, domains[column]) for column in columns)
    cell_domain = CellDomain(built)
    if cell_domain.total > cell_limit:
        sizes = " x ".join(f"{d.column}:{d.size}" for d in built)
        raise ValueError(
            f"the domain product {sizes} has {cell_domain.total:,} cells, above the cell limit "
            f"{cell_limit:,}; coarsen a domain or raise cell_limit"
        )
    return cell_domain


@dataclass(frozen=True)
class ValueBounds:
    """Clamping bounds and granularity of a summed column (exact rationals).

    A value v becomes ``clip(rint(v / granularity), lower/granularity, upper/granularity)``
    granularity units; ``lower`` and ``upper`` must be integer multiples of the
    granularity, so clamping before or after rounding is the same.

    ``build`` refuses, before any data is read, bounds whose largest absolute
    value B exceeds ``2**31`` granularity units (`dp_pipeline.query.exact_sums`): every
    cell of fewer than ``2**31`` rows then has an exact total inside ``±2**62``,
    and a larger cell an exact total clamped to ``±2**62``. (``2**31 < 2**53``, so
    the units are also exact in float64 and both engines clamp identically.)
    """

    lower: Fraction
    upper: Fraction
    granularity: Fraction

    @classmethod
    def build(cls, bounds: object, granularity: object) -> ValueBounds:
        if not isinstance(bounds, Sequence) or isinstance(bounds, str) or len(bounds) != 2:
            raise TypeError(f"bounds must be a pair (lower, upper), got {bounds!r}")
        lower = exact_rational(bounds[0], "bounds lower")
        upper = exact_rational(bounds[1], "bounds upper")
        if lower > upper:
            raise ValueError(f"bounds: lower {bounds[0]!r} is above upper {bounds[1]!r}")
        step = positive_rational(granularity, "granularity")
        for name, value, raw in (("lower", lower, bounds[0]), ("upper", upper, bounds[1])):
            if (value / step).denominator != 1:
                raise ValueError(
                    f"bounds {name} {raw!r} is not an integer multiple of granularity "
                    f"{granularity!r}; choose bounds on the granularity grid"
                )
        out = cls(lower, upper, step)
        if out.max_abs_units > _MAX_UNITS:
            raise ValueError(
                f"bounds {bounds!r} span more than 2**53 granularity units; use a coarser "
                f"granularity"
            )
        problem = sum_units_problem(out.max_abs_units, None)
        if problem is not None:
            raise ValueError(
                f"bounds {bounds!r} with granularity {granularity!r}: {problem}; use a coarser "
                f"granularity or tighter bounds"
            )
        if out.lower_units == 0 and out.upper_units == 0:
            raise ValueError("bounds (0, 0) make every sum 0; declare a non-trivial range")
        return out

    @property
    def lower_units(self) -> int:
        return int(self.lower / self.granularity)

    @property
    def upper_units(self) -> int:
        return int(self.upper / self.granularity)

    @property
    def max_abs_units(self) -> int:
        return max(abs(self.lower_units), abs(self.upper_units))

    @property
    def scale_numerator(self) -> int:
        """v / granularity is computed as v * denominator / numerator (float64, both engines)."""
        return self.granularity.numerator

    @property
    def scale_denominator(self) -> int:
        return self.granularity.denominator


@dataclass(frozen=True)
class Diagnostics:
    """What the engine did to the input rows. Returned to the caller, NEVER released.

    These counts are exact functions of the private data (not noised), so they
    must not be published; they exist to debug a pipeline.

    - ``rows_in``: rows read.
    - ``rows_null_key`` / ``rows_out_of_domain``: rows dropped, per key column
      (a row is attributed to the first key column, in ``by`` order, that fails).
    - ``rows_null_unit``: rows dropped because the privacy unit is null.
    - ``rows_invalid_value``: rows dropped because the summed value is null, NaN or ±inf.
    - ``rows_clamped``: kept rows whose value lay outside ``[lower, upper]`` (before bounding).
    - ``rows_removed_max_per_cell``: rows over a unit's ``max_per_cell`` in a cell.
    - ``rows_removed_max_cells`` / ``unit_cells_removed_max_cells``: rows and
      (unit, cell) pairs removed because a unit touched more than ``max_cells`` cells.
    - ``rows_used``: rows that entered the aggregates.
    """

    rows_in: int
    rows_null_key: dict[str, int] = field(default_factory=dict)
    rows_out_of_domain: dict[str, int] = field(default_factory=dict)
    rows_null_unit: int = 0
    rows_invalid_value: int = 0
    rows_clamped: int = 0
    rows_removed_max_per_cell: int = 0
    rows_removed_max_cells: int = 0
    unit_cells_removed_max_cells: int = 0
    rows_used: int = 0

    @property
    def rows_dropped(self) -> int:
        """Rows dropped before bounding (null key, out of domain, null unit, invalid value)."""
        return (
            sum(self.rows_null_key.values())
            + sum(self.rows_out_of_domain.values())
            + self.rows_null_unit
            + self.rows_invalid_value
        )


def invalid_rows_error(column: str, rule: str) -> ValueError:
    """The error of ``on_invalid="error"`` (every engine): column and rule, nothing of the data.

    Exceptions reach logs, so the message carries no row count and no value
    read from the input; the non-private diagnostics of ``on_invalid="drop"``
    have the counts for whoever may see them.
    """
    return ValueError(
        f"column {column!r}: some rows {rule} (on_invalid='error'; the message quotes no "
        f"count or value from the data; use on_invalid='drop' to drop such rows and count "
        f"them in the non-private diagnostics)"
    )


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
    ) -> QuerySpec:
        """Validate everything that does not need the data; raise before any work."""
        if statistic not in _STATISTICS:
            raise ValueError(f"statistic must be one of {_STATISTICS}, got {statistic!r}")
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
        max_cells = _positive_int(max_cells, "max_cells")
        max_per_cell = _positive_int(max_per_cell, "max_per_cell")
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
        if neighbouring not in _NEIGHBOURING:
            raise ValueError(f"neighbouring must be one of {_NEIGHBOURING}, got {neighbouring!r}")
        if on_invalid not in _ON_INVALID:
            raise ValueError(f"on_invalid must be one of {_ON_INVALID}, got {on_invalid!r}")
        noise_partitions = _positive_int(noise_partitions, "noise_partitions")
        confidence = exact_rational(confidence, "confidence")
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence}")
        delta = exact_rational(delta, "delta")
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
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

    def _coordinates(self) -> int:
        cells = self.effective_max_cells
        if self.neighbouring == "replace":
            # Replacing a unit removes its cells and adds new ones: up to 2x the coordinates.
            return min(2 * cells, self.cells.total)
        return cells

    def count_sensitivity(self) -> tuple[int, ...]:
        """Per-coordinate L∞ change of the count vector between neighbours.

        Adding or removing a unit changes at most ``max_cells`` counts by at most
        ``max_per_cell`` each. Replacing one changes at most twice as many cells;
        a cell both left and entered changes by at most ``max_per_cell`` too, since
        both counts lie in [0, max_per_cell].
        """
        return (self.effective_max_per_cell,) * self._coordinates()

    def sum_sensitivity(self) -> tuple[int, ...]:
        """Per-coordinate change of the sum vector, in granularity units.

        Add/remove: a unit's sum in a cell lies in [m·L, m·U] (m = max_per_cell,
        L, U the bounds in units), so it changes by at most m·max(|L|, |U|).
        Replace: a cell whose old and new contributions are both present changes
        by at most m·(U − L), which exceeds m·max(|L|, |U|) when L < 0 < U; each
        of the (up to 2·max_cells) coordinates is therefore bounded by
        m·max(U − L, |L|, |U|), an upper bound on every neighbouring pattern.
        """
        bounds = self.value_bounds
        if bounds is None:
            raise ValueError("a count has no sum sensitivity")
        per_coordinate = bounds.max_abs_units
        if self.neighbouring == "replace":
            per_coordinate = max(per_coordinate, bounds.upper_units - bounds.lower_units)
        return (self.effective_max_per_cell * per_coordinate,) * self._coordinates()

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
