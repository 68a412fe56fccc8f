"""The Arrow pass: every query aggregated in one ``mapInArrow`` over any DataFrame.

Spark's own reader (any file system, any format, a catalog table, a DataFrame
built in Spark; classic or Spark Connect) hands each task its rows as Arrow
batches; the task runs the numpy rules of `dp_pipeline.engines.spark.parquet_pass`
(`ChunkAggregator`: the pandas engine's coding, clamping and exact sums) on chunks
of them and adds every query's rows into dense per-query vectors. Key columns
whose domains are ranges or short lists reach the task already coded by Spark
(`KeyCodes`: each row's position in each domain, null or outside, packed into a
few longs), so Spark hands Python three or four long columns instead of every key
column (its row-to-Arrow conversion costs per value). It also records
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

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as sf
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
from dp_pipeline.engines.spark.parquet_pass import ChunkAggregator, merge_partials, query_domains
from dp_pipeline.engines.spark.units import runs_prove_unique
from dp_pipeline.engines.spark_sql.coding import CASE_LIST_LIMIT, key_position
from dp_pipeline.query.spec import QuerySpec

__all__ = ["CHUNK_ROWS", "KeyCodes", "arrow_partials_function", "arrow_pass"]

# A task aggregates its Arrow batches (Spark sends 10,000 rows a batch) in chunks of
# this many rows: the numpy rules' fixed cost per call is then negligible.
CHUNK_ROWS = 1 << 18
# A task's pickled vectors travel to the driver in rows of at most this many bytes
# (a Spark Connect result message has a size limit).
SLICE_BYTES = 1 << 20

_INTEGERS = (ByteType, ShortType, IntegerType, LongType)
_NUMBERS = (*_INTEGERS, FloatType, DoubleType)
_SCHEMA = "task long, slice long, data binary"
# A packed column holds the codes of several domains while their product fits a long.
PACK_LIMIT = 1 << 62


class KeyCodes:
    """Key columns coded by Spark, packed into a few longs, decoded by the tasks.

    A row's code in a domain is 0 where its key is null (`key_position`'s rule: also
    NaN), 1 where it is outside the domain, else 2 + its position: `key_position`,
    the Spark SQL dialect of the numpy rules, which every engine's tests hold to the
    same cells. The codes of several domains are one mixed-radix long (radix = the
    domain's size + 2) while the product of the radixes stays within ``2**62``.
    ``groups``: per packed column, its (domain signature, column, radix), most
    significant first.
    """

    def __init__(self, groups: list[list[tuple[tuple, str, int]]]) -> None:
        self.groups = groups

    @property
    def columns(self) -> set[str]:
        """The input columns coded by Spark (the tasks need not read them)."""
        return {column for group in self.groups for _, column, _ in group}

    @staticmethod
    def name(index: int) -> str:
        return f"_dp_keys{index}"

    @classmethod
    def plan(cls, df, specs: Sequence[QuerySpec], keep: set[str]):
        """(KeyCodes, Spark columns to select) for ``df``'s key columns not in ``keep``.

        A column is coded when each of its domains is a range or a list of at most
        `CASE_LIST_LIMIT` values (one CASE expression, no join).
        """
        by_column: dict[str, list] = {}
        for signature, domain in query_domains(specs).items():
            by_column.setdefault(domain.column, []).append((signature, domain))
        parts = []
        for column in sorted(set(by_column) - keep):
            domains = by_column[column]
            if not all(d.is_range or d.size <= CASE_LIST_LIMIT for _, d in domains):
                continue
            for signature, domain in domains:
                _, missing, position = key_position(df, domain, "", 0)
                code = (
                    sf.when(missing, sf.lit(0).cast("long"))
                    .when(position.isNotNull(), position.cast("long") + sf.lit(2).cast("long"))
                    .otherwise(sf.lit(1).cast("long"))
                )
                parts.append((signature, column, domain.size + 2, code))
        groups, expressions = [], []
        product = 1
        for signature, column, radix, code in parts:
            if not groups or product * radix > PACK_LIMIT:
                groups.append([])
                expressions.append(None)
                product = 1
            previous = expressions[-1]
            radix_literal = sf.lit(radix).cast("long")
            expressions[-1] = code if previous is None else previous * radix_literal + code
            groups[-1].append((signature, column, radix))
            product *= radix
        selected = [e.alias(cls.name(i)) for i, e in enumerate(expressions)]
        return cls(groups), selected

    def decode(self, chunk: pa.Table) -> tuple[dict, dict]:
        """(positions by signature: -1 where null or outside; null masks by column, None
        where no key is null) of a chunk's packed columns, as `ChunkAggregator.add` takes."""
        positions, nulls = {}, {}
        for index, group in enumerate(self.groups):
            packed = chunk.column(self.name(index)).to_numpy().astype(np.int64, copy=True)
            for signature, column, radix in reversed(group):
                code = packed % radix
                packed //= radix
                positions[signature] = np.maximum(code - 2, -1)
                if column not in nulls:
                    missing = code == 0
                    nulls[column] = missing if missing.any() else None
        return positions, nulls


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
    specs: Sequence[QuerySpec],
    unit: str | None,
    derived: dict | None = None,
    codes: KeyCodes | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: a task's rows -> its pickled `ChunkAggregator` result.

    Yields rows (task, slice, data): the task's partition id, and the slices of
    the pickled result (``tables``: a `TablePartial` per query; ``runs``: one run
    for the task's ids; ``complete``: False once its ids are not strictly
    increasing, after which it aggregates nothing more). ``codes``: the key
    columns Spark coded (`KeyCodes`), which the batches hold packed.
    """
    derived = dict(derived or {})
    # Aggregation tasks get no key material: these copies hold no master key.
    specs = [spec.without_key() for spec in specs]

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        aggregator = ChunkAggregator(specs, unit, derived, run_per_chunk=False)
        pending: list[pa.RecordBatch] = []
        rows = 0

        def add(batches: list[pa.RecordBatch]) -> None:
            chunk = pa.Table.from_batches(batches).combine_chunks()
            aggregator.add(chunk, codes.decode(chunk) if codes is not None else None)

        for batch in batches:
            if not aggregator.complete:
                continue  # the driver will not use this task's sums
            pending.append(batch)
            rows += batch.num_rows
            if rows >= CHUNK_ROWS:
                add(pending)
                pending, rows = [], 0
        if pending:
            add(pending)
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
    # Columns the tasks read as they are: the unit, summed values, grid sources.
    keep = {grid.column for grid in derived.values()} | set(derived)
    keep |= {spec.column for spec in specs if spec.column is not None}
    keep |= {unit} if unit is not None else set()
    codes, packed = KeyCodes.plan(source, specs, keep)
    plain = [column for column in columns if column not in codes.columns]
    function = arrow_partials_function(specs, unit, derived, codes)
    frame = source.select(*plain, *packed)
    collected = frame.mapInArrow(function, _SCHEMA).toArrow()
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
