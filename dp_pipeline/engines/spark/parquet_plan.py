"""The driver side of the Parquet pass: when a bare local Parquet scan may take it, and running it.

The executor side (row groups -> partial aggregates, with the numpy rules) is
`dp_pipeline.engines.spark.parquet_pass`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from pyspark import StorageLevel

from dp_pipeline.engines.spark.parquet_pass import (
    merge_partials,
    parquet_ids_function,
    parquet_partials_function,
)
from dp_pipeline.engines.spark.session.kinds import is_connect
from dp_pipeline.engines.spark.units import runs_prove_unique
from dp_pipeline.engines.spark_sql.coding import DEFERRED_COLUMN
from dp_pipeline.engines.spark_sql.diagnostics import query_diagnostics
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN

# Queries declaring up to this many cells in all may take the Parquet path
# (`parquet_pass`): every task holds dense int64 vectors of all their cells.
ONE_PASS_CELLS = 4_000_000
# False: bare local Parquet scans take the path of every other input (benchmarks, tests).
PARQUET_PASS = True
# Unsorted integer unit ids are proven unique on the driver by sorting them all
# (8 bytes an id) up to this many rows; beyond, the general path bounds them.
ID_SORT_ROWS = 50_000_000


def parquet_pieces(df, specs: Sequence[QuerySpec], unit: str | None, derived: dict | None = None):
    """(path, row group) of every row group ``df`` reads, or None if it is not a bare local scan.

    Only ``spark.read.parquet(...)`` of local (``file:``) files on a classic session
    (the pass runs RDD tasks, which Spark Connect has not), without
    partition columns qualifies (no projection or filter: every row of every
    file is an input row), and only when pyarrow reads every column the
    queries use with the type Spark gives it: integer (or floating-point) keys of
    integer domains, integer units, string keys, integer or floating-point summed columns.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if sum(spec.cells.total for spec in specs) > ONE_PASS_CELLS or is_connect(df):
        return None  # Spark Connect: no SparkContext to run the pass's tasks
    try:
        plan = df._jdf.queryExecution().analyzed()
        if plan.getClass().getSimpleName() != "LogicalRelation":
            return None
        relation = plan.relation()
        if relation.getClass().getSimpleName() != "HadoopFsRelation":
            return None
        if relation.fileFormat().getClass().getSimpleName() != "ParquetFileFormat":
            return None
        if relation.partitionSchema().length() != 0:
            return None
        files = sorted(df.inputFiles())
    except Exception:  # an API change must fail safe: the general path
        return None
    derived = derived or {}
    checks = {}
    for grid in derived.values():
        checks[grid.column] = lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)
    for spec in specs:
        hierarchy = spec.hierarchy.domains if spec.hierarchy is not None else ()
        for domain in (*spec.cells.domains, *hierarchy):
            if domain.column in derived:
                continue
            checks[domain.column] = (
                (lambda t: pa.types.is_integer(t) or pa.types.is_floating(t))
                if domain.kind == "int"
                else (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t))
            )
        if spec.column is not None:
            checks.setdefault(
                spec.column, lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)
            )
    if unit is not None:
        checks[unit] = pa.types.is_integer
    pieces = []
    for uri in files:
        parsed = urllib.parse.urlparse(uri)
        if parsed.scheme != "file":
            return None
        path = urllib.parse.unquote(parsed.path)
        try:
            metadata = pq.ParquetFile(path)
        except Exception:  # not readable here: let Spark read it
            return None
        schema = metadata.schema_arrow
        for column, check in checks.items():
            if schema.get_field_index(column) < 0 or not check(schema.field(column).type):
                return None
        pieces += [(path, group) for group in range(metadata.num_row_groups)]
    return pieces


def parquet_pass(
    source, df, specs: Sequence[QuerySpec], unit: str | None, collect: bool, derived: dict
):
    """(aggregates, diagnostics) of `aggregate_queries` in one pass over Parquet, or None.

    The input's row groups are read by Spark tasks with pyarrow
    (`dp_pipeline.engines.spark.parquet_pass`: the pandas engine's numpy rules), which is ~4x
    faster than handing the rows from the JVM to Python (``mapInArrow``, whose
    row-to-Arrow conversion alone costs what Spark's own aggregation does) and
    than the two Spark jobs of the general path. The tasks return dense
    per-query vectors, summed by a ``treeReduce``. When every unit has one row,
    which is within every bound, the sums are the bounded aggregates, as the
    general rule would give. That is proven exactly, either in the same pass
    (ids strictly increasing within every row group, disjoint row-group
    ranges) or, for ids in no order, by sorting all the ids on the driver
    (`ids_are_unique`, one job reading the unit column) and then aggregating.
    Otherwise (some unit has several rows), or if the input is not a bare
    local Parquet scan (`parquet_pieces`) or a task fails, this returns None
    and the caller takes the general path.
    ``source`` is the input as given (the scan); ``df`` is it with the
    ``derived`` columns, for the lazy error examples of the diagnostics.
    """
    from py4j.protocol import Py4JJavaError

    pieces = parquet_pieces(source, specs, unit, derived) if PARQUET_PASS else None
    if not pieces:
        return None
    context = df.sparkSession.sparkContext
    slices = max(1, min(len(pieces), context.defaultParallelism))

    def aggregate(require_increasing: bool):
        # treeReduce: executors merge the dense vectors, so the driver gets a few of them.
        function = parquet_partials_function(specs, unit, derived, require_increasing)
        rdd = context.parallelize(pieces, slices).mapPartitions(function)
        return rdd.treeReduce(merge_partials, depth=2)

    try:
        result = aggregate(require_increasing=True)
        if unit is not None and not (result["complete"] and runs_prove_unique(result["runs"])[0]):
            # Ids not in order (or row groups overlapping): prove uniqueness exactly by
            # sorting every id, then aggregate without the order requirement.
            if not ids_are_unique(context, pieces, slices, unit):
                return None
            if not result["complete"]:
                result = aggregate(require_increasing=False)
    except Py4JJavaError:  # e.g. a file that executors cannot open: Spark reads it
        return None
    if not result["complete"]:
        return None
    return one_pass_result(result["tables"], specs, df, collect)


def one_pass_result(tables, specs: Sequence[QuerySpec], df, collect: bool):
    """(aggregates, diagnostics) of `aggregate_queries` from one pass's summed `TablePartial`s.

    Used when every unit is proven to have one row (the partial sums are then the
    bounded aggregates). With ``collect`` the aggregates are an Arrow table on the
    driver, else a persisted DataFrame of ``df``'s session.
    """
    summary = []
    for index, table in enumerate(tables):
        rows = {code: (n, 0) for code, n in table.dropped.items()}
        used = int(table.n.sum())
        if used:
            rows[0] = (used, int(table.clamped.sum()) if table.clamped is not None else 0)
        for code, (n, clamped) in rows.items():
            summary.append(
                {
                    TABLE_COLUMN: index,
                    "code": code,
                    DEFERRED_COLUMN: False,
                    "n": n,
                    "clamped": clamped,
                    "removed_per_cell": 0,
                    "removed_cells": 0,
                    "pairs_removed": 0,
                }
            )
    diagnostics = query_diagnostics(summary, specs, df)
    table = aggregates_table(tables)
    if collect:
        return table, diagnostics
    frame = df.sparkSession.createDataFrame(table).persist(StorageLevel.MEMORY_AND_DISK)
    return frame, diagnostics


def ids_are_unique(context, pieces, slices: int, unit: str) -> bool:
    """Exactly: no non-null unit id occurs twice (all ids sorted on the driver).

    Declines (False) above `ID_SORT_ROWS` rows, where the general path's shuffle
    by unit is the better way to find the units with several rows.
    """
    import numpy as np
    import pyarrow.parquet as pq

    rows = 0
    for path, group in pieces:
        rows += pq.ParquetFile(path).metadata.row_group(group).num_rows
    if rows > ID_SORT_ROWS:
        return False
    parts = context.parallelize(pieces, slices).mapPartitions(parquet_ids_function(unit))
    ids = np.sort(np.concatenate(parts.collect()))
    return bool(np.all(ids[1:] > ids[:-1]))


def aggregates_table(tables):
    """The `aggregate_queries` rows (Arrow) of dense `TablePartial` sums (non-empty cells only).

    Reason-code rows carry the dropped rows in ``n`` and 0 in the other columns
    (the general path also sums the dropped rows' units there; nothing reads them).
    """
    import numpy as np
    import pyarrow as pa

    parts = []
    for index, table in enumerate(tables):
        cells = np.flatnonzero(table.n)
        codes = np.array(sorted(table.dropped), dtype=np.int64)
        dropped = np.array([table.dropped[c] for c in codes.tolist()], dtype=np.int64)
        zeros = np.zeros(codes.size, dtype=np.int64)
        none = np.zeros(cells.size, dtype=np.int64)
        n = table.n[cells]
        s = table.s.clamped()[cells] if table.s is not None else none
        clamped = table.clamped[cells] if table.clamped is not None else none
        size = cells.size + codes.size
        columns = {
            TABLE_COLUMN: pa.array(np.full(size, index, dtype=np.int32)),
            CELL_COLUMN: np.concatenate([cells, codes]),
            DEFERRED_COLUMN: pa.array(np.zeros(size, dtype=bool)),
            "n": np.concatenate([n, dropped]),
            "s": np.concatenate([s, zeros]),
            "clamped": np.concatenate([clamped, zeros]),
            "removed_per_cell": np.zeros(size, dtype=np.int64),
            "removed_cells": np.zeros(size, dtype=np.int64),
            "pairs_removed": np.zeros(size, dtype=np.int64),
            "true_n": np.concatenate([n, zeros]),
            "true_s": np.concatenate([s, zeros]),
        }
        parts.append(pa.table(columns))
    return pa.concat_tables(parts)
