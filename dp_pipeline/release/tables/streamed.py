"""Released tables that stay on Spark until they are written: the noisy cells, then batches.

A Spark release whose combined count tables are post-processed on Spark never
holds those tables whole on the driver. `SparkNoisyTables` is what the engine
hands over: the combined tables' noisy cells as a lazy Spark DataFrame (noised
on the executors, the same draws as every other path) and what decoding their
keys needs. After post-processing each such table is a `StreamedTable`: it
yields its released rows (key columns, ``value``, ``raw_value`` and, on
synthetic input, ``true_value``) in cell order, one range of cells at a time,
which the writer turns into Parquet row groups. Nothing here imports PySpark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["OnSpark", "SparkNoisyTables", "StreamedTable", "close_tables", "is_streamed"]


@dataclass(repr=False, eq=False)
class SparkNoisyTables:
    """The noisy cells of the tables ``names`` (in that order) as a lazy Spark DataFrame.

    ``frame``: ``_dp_table`` (position in ``names``), ``_cell``, ``count``, ``sum``
    and, with ``truth``, ``true_n`` (the non-private count before bounding;
    synthetic input only, never published). ``queries`` / ``key_types`` decode a
    table's cell indices into its key columns. ``close`` releases what the frame
    needs persisted.
    """

    names: tuple[str, ...]
    frame: Any
    queries: list
    key_types: list[dict[str, pa.DataType]]
    truth: bool
    close: Callable[[], None]

    def __repr__(self) -> str:
        return f"SparkNoisyTables({', '.join(self.names)})"

    def decoded(self, position: int, cells: np.ndarray, columns: dict[str, Any]) -> pa.Table:
        """Table ``position``'s rows for ``cells``: decoded key columns, then ``columns``.

        Arrow throughout (a string key is its domain's values taken by position), so a
        batch costs its Arrow buffers, not a Python object per key value.
        """
        query = self.queries[position]
        types = self.key_types[position]
        arrays = {}
        for column, domain, stride in zip(
            query.cells.columns, query.cells.domains, query.cells.strides, strict=True
        ):
            positions = (cells // np.int64(stride)) % np.int64(domain.size)
            if domain.is_range:
                arrays[column] = pa.array(domain.values_at(positions), type=types[column])
            else:
                values = pa.array(list(domain.values), type=types[column])
                arrays[column] = values.take(pa.array(positions))
        for name, values in columns.items():
            arrays[name] = pa.array(values)
        return pa.table(arrays)


@dataclass(frozen=True, repr=False)
class OnSpark:
    """A table of `SparkNoisyTables` in a release's results (nothing on the driver yet)."""

    tables: SparkNoisyTables
    position: int

    def __repr__(self) -> str:
        return f"OnSpark({self.tables.names[self.position]!r})"

    def close(self) -> None:
        self.tables.close()


@dataclass(frozen=True, repr=False)
class StreamedTable:
    """A released table read in ranges of cells: ``batches(rows)`` yields Arrow tables.

    Every batch has the key columns, ``value``, ``raw_value`` and, with ``truth``,
    ``true_value``, for consecutive cells in order; all of them together are the
    table, every declared cell once. ``close`` releases the Spark side.
    """

    name: str
    cells: int
    truth: bool
    batches: Callable[[int], Iterator[pa.Table]]
    close: Callable[[], None] = field(default=lambda: None)
    value_margin: int | None = None  # post-processed: the margin of error of ``value``

    def __repr__(self) -> str:
        return f"StreamedTable({self.name!r}, {self.cells} cells)"


def is_streamed(value) -> bool:
    """True for a table that is not a pandas frame on the driver (`OnSpark`, `StreamedTable`)."""
    return isinstance(value, OnSpark | StreamedTable)


def close_tables(results: dict) -> None:
    """Release the Spark side of every streamed table of ``results`` (idempotent)."""
    for value in results.values():
        if is_streamed(value):
            value.close()
