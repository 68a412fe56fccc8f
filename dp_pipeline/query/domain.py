"""Declared domains of the key columns and the cell index over them (no data, no engine).

Each key column has a declared `Domain` (an integer range or an explicit list
of values). A cell is one combination of key values; its *cell index* is the
mixed-radix number whose digits are the positions of the values in their
domains, the first key column most significant. The index gives a total order
of the cells that depends only on the declared domains, never on the data or
on the engine.
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dp_pipeline.errors import DPTypeError, DPValueError

__all__ = [
    "DEFAULT_CELL_LIMIT",
    "FROM_DATA",
    "CellDomain",
    "Domain",
    "DomainValues",
    "Domains",
    "FromData",
    "KeyColumns",
    "build_cell_domain",
    "positive_int",
]


class FromData(enum.Enum):
    """The type of `FROM_DATA`, the marker of a key whose released values are selected
    privately from the data (an enum of one member: a singleton type checkers know)."""

    FROM_DATA = "from_data"

    def __repr__(self) -> str:
        return "FROM_DATA"

    __str__ = __repr__


# ``domains={"merchant": FROM_DATA}``: the released merchants are those whose noisy count
# of distinct privacy units clears an exact threshold (`dp_pipeline.keyselect`).
FROM_DATA = FromData.FROM_DATA

# What a public call takes: key columns (one name or several), and each one's declared
# values (an integer range, or a list of distinct integers or distinct strings), or
# FROM_DATA for a key selected from the data.
KeyColumns = str | Sequence[str]
DomainValues = range | Sequence[int] | Sequence[str]
Domains = Mapping[str, DomainValues | FromData]

DEFAULT_CELL_LIMIT = 10_000_000
# Cell indexes are int64 in both engines; keep well clear of overflow.
MAX_CELL_LIMIT = 2**40
MAX_UNITS = 2**53


def is_integer_value(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def positive_int(value: object, name: str) -> int:
    if not is_integer_value(value):
        raise DPTypeError(f"{name} must be a positive integer, got {value!r}")
    if int(value) < 1:
        raise DPValueError(f"{name} must be >= 1, got {value!r}")
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
            raise DPTypeError(
                f"domain of column {column!r} must be a range or a list of values, "
                f"got {type(values).__name__}"
            )
        values = list(values)
        if not values:
            raise DPValueError(f"domain of column {column!r} is empty; declare at least one value")
        seen: set[object] = set()
        kinds = set()
        for value in values:
            try:
                hash(value)
            except TypeError:
                raise DPTypeError(
                    f"domain of column {column!r}: value {value!r} is not hashable "
                    f"({type(value).__name__}); use integers or strings"
                ) from None
            if value is FROM_DATA:
                raise DPValueError(
                    f"domain of column {column!r} lists FROM_DATA beside declared values; a "
                    f"key is either declared (a range or a list) or selected from the data "
                    f"(FROM_DATA alone)"
                )
            if value is None or (isinstance(value, float) and math.isnan(value)):
                raise DPValueError(
                    f"domain of column {column!r} contains the null value {value!r}; "
                    f"rows with null keys are dropped (or refused), never a cell"
                )
            if is_integer_value(value):
                kinds.add("int")
            elif isinstance(value, str):
                kinds.add("str")
            else:
                raise DPTypeError(
                    f"domain of column {column!r}: value {value!r} has type "
                    f"{type(value).__name__}; domain values must be integers or strings"
                )
            normalized = int(value) if is_integer_value(value) else value
            if normalized in seen:
                raise DPValueError(
                    f"domain of column {column!r} lists {value!r} more than once; "
                    f"each value must appear exactly once"
                )
            seen.add(normalized)
        if len(kinds) > 1:
            raise DPTypeError(
                f"domain of column {column!r} mixes integers and strings; use one type"
            )
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
        if not (is_integer_value(start) and is_integer_value(stop)):
            raise DPTypeError(
                f"domain of column {column!r}: range bounds must be integers, "
                f"got {start!r} and {stop!r}"
            )
        start, stop = int(start), int(stop)
        if stop <= start:
            raise DPValueError(
                f"domain of column {column!r}: range({start}, {stop}) is empty; "
                f"declare at least one value"
            )
        if not (start >= -(2**62) and stop <= 2**62):
            raise DPValueError(f"domain of column {column!r}: range({start}, {stop}) exceeds int64")
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
                raise DPValueError(
                    f"domain declared for column {column!r} was built for column {spec.column!r}"
                )
            return spec
        if isinstance(spec, range):
            if spec.step != 1:
                raise DPValueError(
                    f"domain of column {column!r}: {spec!r} has step {spec.step}; "
                    f"only step-1 ranges are supported, pass an explicit list instead"
                )
            return cls.integer_range(column, spec.start, spec.stop)
        if isinstance(spec, set | frozenset | dict):
            raise DPTypeError(
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
        raise DPTypeError(f"by must be a column name or a list of column names, got {by!r}")
    columns = list(columns)
    if not columns:
        raise DPValueError("by must name at least one key column")
    for column in columns:
        if not isinstance(column, str):
            raise DPTypeError(f"by: column names must be strings, got {column!r}")
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise DPValueError(f"by names column {duplicates[0]!r} more than once")
    if not isinstance(domains, Mapping):
        raise DPTypeError(
            f"domains must be a mapping from key column to its domain, got {type(domains).__name__}"
        )
    for column in columns:
        if column not in domains:
            raise DPValueError(
                f"key column {column!r} has no declared domain; every key column needs one "
                f"in domains: a range or a list of values, or dp_pipeline.FROM_DATA to "
                f"select its released keys privately from the data"
            )
    extra = [c for c in domains if c not in columns]
    if extra:
        raise DPValueError(f"domains declares column {extra[0]!r}, which is not in by={columns}")
    for column in columns:
        if domains[column] is FROM_DATA:
            raise DPValueError(
                f"domains[{column!r}] = FROM_DATA: keys are selected from the data for "
                f"count, sum, mean, var and std only; declare this key's domain (a range or "
                f"a list of values)"
            )
    cell_limit = positive_int(cell_limit, "cell_limit")
    if cell_limit > MAX_CELL_LIMIT:
        raise DPValueError(f"cell_limit must be <= 2**40, got {cell_limit}")
    built = tuple(Domain.from_spec(column, domains[column]) for column in columns)
    cell_domain = CellDomain(built)
    if cell_domain.total > cell_limit:
        sizes = " x ".join(f"{d.column}:{d.size}" for d in built)
        raise DPValueError(
            f"the domain product {sizes} has {cell_domain.total:,} cells, above the cell limit "
            f"{cell_limit:,}; coarsen a domain or raise cell_limit"
        )
    return cell_domain
