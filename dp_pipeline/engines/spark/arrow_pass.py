"""The Arrow pass: every query aggregated in one ``mapInArrow`` over any DataFrame.

Spark's own reader (any file system, any format, a catalog table, a DataFrame
built in Spark; classic or Spark Connect) hands each task its rows as Arrow
batches; the task runs the numpy rules of `dp_pipeline.engines.spark.parquet_pass`
(`ChunkAggregator`: the pandas engine's coding, clamping and exact sums) on chunks
of them and adds every query's rows into dense per-query vectors. It also records
its unit ids as strictly increasing segments (first, last). The driver
collects each task's vectors (pickled, in slices), sums them and, with a unit,
trusts the sums only when the runs prove that no unit has several rows
(`runs_prove_unique`: every segment's range disjoint from the others): a
unit with one row is within every bound, so the sums are then the bounded
aggregates the general rule gives, bit for bit. The proof and the sums come from
the same rows in the same task, so the input need not be deterministic.
Otherwise (a unit with several rows, ids in no order, a column type the numpy
rules do not read) this returns None and the caller takes the Spark SQL jobs.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.types import (
    ByteType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
)

from dp_pipeline.engines.spark import parquet_plan
from dp_pipeline.engines.spark.parquet_pass import ChunkAggregator, merge_partials
from dp_pipeline.engines.spark.units import runs_prove_unique
from dp_pipeline.query.spec import QuerySpec

__all__ = ["CHUNK_ROWS", "arrow_partials_function", "arrow_pass"]

# A task aggregates its Arrow batches (Spark sends 10,000 rows a batch) in chunks of
# this many rows: the numpy rules' fixed cost per call is then negligible.
CHUNK_ROWS = 1 << 18
# A task's pickled vectors travel to the driver in rows of at most this many bytes
# (a Spark Connect result message has a size limit).
SLICE_BYTES = 1 << 20

_INTEGERS = (ByteType, ShortType, IntegerType, LongType)
_NUMBERS = (*_INTEGERS, FloatType, DoubleType)
_SCHEMA = "task long, slice long, data binary"


def arrow_columns(df, specs: Sequence[QuerySpec], unit: str | None, derived: dict):
    """The columns the Arrow pass reads, or None when a column's type is not one it reads.

    Integer-domain keys: integer or floating-point (NaN as null); string keys: string;
    summed and grid columns: integer or floating-point; the unit: integer.
    """
    # The limit of the Parquet pass: every task holds dense vectors of all the cells.
    if sum(spec.cells.total for spec in specs) > parquet_plan.ONE_PASS_CELLS:
        return None
    types = {field.name: field.dataType for field in df.schema.fields}
    wanted = {}
    for grid in derived.values():
        wanted[grid.column] = _NUMBERS
    for spec in specs:
        hierarchy = spec.hierarchy.domains if spec.hierarchy is not None else ()
        for domain in (*spec.cells.domains, *hierarchy):
            if domain.column not in derived:
                wanted[domain.column] = _NUMBERS if domain.kind == "int" else (StringType,)
        if spec.column is not None:
            wanted.setdefault(spec.column, _NUMBERS)
    if unit is not None:
        wanted[unit] = _INTEGERS
    for name, kinds in wanted.items():
        if name not in types or not isinstance(types[name], kinds):
            return None
    return sorted(wanted)


def arrow_partials_function(
    specs: Sequence[QuerySpec], unit: str | None, derived: dict | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: a task's rows -> its pickled `ChunkAggregator` result.

    Yields rows (task, slice, data): the task's partition id, and the slices of
    the pickled result (``tables``: a `TablePartial` per query; ``runs``: one run
    for the task's ids; ``complete``: False once its ids are not strictly
    increasing, after which it aggregates nothing more).
    """
    derived = dict(derived or {})
    # Aggregation tasks get no key material: these copies hold no master key.
    specs = [spec.without_key() for spec in specs]

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        aggregator = ChunkAggregator(specs, unit, derived, run_per_chunk=False)
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            if not aggregator.complete:
                continue  # the driver will not use this task's sums
            pending.append(batch)
            rows += batch.num_rows
            if rows >= CHUNK_ROWS:
                aggregator.add(pa.Table.from_batches(pending))
                pending, rows = [], 0
        if pending:
            aggregator.add(pa.Table.from_batches(pending))
        result = aggregator.result()
        for table in result["tables"]:
            table.spec = None  # the driver needs the vectors only
        data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        slices = [data[i : i + SLICE_BYTES] for i in range(0, len(data), SLICE_BYTES)]
        task = TaskContext.get().partitionId()
        yield pa.RecordBatch.from_pydict(
            {
                "task": pa.array([task] * len(slices), pa.int64()),
                "slice": pa.array(range(len(slices)), pa.int64()),
                "data": pa.array(slices, pa.binary()),
            }
        )

    return partials


def arrow_pass(
    source, df, specs: Sequence[QuerySpec], unit: str | None, collect: bool, derived: dict
):
    """(aggregates, diagnostics) of `aggregate_queries` in one ``mapInArrow`` pass, or None.

    ``source`` is the input as given; ``df`` is it with the ``derived`` columns (its
    session makes the DataFrame of the aggregates without ``collect``). None when
    a column has a type the numpy rules do not read, or some unit may have several
    rows (see the module docstring).
    """
    columns = arrow_columns(source, specs, unit, derived)
    if columns is None:
        return None
    function = arrow_partials_function(specs, unit, derived)
    collected = source.select(*columns).mapInArrow(function, _SCHEMA).toArrow()
    slices: dict[int, list[tuple[int, bytes]]] = {}
    for task, index, data in zip(
        collected.column("task").to_pylist(),
        collected.column("slice").to_pylist(),
        collected.column("data").to_pylist(),
        strict=True,
    ):
        slices.setdefault(task, []).append((index, data))
    result = None
    for task in sorted(slices):
        part = pickle.loads(b"".join(data for _, data in sorted(slices[task])))
        result = part if result is None else merge_partials(result, part)
    if result is None or not result["complete"]:
        return None
    if unit is not None and not runs_prove_unique(result["runs"])[0]:
        return None
    return parquet_plan.one_pass_result(result["tables"], specs, df, collect)
