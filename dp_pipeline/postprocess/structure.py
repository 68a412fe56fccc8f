"""Inputs of the consistency step: a public geography hierarchy and noisy count tables.

Everything here is public structure (key names, domain sizes, the child -> parent
map) or already-released noisy values; nothing reads data or a key, so the whole
package is post-processing of a differentially private release and costs no
privacy (Dwork and Roth 2014, Proposition 2.1).

Layouts: a table's cells are in C order over its keys (last key fastest), the
same cell index the engines release. A *margin* is a pair (level, keys): the
geography aggregated to ``level`` (-1 is the national root, 0 the coarsest
hierarchy level) and the non-geography ``keys``; its cells are in C order over
(geography at ``level``, then ``keys`` sorted by name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

import numpy as np

from dp_pipeline.errors import PostprocessError

__all__ = [
    "NATIONAL",
    "TOP",
    "Hierarchy",
    "Margin",
    "NoisyCounts",
    "PostprocessError",
    "TableShape",
    "TableStructure",
    "describe_margin",
]

NATIONAL = -1
TOP = 0  # the hierarchy level whose positions are the independent groups


@dataclass(frozen=True)
class Hierarchy:
    """Public geography levels below an implicit national root, coarsest first.

    ``parents[i][c]`` is the 0-based position, in the domain of level ``i``, of
    the parent of position ``c`` of level ``i + 1``.
    """

    levels: tuple[str, ...]
    sizes: tuple[int, ...]
    parents: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        levels, sizes, parents = tuple(self.levels), tuple(self.sizes), tuple(self.parents)
        if not levels:
            raise PostprocessError("hierarchy: levels is empty; give at least one level name")
        if len(set(levels)) != len(levels):
            raise PostprocessError(f"hierarchy: level names {list(levels)} repeat a name")
        if len(sizes) != len(levels):
            raise PostprocessError(
                f"hierarchy: {len(sizes)} sizes for {len(levels)} levels {list(levels)}; "
                "give one domain size per level"
            )
        for name, size in zip(levels, sizes, strict=True):
            if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
                raise PostprocessError(
                    f"hierarchy: level {name!r} has size {size!r}; a size is an integer >= 1"
                )
        if len(parents) != len(levels) - 1:
            raise PostprocessError(
                f"hierarchy: {len(parents)} parent arrays for {len(levels)} levels; "
                f"give one per level below the first ({len(levels) - 1})"
            )
        checked = []
        for i, raw in enumerate(parents):
            child, parent = levels[i + 1], levels[i]
            arr = np.asarray(raw)
            if arr.ndim != 1 or arr.shape[0] != sizes[i + 1]:
                raise PostprocessError(
                    f"hierarchy: parents of level {child!r} has shape {arr.shape}; "
                    f"it must list one parent per {child} position ({sizes[i + 1]})"
                )
            if arr.dtype.kind not in "iu":
                raise PostprocessError(
                    f"hierarchy: parents of level {child!r} has dtype {arr.dtype}; "
                    "it must be integer positions"
                )
            bad = np.flatnonzero((arr < 0) | (arr >= sizes[i]))
            if bad.size:
                raise PostprocessError(
                    f"hierarchy: {child} position {int(bad[0])} has parent {int(arr[bad[0]])}, "
                    f"outside the {parent} domain 0..{sizes[i] - 1}"
                )
            empty = np.flatnonzero(np.bincount(arr, minlength=sizes[i]) == 0)
            if empty.size:
                raise PostprocessError(
                    f"hierarchy: {parent} position {int(empty[0])} has no {child}; every "
                    f"{parent} needs at least one {child} (drop it from the domain)"
                )
            arr = arr.astype(np.int64)
            arr.setflags(write=False)
            checked.append(arr)
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "sizes", tuple(int(s) for s in sizes))
        object.__setattr__(self, "parents", tuple(checked))

    def ancestors(self, level: int, to_level: int) -> np.ndarray:
        """Position at ``to_level`` (coarser or equal; -1 national) of each ``level`` position."""
        if to_level == NATIONAL:
            size = 1 if level == NATIONAL else self.sizes[level]
            return np.zeros(size, dtype=np.int64)
        mapped = np.arange(self.sizes[level], dtype=np.int64)
        for i in range(level - 1, to_level - 1, -1):
            mapped = self.parents[i][mapped]
        return mapped

    def size(self, level: int) -> int:
        return 1 if level == NATIONAL else self.sizes[level]


class HasShape(Protocol):
    name: str
    keys: tuple[str, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class TableShape:
    """The public shape of a table (what ``check_combinable`` needs; no values)."""

    name: str
    keys: tuple[str, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class NoisyCounts:
    """One released count table: int64 noisy counts in C order over ``keys``.

    ``variance`` is the exact public per-cell noise variance (σ² of the discrete
    Gaussian, or the discrete Laplace variance); it weights the least squares.
    """

    name: str
    keys: tuple[str, ...]
    sizes: tuple[int, ...]
    values: np.ndarray = field(repr=False)
    variance: Fraction


@dataclass(frozen=True)
class Margin:
    """Geography at ``level`` (-1 national) by the non-geography ``keys`` (sorted)."""

    level: int
    keys: tuple[str, ...]

    def implies(self, other: Margin) -> bool:
        """True when this margin determines ``other`` (finer or equal geography, superset keys)."""
        return self.level >= other.level and set(other.keys) <= set(self.keys)


def describe_margin(margin: Margin, hierarchy: Hierarchy | None) -> str:
    geo = "national" if margin.level == NATIONAL else hierarchy.levels[margin.level]
    return " x ".join((geo, *margin.keys)) if margin.keys else f"{geo} totals"


@dataclass(frozen=True)
class TableStructure:
    """A validated table shape: its geography level and axis, and its other keys."""

    name: str
    keys: tuple[str, ...]
    sizes: tuple[int, ...]
    level: int  # -1 when the table has no hierarchy key
    geo_axis: int | None

    @property
    def cells(self) -> int:
        return int(np.prod(self.sizes, dtype=np.int64))

    @property
    def full_margin(self) -> Margin:
        other = tuple(sorted(k for i, k in enumerate(self.keys) if i != self.geo_axis))
        return Margin(self.level, other)

    def key_size(self, key: str) -> int:
        return self.sizes[self.keys.index(key)]


def validate_shapes(
    tables: list[HasShape] | tuple[HasShape, ...], hierarchy: Hierarchy | None
) -> list[TableStructure]:
    """Check names, keys and sizes of every table; return their structures (same order)."""
    if not tables:
        raise PostprocessError("tables: no table given; give at least one count table")
    levels = {} if hierarchy is None else {k: i for i, k in enumerate(hierarchy.levels)}
    seen_names: set[str] = set()
    key_sizes: dict[str, tuple[int, str]] = {}
    out = []
    for table in tables:
        name, keys, sizes = table.name, tuple(table.keys), tuple(table.sizes)
        if name in seen_names:
            raise PostprocessError(f"table {name!r}: the name is used twice; names are unique")
        seen_names.add(name)
        if len(keys) != len(sizes):
            raise PostprocessError(
                f"table {name!r}: {len(keys)} keys {list(keys)} but {len(sizes)} sizes; "
                "give one domain size per key"
            )
        if len(set(keys)) != len(keys):
            raise PostprocessError(f"table {name!r}: keys {list(keys)} repeat a key")
        for key, size in zip(keys, sizes, strict=True):
            if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
                raise PostprocessError(
                    f"table {name!r}: key {key!r} has size {size!r}; a size is an integer >= 1"
                )
            if key in key_sizes and key_sizes[key][0] != size:
                other_size, other_table = key_sizes[key]
                raise PostprocessError(
                    f"table {name!r}: key {key!r} has domain size {size} but table "
                    f"{other_table!r} gives it {other_size}; a key has one domain"
                )
            key_sizes.setdefault(key, (int(size), name))
        geo = [i for i, k in enumerate(keys) if k in levels]
        if len(geo) > 1:
            raise PostprocessError(
                f"table {name!r}: keys {[keys[i] for i in geo]} are all hierarchy levels; "
                "a table has at most one hierarchy key"
            )
        level, geo_axis = NATIONAL, None
        if geo:
            geo_axis = geo[0]
            level = levels[keys[geo_axis]]
            if sizes[geo_axis] != hierarchy.sizes[level]:
                raise PostprocessError(
                    f"table {name!r}: hierarchy key {keys[geo_axis]!r} has size "
                    f"{sizes[geo_axis]} but the hierarchy gives it {hierarchy.sizes[level]}"
                )
        out.append(TableStructure(name, keys, tuple(int(s) for s in sizes), level, geo_axis))
    return out


def margin_index(table: TableStructure, margin: Margin, hierarchy: Hierarchy | None) -> np.ndarray:
    """For every cell of ``table``, the index of its cell in ``margin`` (int64, C order)."""
    if not table.full_margin.implies(margin):
        raise PostprocessError(f"table {table.name!r} does not determine the margin {margin}")
    shape = table.sizes
    ndim = len(shape)
    # Strides of the margin: geography first, then its keys sorted by name.
    axis_sizes = [1 if margin.level == NATIONAL else hierarchy.sizes[margin.level]]
    axis_sizes += [table.key_size(k) for k in margin.keys]
    strides = np.cumprod([1, *axis_sizes[::-1]], dtype=np.int64)[:-1][::-1]
    total = np.zeros((1,) * ndim, dtype=np.int64)
    if table.geo_axis is not None and margin.level != NATIONAL:
        anc = hierarchy.ancestors(table.level, margin.level) * strides[0]
        total = total + anc.reshape([-1 if i == table.geo_axis else 1 for i in range(ndim)])
    for j, key in enumerate(margin.keys):
        axis = table.keys.index(key)
        part = np.arange(shape[axis], dtype=np.int64) * strides[j + 1]
        total = total + part.reshape([-1 if i == axis else 1 for i in range(ndim)])
    return np.broadcast_to(total, shape).reshape(-1)


def margin_size(margin: Margin, tables: list[TableStructure], hierarchy: Hierarchy | None) -> int:
    sizes = {k: s for t in tables for k, s in zip(t.keys, t.sizes, strict=True)}
    geo = 1 if margin.level == NATIONAL else hierarchy.sizes[margin.level]
    return int(geo * np.prod([sizes[k] for k in margin.keys], dtype=np.int64))


def common_margin(a: TableStructure, b: TableStructure) -> Margin:
    """The margin two tables must agree on: coarser geography, shared non-geography keys."""
    fa, fb = a.full_margin, b.full_margin
    return Margin(min(fa.level, fb.level), tuple(sorted(set(fa.keys) & set(fb.keys))))
