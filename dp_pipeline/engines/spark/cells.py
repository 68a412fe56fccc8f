"""The Spark engine behind `dp_pipeline.engines.backend.noisy_cells`: one pass, then noise.

`NoisyCells` holds one pass of `aggregate_queries` over a Spark DataFrame (the
bounded true aggregates of several queries, their diagnostics) and hands out,
per query, what callers above the engines layer need:

- `NoisyCells.noisy_table`: a lazy DataFrame noised on the executors (the Spark
  functions' form; nothing is collected);
- `NoisyCells.collect_released`: released tables collected to the driver, noised
  where `dp_pipeline.engines.spark.noise.collect_noisy_cells` places the noise
  (the driver up to `DRIVER_NOISE_CELLS` declared cells, the Spark noise job above);
- `NoisyCells.true_aggregates`: dense true bounded aggregates (what a selection
  scores, or what the driver adds noise to);
- `NoisyCells.spark_noisy_cells`: the noisy integer vectors of some queries as a
  lazy DataFrame (the Spark noise job), for post-processing that stays on the
  executors; those queries are then left out of everything collected.

Every form draws the same noise from the same keyed streams, so they agree bit
for bit with each other and with the pandas engine. The true aggregates are not
private: never publish them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as sf

from dp_pipeline.engines.base import CellAggregates, dense_aggregates
from dp_pipeline.engines.spark.aggregate import aggregate_queries
from dp_pipeline.engines.spark.noise import (
    DRIVER_NOISE_CELLS,
    collect_noisy_cells,
    noisy_table,
    output_schema,
)
from dp_pipeline.engines.spark.noise import noisy_cells as spark_noise_job
from dp_pipeline.errors import DPValueError, InternalError
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN, released_table

__all__ = [
    "DRIVER_NOISE_CELLS",
    "NoisyCells",
    "ReleasedCells",
    "aggregate",
    "noisy_cells",
    "noisy_tables",
]

_AGGREGATE_COLUMNS = [TABLE_COLUMN, CELL_COLUMN, "n", "s", "true_n", "true_s"]


@dataclass(frozen=True, repr=False)
class ReleasedCells:
    """One query's released table (every declared cell, in cell order) and, on request,
    its true values before bounding (synthetic data only; never publish them)."""

    table: pd.DataFrame
    true_count: np.ndarray | None = None
    true_sum: np.ndarray | None = None

    def __repr__(self) -> str:  # the true values stay out of logs and tracebacks
        return f"ReleasedCells({len(self.table)} cells, truth={self.true_count is not None})"


class NoisyCells:
    """One pass of bounded true aggregates of ``queries`` over a Spark DataFrame.

    ``aggregates`` is `aggregate_queries`' output: a persisted DataFrame, or the
    Parquet pass's Arrow table with ``collect``. Use as a context manager (or call
    `close`) to unpersist it.
    """

    def __init__(self, df, queries: Sequence[QuerySpec], *, derived=None, collect=False):
        self.df = df
        self.queries = list(queries)
        self.aggregates, diagnostics = aggregate_queries(
            df, self.queries, collect=collect, derived=derived
        )
        self.diagnostics: list[Diagnostics] = list(diagnostics)
        self._collected: pa.Table | None = None
        self._on_spark: frozenset[int] = frozenset()  # queries never collected

    def __enter__(self) -> NoisyCells:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NoisyCells({len(self.queries)} queries)"

    def close(self) -> None:
        """Unpersist the aggregates (a DataFrame); the lazy noisy tables need them until run."""
        if not isinstance(self.aggregates, pa.Table):
            self.aggregates.unpersist()

    def noisy_table(self, index: int, wrap_udf: Callable | None = None):
        """The lazy noisy DataFrame of query ``index``, noised on the executors.

        One row per declared cell (zero counts included): key columns typed from the
        domains, then the released values (`dp_pipeline.engines.spark.noise.noisy_table`).
        """
        aggregates = self.aggregates
        if isinstance(aggregates, pa.Table):
            aggregates = self.df.sparkSession.createDataFrame(aggregates)
        return noisy_table(aggregates, index, self.queries[index], self.df, wrap_udf)

    def _collect(self, truth: bool) -> pa.Table:
        """The non-empty cells of every query, collected once (Arrow); ``truth``: with
        ``true_n`` / ``true_s``."""
        if self._collected is None or (truth and "true_n" not in self._collected.column_names):
            columns = _AGGREGATE_COLUMNS if truth else _AGGREGATE_COLUMNS[:4]
            aggregates = self.aggregates
            kept = sorted(set(range(len(self.queries))) - self._on_spark)
            if isinstance(aggregates, pa.Table):
                rows = aggregates.filter(pc.greater_equal(aggregates.column(CELL_COLUMN), 0))
                if self._on_spark:
                    rows = rows.filter(pc.is_in(rows.column(TABLE_COLUMN), pa.array(kept)))
                self._collected = rows.select(columns)
            else:
                valid = aggregates.filter(sf.col(CELL_COLUMN) >= 0)
                if self._on_spark:
                    valid = valid.filter(sf.col(TABLE_COLUMN).isin(kept))
                self._collected = valid.select(*columns).toArrow()
        return self._collected

    def collect_released(
        self, queries: int | Sequence[int], *, truth: bool = False
    ) -> list[ReleasedCells]:
        """The released tables of ``queries`` (indices; an int n: ``0 .. n - 1``), collected
        in one noise step.

        Noise placement is `collect_noisy_cells`' one rule: on the driver when these
        queries declare at most `DRIVER_NOISE_CELLS` cells together, by the Spark noise
        job otherwise; the same draws either way (the draws depend on each query's
        stream labels, not on its index). ``truth``: also their true values before
        bounding (synthetic data only, for accuracy reports).
        """
        indices = list(range(queries)) if isinstance(queries, int) else list(queries)
        if not indices:
            return []
        if self._on_spark & set(indices):
            raise InternalError("queries kept on Spark cannot be collected")
        chosen = [self.queries[i] for i in indices]
        # Collected once for every query (the selections' counts included), then noised
        # on the driver or sent back to the Spark noise job, numbered 0.. in ``indices``.
        collected = self._collect(truth=truth)
        first = _renumbered(collected, indices)
        noisy, true_cells = collect_noisy_cells(first, chosen, self.df.sparkSession, truth=truth)
        released = []
        for index, query in enumerate(chosen):
            table = _released_frame(noisy, index, query, output_schema(self.df, query)[1])
            true_count = true_sum = None
            if true_cells is not None:
                true_count = _dense(true_cells, index, query, "true_n")
                true_sum = _dense(true_cells, index, query, "true_s")
            released.append(ReleasedCells(table, true_count, true_sum))
        return released

    def spark_noisy_cells(self, indices: Sequence[int], *, truth: bool = False):
        """The noisy integer vectors of queries ``indices`` as a lazy DataFrame (Spark noise job).

        Columns ``_dp_table`` (position in ``indices``), ``_cell`` (every declared cell),
        ``count``, ``sum`` (`dp_pipeline.engines.spark.noise.noisy_cells`: the draws of
        `collect_released`, bit for bit) and, with ``truth``, ``true_n``: the cell's
        count before bounding (0 for empty cells; synthetic data only, never publish
        it). These queries are left out of everything collected afterwards; call
        before `collect_released` / `true_aggregates`.
        """
        indices = list(indices)
        if self._collected is not None:
            raise InternalError("spark_noisy_cells must be called before anything is collected")
        self._on_spark = self._on_spark | frozenset(indices)
        aggregates = self.aggregates
        if isinstance(aggregates, pa.Table):
            aggregates = self.df.sparkSession.createDataFrame(aggregates)
        position = None
        for offset, index in enumerate(indices):
            condition = sf.col(TABLE_COLUMN) == sf.lit(index)
            value = sf.lit(offset)
            position = (
                sf.when(condition, value) if position is None else position.when(condition, value)
            )
        mine = aggregates.filter(sf.col(TABLE_COLUMN).isin(indices)).withColumn(
            TABLE_COLUMN, position.cast("int")
        )
        spark = self.df.sparkSession
        noisy = spark_noise_job(mine, [self.queries[i] for i in indices], spark)
        if not truth:
            return noisy
        true_counts = mine.filter(sf.col(CELL_COLUMN) >= 0).select(
            TABLE_COLUMN, CELL_COLUMN, sf.col("true_n").cast("long").alias("true_n")
        )
        joined = noisy.join(true_counts, [TABLE_COLUMN, CELL_COLUMN], "left")
        return joined.withColumn("true_n", sf.coalesce(sf.col("true_n"), sf.lit(0).cast("long")))

    def true_aggregates(self, index: int) -> CellAggregates:
        """Query ``index``'s dense true bounded aggregates, collected to the driver."""
        query = self.queries[index]
        rows = _rows_of(self._collect(truth=False), index)
        sums = None
        if query.column is not None:
            # Exact (clamped into ±2**62) as Python ints, then int64.
            sums = np.array([int(s) for s in rows.column("s").to_pylist()], dtype=np.int64)
        return dense_aggregates(
            query.cells.total,
            rows.column(CELL_COLUMN).to_numpy(),
            rows.column("n").to_numpy(),
            sums,
            self.diagnostics[index],
        )


def noisy_cells(df, queries: Sequence[QuerySpec], *, derived=None, collect=False) -> NoisyCells:
    """`NoisyCells` of ``queries`` over the Spark DataFrame ``df`` (one pass; see the class)."""
    return NoisyCells(df, queries, derived=derived, collect=collect)


def aggregate(df, queries: Sequence[QuerySpec], *, derived=None) -> list[CellAggregates]:
    """One dense `CellAggregates` per query of the Spark DataFrame ``df``, in one pass."""
    with NoisyCells(df, queries, derived=derived, collect=True) as cells:
        return [cells.true_aggregates(index) for index in range(len(cells.queries))]


def noisy_tables(df, queries: Sequence[QuerySpec], *, wrap_udf: Callable | None = None):
    """(lazy noisy DataFrame, diagnostics) per query, bounded in one pass, noised on executors.

    Queries must share the privacy unit column and have distinct (release_id, table)
    stream labels. The aggregates stay persisted for the lazy tables.
    """
    queries = list(queries)
    _check_distinct_streams(queries)
    cells = NoisyCells(df, queries)
    return [
        (cells.noisy_table(index, wrap_udf), cells.diagnostics[index])
        for index in range(len(queries))
    ]


def _check_distinct_streams(queries: Sequence[QuerySpec]) -> None:
    seen = set()
    for query in queries:
        labels = (query.release_id, query.table)
        if labels in seen:
            raise DPValueError(
                f"two queries use release_id {query.release_id!r} and table {query.table!r}: "
                f"they would draw the same noise; give every query of a release its own table "
                f"name"
            )
        seen.add(labels)


def _renumbered(table: pa.Table, indices: Sequence[int]) -> pa.Table:
    """The rows of queries ``indices``, their ``_dp_table`` replaced by the position in it."""
    if indices == list(range(len(indices))):
        return table.filter(pc.less(table.column(TABLE_COLUMN), len(indices)))
    tables = table.column(TABLE_COLUMN).to_numpy()
    lookup = np.full(max(int(tables.max(initial=0)), *indices) + 1, -1, dtype=np.int64)
    lookup[np.asarray(indices)] = np.arange(len(indices))
    positions = lookup[tables]
    rows = table.filter(pa.array(positions >= 0))
    column = rows.schema.get_field_index(TABLE_COLUMN)
    renumbered = pa.array(positions[positions >= 0].astype(np.int32))
    return rows.set_column(column, TABLE_COLUMN, renumbered.cast(rows.schema.field(column).type))


def _rows_of(table: pa.Table, index: int) -> pa.Table:
    return table.filter(pc.equal(table.column(TABLE_COLUMN), index))


def _released_frame(noisy: pa.Table, index: int, query: QuerySpec, key_types) -> pd.DataFrame:
    """Query ``index``'s released table from the collected noisy cells, in cell order."""
    rows = _rows_of(noisy, index)
    cells = rows.column(CELL_COLUMN).to_numpy()
    order = np.argsort(cells, kind="stable")
    if not np.array_equal(cells[order], np.arange(query.cells.total)):
        raise InternalError(
            f"table {query.table!r}: the Spark engine did not return exactly the declared cells"
        )
    measures = {name: rows.column(name).to_numpy()[order] for name, _, _ in query.measures()}
    return released_table(query, cells[order], measures, key_types).to_pandas()


def _dense(collected: pa.Table, index: int, query: QuerySpec, column: str) -> np.ndarray:
    """``column`` of query ``index``'s collected non-empty cells, dense by cell (0 elsewhere)."""
    rows = _rows_of(collected, index)
    dense = np.zeros(query.cells.total, dtype=np.int64)
    dense[rows.column(CELL_COLUMN).to_numpy()] = rows.column(column).fill_null(0).to_numpy()
    return dense
