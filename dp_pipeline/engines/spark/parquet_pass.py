"""The Parquet pass: partial aggregates of several queries over Parquet row groups.

A Spark task reads its row groups of the input Parquet file(s) with pyarrow (only
the key, summed and unit columns; strings dictionary-encoded) and, with the pandas
engine's numpy rules, gives every row of every query its cell index or its reason
code (the order of `dp_pipeline.engines.spark.aggregate.coded_rows`: per key column
null then out of domain, then the public hierarchy, then null unit, then invalid
value; the first that applies wins), clamps the summed values into granularity units
and adds everything into dense per-query vectors (``np.bincount``). It returns those
vectors, the rows it dropped per reason, and one run per row group: the first and
last non-null unit id, whether the ids increase strictly and how many are null. The
driver sums the tasks' vectors and proves from the runs that no unit has several
rows (strictly increasing within every row group, disjoint [first, last] ranges
across row groups) before it trusts the aggregates; otherwise it takes the general
path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dp_pipeline.engines.numpy_rules import (
    clip_units,
    first_reason_codes,
    hierarchy_breaks,
    integral_keys,
    rounded_units,
)
from dp_pipeline.query.domain import Domain
from dp_pipeline.query.exact_sums import CellTotals, cell_totals
from dp_pipeline.query.spec import QuerySpec

__all__ = [
    "ChunkAggregator",
    "IncreasingRun",
    "IncreasingRuns",
    "TablePartial",
    "merge_partials",
    "parquet_ids_function",
    "parquet_partials_function",
    "query_domains",
]


class IncreasingRun:
    """Are the non-null integer ids seen so far strictly increasing (in arrival order)?"""

    def __init__(self) -> None:
        self.first: int | None = None
        self.last: int | None = None
        self.increasing = True
        self.nulls = 0

    def update(self, column: pa.Array) -> None:
        """Take the next ids; after the first one out of order, only count nulls."""
        self.nulls += column.null_count
        if not self.increasing:
            return
        values = column.drop_null().to_numpy() if column.null_count else column.to_numpy()
        if values.size == 0:
            return
        if self.last is not None and values[0] <= self.last:
            self.increasing = False
            return
        if values.size > 1 and not bool(np.all(values[1:] > values[:-1])):
            self.increasing = False
            return
        if self.first is None:
            self.first = int(values[0])
        self.last = int(values[-1])


class IncreasingRuns:
    """The non-null integer ids seen so far as maximal strictly increasing segments.

    One (first, last) per segment, in arrival order: the ids of a task reading
    several sorted files (in whatever order Spark packs them) are a few segments.
    Distinct ids in disjoint segments prove that no id occurs twice
    (`runs_prove_unique`). After more than ``limit`` segments (ids in no order)
    ``increasing`` turns False and only nulls are counted.
    """

    def __init__(self, limit: int = 1024) -> None:
        self.segments: list[list[int]] = []
        self.limit = limit
        self.increasing = True
        self.nulls = 0

    def update(self, column: pa.Array) -> None:
        """Take the next ids."""
        self.nulls += column.null_count
        if not self.increasing:
            return
        values = column.drop_null().to_numpy() if column.null_count else column.to_numpy()
        if values.size == 0:
            return
        breaks = np.flatnonzero(values[1:] <= values[:-1]) + 1
        if breaks.size > self.limit:
            self.increasing = False
            return
        starts = [0, *breaks.tolist()]
        ends = [*breaks.tolist(), values.size]
        for start, end in zip(starts, ends, strict=True):
            first, last = int(values[start]), int(values[end - 1])
            if start == 0 and self.segments and first > self.segments[-1][1]:
                self.segments[-1][1] = last  # continues the open segment
            else:
                self.segments.append([first, last])
        if len(self.segments) > self.limit:
            self.increasing = False

    def runs(self) -> list[tuple]:
        """(first, last, increasing, nulls) per segment (the nulls on the first), for
        `runs_prove_unique`."""
        if not self.segments:
            return [(None, None, self.increasing, self.nulls)]
        return [
            (first, last, self.increasing, self.nulls if index == 0 else 0)
            for index, (first, last) in enumerate(self.segments)
        ]


def query_domains(specs: Sequence[QuerySpec]) -> dict[tuple, Domain]:
    """Every key domain of ``specs`` (cells and hierarchies), once, by its signature."""
    domains = {}
    for spec in specs:
        hierarchy = spec.hierarchy.domains if spec.hierarchy is not None else ()
        for domain in (*spec.cells.domains, *hierarchy):
            domains.setdefault(_signature(domain), domain)
    return domains


def _signature(domain: Domain) -> tuple:
    if domain.is_range:
        return (domain.column, "range", domain.start, domain.stop)
    return (domain.column, domain.kind, tuple(domain.values.tolist()))


def _positions(domain: Domain, column: pa.Array) -> np.ndarray:
    """Position of every row's key in ``domain``, -1 outside (null rows: anything)."""
    if pa.types.is_dictionary(column.type):
        # Look the (few) dictionary values up once, then index by the rows' codes.
        lookup = _positions(domain, column.dictionary)
        if lookup.size == 0:
            return np.full(len(column), -1, dtype=np.int64)
        codes = pc.fill_null(column.indices, 0).to_numpy().astype(np.intp, copy=False)
        return lookup[codes]
    if domain.kind == "int":
        column = column.cast(pa.int64())
        if domain.is_range:
            return domain.positions(pc.fill_null(column, 0).to_numpy())
        value_set = pa.array(domain.values.tolist(), type=pa.int64())
    else:
        value_set = pa.array(domain.values.tolist(), type=column.type)
    found = pc.index_in(column, value_set=value_set)
    return pc.fill_null(found, -1).to_numpy().astype(np.int64)


def _null_mask(column: pa.Array) -> np.ndarray | None:
    return column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None


def _as_double(column: pa.Array) -> np.ndarray:
    """float64 values, NaN where null: Spark's ``cast("double")`` (round to nearest)."""
    values = pc.fill_null(column, 0).to_numpy().astype(np.float64)
    if column.null_count:
        values[column.is_null().to_numpy(zero_copy_only=False)] = np.nan
    return values


class TablePartial:
    """One query's dense partial aggregates: ``n``, ``s``, ``clamped`` by cell; ``dropped``.

    ``s`` is a `dp_pipeline.query.exact_sums.CellTotals`: exact across row groups and
    task merges (plain int64 while a bound proves it cannot wrap, two limbs
    beyond), clamped into ``[-2**62, 2**62]`` only once, on the final totals.
    """

    def __init__(self, spec: QuerySpec) -> None:
        total = spec.cells.total
        self.spec = spec
        self.n = np.zeros(total, dtype=np.int64)
        self.s = CellTotals.zeros(total) if spec.column is not None else None
        self.clamped = np.zeros(total, dtype=np.int64) if spec.column is not None else None
        self.dropped: dict[int, int] = {}  # reason code -> rows

    def merge(self, other: TablePartial) -> None:
        self.n += other.n
        if self.s is not None:
            self.s.add(other.s)
            self.clamped += other.clamped
        for code, rows in other.dropped.items():
            self.dropped[code] = self.dropped.get(code, 0) + rows

    def add(
        self, positions: dict, nulls: dict, unit_null, values: dict, size: int, broken: dict
    ) -> None:
        """Add a row group: its key ``positions`` (by domain signature), ``nulls`` (by
        column), ``unit_null``, summed ``values``, and the rows breaking each hierarchy
        rule (``broken``, by `HierarchyRule.key`: `rule_breaks`, once for all tables)."""
        spec = self.spec
        cells = spec.cells
        k = len(cells.columns)
        conditions = []
        for i, domain in enumerate(cells.domains):
            conditions.append((nulls[domain.column], -(2 * i + 1)))
            conditions.append((positions[_signature(domain)] < 0, -(2 * i + 2)))
        if spec.hierarchy is not None:
            conditions.append((broken[spec.hierarchy.key], -(2 * k + 3)))
        if spec.privacy_unit is not None:
            conditions.append((unit_null, -(2 * k + 1)))
        raw = clamped = None
        if spec.column is not None:
            value = values[spec.column]
            invalid = ~np.isfinite(value)
            conditions.append((invalid, -(2 * k + 2)))
            raw, clamped = rounded_units(value, spec.value_bounds)
        code = first_reason_codes(conditions, size)
        valid = code == 0
        everything = bool(valid.all())

        def kept(array: np.ndarray) -> np.ndarray:
            return array if everything else array[valid]

        cell = cells.cell_index([kept(positions[_signature(d)]) for d in cells.domains])
        self.n += np.bincount(cell, minlength=self.n.size)
        if raw is not None:
            units = clip_units(kept(raw), spec.value_bounds)
            self.s.add(cell_totals(cell, units, self.n.size))
            self.clamped += np.bincount(cell[kept(clamped)], minlength=self.n.size)
        if not everything:
            reasons, counts = np.unique(code[~valid], return_counts=True)
            for reason, count in zip(reasons.tolist(), counts.tolist(), strict=True):
                self.dropped[reason] = self.dropped.get(reason, 0) + count


def rule_breaks(rule, positions: dict, nulls: dict) -> np.ndarray:
    """Mask of a row group's rows that break the hierarchy ``rule`` (the numpy rule)."""
    found = [positions[_signature(d)] for d in rule.domains]
    for j, domain in enumerate(rule.domains):
        if nulls[domain.column] is not None:  # a null key's position may be anything
            found[j] = np.where(nulls[domain.column], -1, found[j])
    return hierarchy_breaks(rule, found)


def parquet_ids_function(unit: str) -> Callable[[Iterator[tuple[str, int]]], Iterator[np.ndarray]]:
    """The ``mapPartitions`` function yielding a task's non-null unit ids, sorted (int64).

    Reads only the unit column. The driver sorts all tasks' ids together to prove
    exactly that no unit has several rows when the ids are not in order.
    """

    def ids(pieces: Iterator[tuple[str, int]]) -> Iterator[np.ndarray]:
        import pyarrow.parquet as pq

        files: dict[str, pq.ParquetFile] = {}
        parts = []
        for path, group in pieces:
            if path not in files:
                files[path] = pq.ParquetFile(path)
            column = files[path].read_row_group(group, columns=[unit], use_threads=False)
            values = column.column(unit).combine_chunks().drop_null().cast(pa.int64())
            parts.append(values.to_numpy())
        yield np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)

    return ids


class ChunkAggregator:
    """Partial aggregates of several queries over Arrow chunks of rows (the numpy rules).

    ``add`` takes one chunk (a ``pyarrow.Table`` with the key, summed, grid-source
    and unit columns) and adds every row of every query into dense `TablePartial`
    vectors; with a unit, it also records the ids: one `IncreasingRun` per chunk
    (``run_per_chunk``: the Parquet pass's row groups), else the strictly increasing
    segments of all chunks together (`IncreasingRuns`). ``complete`` turns False once
    some chunk's ids are not strictly increasing, or there are too many segments
    (with ``require_increasing``), after which ``add`` reads nothing more.
    ``result`` is what `merge_partials` combines.
    ``derived``: ``{key column: GridPosition}``, keys computed from a numeric column
    (null where it is not finite), as `dp_pipeline.engines.spark.aggregate` does.
    The specs must hold no key (`QuerySpec.without_key`): this object is built on
    the executors.
    """

    def __init__(
        self,
        specs: Sequence[QuerySpec],
        unit: str | None,
        derived: dict | None = None,
        require_increasing: bool = True,
        run_per_chunk: bool = True,
    ) -> None:
        self.derived = dict(derived or {})
        self.unit = unit
        self.require_increasing = require_increasing
        self.run_per_chunk = run_per_chunk
        # The tables of a consistent set share one rule: its rows are looked up once.
        self.rules = list({s.hierarchy.key: s.hierarchy for s in specs if s.hierarchy}.values())
        domains = query_domains(specs)
        self.domains = domains
        derived_names = set(self.derived)
        self.key_columns = sorted({d.column for d in domains.values()} - derived_names)
        self.value_columns = sorted({spec.column for spec in specs if spec.column is not None})
        self.integer_keys = sorted(
            {d.column for d in domains.values() if d.kind == "int"} - derived_names
        )
        self.tables = [TablePartial(spec) for spec in specs]
        self.runs: list[tuple] = []
        self.run = IncreasingRuns() if unit is not None else None
        self.complete = True

    def needed(self) -> list[str]:
        """The input columns a chunk must hold."""
        sources = {grid.column for grid in self.derived.values()}
        unit = [self.unit] if self.unit else []
        return sorted({*self.key_columns, *self.value_columns, *sources, *unit})

    def string_keys(self) -> list[str]:
        """String key columns (read dictionary-encoded: each distinct string looked up once)."""
        return sorted(
            {d.column for d in self.domains.values() if d.kind == "str"}
            - {*self.value_columns, self.unit}
        )

    def add(self, chunk: pa.Table, coded: tuple[dict, dict] | None = None) -> None:
        """Add a chunk's rows to every query (nothing once ``complete`` is False).

        ``coded``: (positions by domain signature, null masks by column) of key
        columns that Spark already coded (`dp_pipeline.engines.spark.arrow_pass`);
        the chunk need not hold those columns.
        """
        size = chunk.num_rows
        if size == 0 or not self.complete:
            return
        chunk = chunk.combine_chunks()
        unit_null = None
        if self.unit is not None:
            ids = chunk.column(self.unit).chunk(0)
            run = IncreasingRun() if self.run_per_chunk else self.run
            run.update(ids.cast(pa.int64()))
            if self.run_per_chunk:
                self.runs.append((run.first, run.last, run.increasing, run.nulls))
            self.complete = run.increasing or not self.require_increasing
            unit_null = _null_mask(ids)
        if not self.complete:
            return  # the driver will take the general path: read nothing more
        known_positions, known_nulls = coded if coded is not None else ({}, {})
        columns = {c: chunk.column(c).chunk(0) for c in self.key_columns if c not in known_nulls}
        for name, grid in self.derived.items():
            positions, finite = grid.positions(_as_double(chunk.column(grid.column).chunk(0)))
            columns[name] = pa.array(positions, mask=~finite)
        outside = {}
        for name in self.integer_keys:
            if name in columns and pa.types.is_floating(columns[name].type):
                # The pandas engine's rule for float integer keys: NaN is null,
                # a non-integer is outside the domain.
                keys, missing, outside[name] = integral_keys(_as_double(columns[name]))
                columns[name] = pa.array(keys, mask=missing)
        nulls = {c: _null_mask(a) for c, a in columns.items()}
        nulls.update(known_nulls)
        positions = dict(known_positions)
        for sig, domain in self.domains.items():
            if sig not in positions:
                positions[sig] = _positions(domain, columns[domain.column])
                if domain.column in outside:
                    positions[sig][outside[domain.column]] = -1
        values = {c: _as_double(chunk.column(c).chunk(0)) for c in self.value_columns}
        broken = {rule.key: rule_breaks(rule, positions, nulls) for rule in self.rules}
        for table in self.tables:
            table.add(positions, nulls, unit_null, values, size, broken)

    def result(self) -> dict:
        """``tables`` (the `TablePartial` of each query), ``runs``, ``complete``."""
        runs = list(self.runs)
        if not self.run_per_chunk and self.run is not None:
            runs += self.run.runs()
        return {"tables": self.tables, "runs": runs, "complete": self.complete}


def parquet_partials_function(
    specs: Sequence[QuerySpec],
    unit: str | None,
    derived: dict | None = None,
    require_increasing: bool = True,
) -> Callable[[Iterator[tuple[str, int]]], Iterator[dict]]:
    """The ``mapPartitions`` function over (local Parquet path, row group index) pieces.

    Yields one dict: ``tables`` (a `TablePartial` per query), ``runs`` (one
    (first, last, increasing, nulls) per row group; only with a unit) and
    ``complete``: False once some row group's ids are not strictly increasing,
    at which the task stops reading (the driver will not use the result).
    ``derived``: see `ChunkAggregator`.
    ``require_increasing=False`` reads everything whatever the order of the ids
    (the driver has proven them unique another way).
    """
    derived = dict(derived or {})
    # Aggregation tasks get no key material: these copies hold no master key.
    specs = [spec.without_key() for spec in specs]

    def partials(pieces: Iterator[tuple[str, int]]) -> Iterator[dict]:
        import pyarrow.parquet as pq

        aggregator = ChunkAggregator(specs, unit, derived, require_increasing)
        needed = aggregator.needed()
        strings = aggregator.string_keys()
        files: dict[str, pq.ParquetFile] = {}
        for path, group in pieces:
            if not aggregator.complete:
                break
            if path not in files:
                files[path] = pq.ParquetFile(path, read_dictionary=strings)
            aggregator.add(files[path].read_row_group(group, columns=needed, use_threads=False))
        yield aggregator.result()

    return partials


def merge_partials(first: dict, second: dict) -> dict:
    """Two tasks' `parquet_partials_function` results as one (for ``treeReduce``)."""
    runs = first["runs"] + second["runs"]
    if not (first["complete"] and second["complete"]):
        return {"tables": [], "runs": runs, "complete": False}  # unused: no vectors to ship
    for mine, other in zip(first["tables"], second["tables"], strict=True):
        mine.merge(other)
    return {"tables": first["tables"], "runs": runs, "complete": True}
