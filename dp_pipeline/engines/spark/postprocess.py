"""Consistent tables on Spark: one task per top-level geography (a state).

The noisy cells of the combined tables arrive as a DataFrame of ``top`` (the
cell's top-level position), ``table`` (the table's position), ``cell`` (its
index in the table's C order) and ``value`` (the noisy count). Two grouped
``applyInArrow`` passes run a group solver's per-group functions: the first
returns each group's small part (its top-level tables' least squares estimates
and its finer tables' totals), from which the driver fixes the national total,
the top-level totals and the top-level tables; the second solves each group
against those and returns its consistent cells. The per-group functions are
the ones the driver's `make_consistent` runs, on the same inputs, so the result
is the same bit for bit and independent of executors, partitions and retries.
National tables (no hierarchy key) are one more group (``top`` equal to the
number of groups); their parts carry a list column ``coupling`` (each row's
sensitivity to the coupling multiplier, and the block's covariance rows), empty
for a solver without national tables.

The solver (`dp_pipeline.postprocess.group_solver.GroupSolver`, built by the
release layer) is passed in: this module knows its four methods and ``two_pass``, not the
post-processing package. Pure post-processing; no key, no privacy cost.

Two driver-side ends: `cells_frame` sends numpy columns from the driver and
`table_values` reads each table back whole (the round trip of a release whose
noisy tables are on the driver); `top_cells` builds the cells from the Spark
noise job's lazy output and `FittedCells.batches` reads one table back in
ranges of cells (a release that never holds a table whole on the driver).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    StructField,
    StructType,
)

from dp_pipeline.engines.spark.session.kinds import is_connect
from dp_pipeline.errors import InternalError
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN

__all__ = [
    "CELLS_SCHEMA",
    "MOVED_COLUMN",
    "SIZE_CLASS_COLUMN",
    "WIDENED_COLUMN",
    "FittedCells",
    "GroupSolverLike",
    "TopLayout",
    "cells_frame",
    "consistent_cells",
    "consistent_tables",
    "move_counts",
    "moves_and_widened",
    "table_values",
    "top_cells",
]

CELLS_SCHEMA = StructType(
    [
        StructField("top", IntegerType(), False),
        StructField("table", IntegerType(), False),
        StructField("cell", LongType(), False),
        StructField("value", LongType(), False),
    ]
)
MOVED_COLUMN = "moved"
SIZE_CLASS_COLUMN = "size_class"  # each cell's class by its noisy value
# GroupSolver.fit's per-cell count of its table's cells rounded outside the floor/ceil box
# (on the table's first cell of each group): summed per table, the table's count.
WIDENED_COLUMN = "widened"
_PART_SCHEMA = StructType(
    [
        StructField("top", IntegerType(), False),
        StructField("table", IntegerType(), False),
        StructField("cell", LongType(), False),
        StructField("estimate", DoubleType(), False),
        StructField("iterations", IntegerType(), False),
        StructField("residual", DoubleType(), False),
        # National tables: each row's sensitivity to the coupling multiplier (else empty).
        StructField("coupling", ArrayType(DoubleType(), False), False),
    ]
)


class GroupSolverLike(Protocol):
    options: Any
    two_pass: bool  # the first pass and the top step run

    def cells(self, values: list[np.ndarray]) -> dict[str, np.ndarray]: ...
    def part(self, group: int, table, cell, value) -> dict[str, np.ndarray]: ...
    def top(self, parts: dict[str, np.ndarray]) -> Any: ...
    def fit(self, group: int, table, cell, value, top) -> dict[str, np.ndarray]: ...


def _columns(table: pa.Table) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    top = table.column("top").to_numpy()
    return (
        int(top[0]),
        table.column("table").to_numpy(),
        table.column("cell").to_numpy(),
        table.column("value").to_numpy(),
    )


def _arrow(columns: dict[str, np.ndarray], schema: StructType) -> pa.Table:
    return pa.table({f.name: _arrow_column(columns[f.name]) for f in schema.fields})


def _arrow_column(values: np.ndarray) -> pa.Array:
    """A column; a 2-D array becomes a list column, one row of the array per row."""
    if values.ndim == 1:
        return pa.array(values)
    rows, width = values.shape
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * width)
    flat = pa.array(np.ascontiguousarray(values, dtype=np.float64).reshape(-1))
    # The Arrow type Spark reads ArrayType(DoubleType(), containsNull=False) as.
    element = pa.list_(pa.field("element", pa.float64(), nullable=False))
    return pa.ListArray.from_arrays(offsets, flat, type=element)


def _numpy_column(column: pa.ChunkedArray) -> np.ndarray:
    """A column as numpy; a list column of equal-length rows as a 2-D array."""
    if not pa.types.is_list(column.type):
        return column.to_numpy()
    rows = len(column)
    flat = column.combine_chunks().flatten().to_numpy()
    return flat.reshape(rows, flat.size // rows if rows else 0)


def _fitted_schema(solver: GroupSolverLike) -> StructType:
    integer = solver.options is not None and solver.options.integer
    value = LongType() if integer else DoubleType()
    fields = [*CELLS_SCHEMA.fields[:3], StructField("value", value, False)]
    if solver.options is not None:  # the top-down step's move of each cell (move units)
        fields.append(StructField(MOVED_COLUMN, LongType(), False))
        fields.append(StructField(SIZE_CLASS_COLUMN, LongType(), False))
        fields.append(StructField(WIDENED_COLUMN, LongType(), False))
    return StructType(fields)


def move_counts(fitted: DataFrame, tables: int) -> list[np.ndarray]:
    """`moves_and_widened`'s move counts."""
    return moves_and_widened(fitted, tables)[0]


def moves_and_widened(
    fitted: DataFrame, tables: int, top: Mapping[int, int] | None = None
) -> tuple[list[np.ndarray], list[int]]:
    """Per table, the move counts below and how many of its cells the controlled
    roundings took outside the floor/ceil box (the groups' ``widened`` column summed,
    plus ``top``: the top step's, run on the driver).

    Move counts: per table, how many of its cells of each noisy-value class the top-down step moved
    by 0, 1, 2, ... move units (row k: class k; the driver's
    `dp_pipeline.postprocess.margins.class_move_counts` of each whole table, up to rows
    of classes without cells).

    One small aggregation of the fitted cells' ``moved`` and ``size_class`` columns (a
    few rows per table come back).
    """
    rows = (
        fitted.groupBy("table", SIZE_CLASS_COLUMN, MOVED_COLUMN)
        .agg(sf.count(sf.lit(1)).alias("count"), sf.sum(WIDENED_COLUMN).alias(WIDENED_COLUMN))
        .toArrow()
    )
    table = rows.column("table").to_numpy()
    size_class = rows.column(SIZE_CLASS_COLUMN).to_numpy()
    moved = rows.column(MOVED_COLUMN).to_numpy()
    count = rows.column("count").to_numpy()
    out = []
    classes = int(size_class.max(initial=0)) + 1  # a class without cells: a row of zeros
    for t in range(tables):
        mine = table == t
        counts = np.zeros((classes, int(moved[mine].max(initial=0)) + 1), np.int64)
        counts[size_class[mine], moved[mine]] = count[mine]
        out.append(counts)
    summed = np.bincount(table, rows.column(WIDENED_COLUMN).to_numpy(), tables)
    widened = [int(n) + int((top or {}).get(t, 0)) for t, n in enumerate(summed)]
    return out, widened


@contextmanager
def cells_frame(spark: SparkSession, columns: dict[str, np.ndarray]) -> Iterator[DataFrame]:
    """The cells DataFrame (``CELLS_SCHEMA``) from numpy columns on the driver.

    In local mode the cells are staged as one Parquet file in a private temporary
    folder (removed on exit) and read back: 8x faster than sending the rows from
    Python (a 1 M-row ``createDataFrame``: 11.8 s against 1.4 s under load, on two
    cores). On a cluster, whose executors cannot see the driver's disk, and on
    Spark Connect (whose server may be elsewhere), the rows are sent as Arrow.
    Either way the frame is hash-partitioned by ``top`` once and persisted, so
    both grouped passes read it without another shuffle.
    """
    table = _arrow(columns, CELLS_SCHEMA)
    if is_connect(spark) or not spark.sparkContext.master.startswith("local"):
        frame = spark.createDataFrame(table)
        yield _partitioned(frame)
        return
    with tempfile.TemporaryDirectory(prefix="dp-postprocess-") as folder:
        pq.write_table(table, os.path.join(folder, "cells.parquet"))
        yield _partitioned(spark.read.schema(CELLS_SCHEMA).parquet(folder))


def _partitioned(frame: DataFrame) -> DataFrame:
    return frame.repartition("top").persist(StorageLevel.MEMORY_AND_DISK)


def consistent_cells(
    cells: DataFrame, solver: GroupSolverLike, carry: Mapping[str, str] | None = None
) -> tuple[DataFrame, dict]:
    """The consistent cells (top, table, cell, value) of every table, as a lazy DataFrame.

    Runs the first pass and the top step now (one Spark job, a few rows per
    group come back); the second pass runs when the result is read. Returns the
    DataFrame and the diagnostics (most conjugate gradient steps of a group,
    largest margin residual, projection steps of the top step). ``carry``: {output
    column: column of ``cells``} passed through to each fitted cell (the noisy
    count as ``raw_value``, say), so no join is needed afterwards.
    """
    carry = dict(carry or {})
    diagnostics: dict = {"iterations": 0, "max_residual": 0.0, "raking_steps": 0}
    top = None
    if solver.two_pass:

        def part(table: pa.Table) -> pa.Table:
            return _arrow(solver.part(*_columns(table)), _PART_SCHEMA)

        parts = cells.groupBy("top").applyInArrow(part, _PART_SCHEMA).toArrow()
        top = solver.top({name: _numpy_column(parts.column(name)) for name in parts.column_names})
        diagnostics["iterations"] = int(np.max(parts.column("iterations").to_numpy()))
        diagnostics["max_residual"] = float(np.max(parts.column("residual").to_numpy()))
        diagnostics["raking_steps"] = int(top.raking_steps)
        diagnostics["widened"] = dict(getattr(top, "widened", {}))
    schema = _fitted_schema(solver)
    types = {f.name: f.dataType for f in cells.schema.fields}
    schema = StructType(
        [*schema.fields, *(StructField(out, types[name], False) for out, name in carry.items())]
    )

    def fit(table: pa.Table) -> pa.Table:
        group, tables, cell, value = _columns(table)
        fitted = solver.fit(group, tables, cell, value, top)
        if carry:
            # The solver returns the group's cells in (table, cell) order.
            order = np.lexsort((cell, tables))
            if not (
                np.array_equal(fitted["table"], tables[order])
                and np.array_equal(fitted["cell"], cell[order])
            ):
                raise InternalError(f"group {group}: the fitted cells are not the group's cells")
            for out, name in carry.items():
                fitted[out] = table.column(name).to_numpy()[order]
        return _arrow(fitted, schema)

    return cells.groupBy("top").applyInArrow(fit, schema), diagnostics


def consistent_tables(
    spark: SparkSession,
    solver: GroupSolverLike,
    values: list[np.ndarray],
    moved: list | None = None,
    widened: list | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Each table's consistent values (position, cell order), solved on Spark per group.

    ``moved``: a list that receives each table's `move_counts` first (with options);
    ``widened``: one that receives each table's widened cells (`moves_and_widened`).
    """
    with cells_frame(spark, solver.cells(values)) as frame:
        try:
            fitted, diagnostics = consistent_cells(frame, solver)
            top = diagnostics.get("widened")
            yield from table_values(fitted, [v.size for v in values], moved, widened, top)
        finally:
            frame.unpersist()


def table_values(
    fitted: DataFrame,
    cells: list[int],
    moved: list | None = None,
    widened: list | None = None,
    top_widened: Mapping[int, int] | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Each table's consistent values in cell order, one table at a time.

    ``cells`` gives each table's cell count. The fitted cells are persisted on the
    executors (the second pass runs once); the driver holds one table at a time,
    never the whole set, each read as Arrow batches and placed by cell index.
    ``moved``, when the fitted cells have the column: extended with `move_counts`;
    ``widened``: with the widened cells per table (`moves_and_widened`, ``top_widened``
    the top step's).
    """
    fitted = fitted.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        if (moved is not None or widened is not None) and MOVED_COLUMN in fitted.columns:
            counts, widened_cells = moves_and_widened(fitted, len(cells), top_widened)
            if moved is not None:
                moved.extend(counts)
            if widened is not None:
                widened.extend(widened_cells)
        for t, n in enumerate(cells):
            rows = fitted.filter(fitted.table == t).select("cell", "value").toArrow()
            cell = rows.column("cell").to_numpy()
            value = rows.column("value").to_numpy()
            if cell.size != n or np.any(np.bincount(cell, minlength=n) != 1):
                raise InternalError(
                    f"consistent table {t}: {cell.size} cells came back for {n}; every "
                    "cell once is expected"
                )
            out = np.empty(n, dtype=value.dtype)
            out[cell] = value
            yield t, out
    finally:
        fitted.unpersist()


@dataclass(frozen=True)
class TopLayout:
    """Where a table's cells sit in the hierarchy: the top of cell c is
    ``tops[(c // stride) % size]`` (its hierarchy key's axis in C order)."""

    stride: int
    size: int
    tops: np.ndarray  # int32, one per position of the table's hierarchy level


def top_cells(
    noisy: DataFrame, layouts: Sequence[TopLayout], carry: Sequence[str] = ()
) -> DataFrame:
    """The cells DataFrame (``CELLS_SCHEMA``, then ``carry``) of the Spark noise job's output.

    ``noisy``: ``_dp_table`` (the table's position, indexing ``layouts``),
    ``_cell``, ``count`` (the noisy count) and the ``carry`` columns (long). The
    top of every cell is derived on the executors from its index and the public
    hierarchy (``layouts``); nothing comes to the driver. Hash-partitioned by
    ``top`` and persisted, as `cells_frame`'s.
    """
    carry = list(carry)
    schema = StructType([*CELLS_SCHEMA.fields, *(StructField(c, LongType(), False) for c in carry)])
    shipped = [(int(x.stride), int(x.size), np.asarray(x.tops, dtype=np.int32)) for x in layouts]

    def with_tops(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            table = batch.column(TABLE_COLUMN).to_numpy().astype(np.int32)
            cell = batch.column(CELL_COLUMN).to_numpy().astype(np.int64)
            top = np.empty(cell.size, dtype=np.int32)
            for t, (stride, size, tops) in enumerate(shipped):
                mine = table == t
                top[mine] = tops[(cell[mine] // stride) % size]
            columns = {"top": top, "table": table, "cell": cell}
            columns["value"] = batch.column("count").to_numpy().astype(np.int64)
            for name in carry:
                columns[name] = batch.column(name).to_numpy().astype(np.int64)
            yield pa.RecordBatch.from_pydict(columns, schema=_arrow_schema(schema))

    selected = noisy.select(TABLE_COLUMN, CELL_COLUMN, "count", *carry)
    return _partitioned(selected.mapInArrow(with_tops, schema))


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_type

    return pa.schema(
        [pa.field(f.name, to_arrow_type(f.dataType), nullable=False) for f in schema.fields]
    )


class FittedCells:
    """The consistent cells of `consistent_cells`, persisted, read back one range at a time.

    ``with FittedCells(cells, solver, carry) as fitted: fitted.batches(t, n, rows)``.
    The second pass runs once (when the first range is read); the driver then
    holds one range of one table at a time. Closing unpersists ``cells`` too.
    """

    def __init__(self, cells: DataFrame, solver: GroupSolverLike, carry=None) -> None:
        self.cells = cells
        self.widened: list[int] = []
        fitted, self.diagnostics = consistent_cells(cells, solver, carry)
        # Each group's output is in (table, cell) order, so the cached column batches'
        # statistics let a range's filter skip most of them.
        self.fitted = fitted.persist(StorageLevel.MEMORY_AND_DISK)

    def __enter__(self) -> FittedCells:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.fitted.unpersist()
        self.cells.unpersist()

    def move_counts(self, tables: int) -> list[np.ndarray] | None:
        """Per table, `move_counts` of the fitted cells (None without a top-down step).

        Runs the second pass now; the fitted cells stay persisted for `batches`. Sets
        ``widened``: per table, its cells rounded outside the box (`moves_and_widened`).
        """
        if MOVED_COLUMN not in self.fitted.columns:
            return None
        counts, self.widened = moves_and_widened(
            self.fitted, tables, self.diagnostics.get("widened")
        )
        return counts

    def batches(self, table: int, cells: int, rows: int) -> Iterator[pa.Table]:
        """Table ``table``'s fitted cells (``cells`` of them) in ranges of ``rows``, cell order.

        Columns: ``cell``, ``value`` and the carried columns. Every cell comes once
        (checked: a missing or repeated cell is an internal error, never a gap).
        """
        skip = ("top", "table", MOVED_COLUMN, SIZE_CLASS_COLUMN, WIDENED_COLUMN)
        names = [n for n in self.fitted.columns if n not in skip]
        for start in range(0, cells, rows):
            stop = min(start + rows, cells)
            chosen = self.fitted.filter(
                (self.fitted.table == table)
                & (self.fitted.cell >= start)
                & (self.fitted.cell < stop)
            )
            got = chosen.select(*names).toArrow()
            got = got.take(np.argsort(got.column("cell").to_numpy(), kind="stable"))
            if not np.array_equal(got.column("cell").to_numpy(), np.arange(start, stop)):
                raise InternalError(
                    f"consistent table {table}: cells {start}..{stop - 1} came back as "
                    f"{got.num_rows} rows; every cell once is expected"
                )
            yield got
