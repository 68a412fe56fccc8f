"""Contribution bounding and true aggregates in Spark SQL, for one query or many at once.

`aggregate_queries` computes the bounded per-cell aggregates of several
queries over one DataFrame (the tables of a release) together:

1. A first job finds the privacy units with more than one row, from the unit
   column alone (a window over the unit: the one shuffle bounding needs).
2. One job codes every row with each query's cell index (integer arithmetic
   on the key columns, a CASE or broadcast lookup for explicit lists) and
   aggregates all queries at once. A unit with a single row satisfies every
   ``max_cells >= 1`` and ``max_per_cell >= 1``, so its row goes straight into
   every table: the keyed rule of `dp_pipeline.engines.bounding` would keep it anyway.
3. Only if some units have several rows, their rows take the general rule
   (`_bounded_pairs`: per-table window functions ranked by keyed hashes).

The result equals the general rule applied to every row, so both engines
still release bit-identical tables. Without a privacy unit every row is its
own unit and step 1 and 3 do not run. No Python runs per row.
"""

from __future__ import annotations

import itertools
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    ByteType,
    IntegerType,
    LongType,
    NumericType,
    ShortType,
    StringType,
)

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.engines.spark.parquet_pass import (
    IncreasingRun,
    merge_partials,
    parquet_ids_function,
    parquet_partials_function,
)
from dp_pipeline.errors import InternalError
from dp_pipeline.query.exact_sums import SUM_LIMIT
from dp_pipeline.query.quantile_grid import quantile_candidate_count
from dp_pipeline.query.spec import Diagnostics, QuerySpec, invalid_rows_error
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN

__all__ = [
    "TABLE_COLUMN",
    "aggregate_queries",
    "check_schema",
    "coded_rows",
    "invalid_number",
    "quantile_position",
]

_UNIT = "_dp_unit"
_UNITS = "_dp_value_units"
_CLAMPED = "_dp_clamped"
_UNIT_ROWS = "_dp_unit_rows"
_DEFERRED = "_dp_deferred"
# Units with several rows marked by a broadcast join (above: a window over all rows).
_BROADCAST_UNITS = 1_000_000
# Explicit domains up to this size are looked up with a CASE expression (no join).
_CASE_LIST_LIMIT = 64
# Queries declaring up to this many cells in all may take the Parquet path
# (`_parquet_pass`): every task holds dense int64 vectors of all their cells.
_ONE_PASS_CELLS = 4_000_000
# Unsorted integer unit ids are proven unique on the driver by sorting them all
# (8 bytes an id) up to this many rows; beyond, the general path bounds them.
_ID_SORT_ROWS = 50_000_000
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
# Value units are summed as DECIMAL(38,0): a bigint sum raises (ANSI) or wraps.
_EXACT = "decimal(38,0)"
_S_EXACT = "_dp_s_exact"
_TRUE_S_EXACT = "_dp_true_s_exact"
_AGGREGATES = ("n", "s", "clamped", "removed_per_cell", "removed_cells", "pairs_removed")
_TRUE = ("true_n", "true_s")


def _tag(index: int) -> str:
    return f"_{index}"


def _exact_sum(column):
    """The sum of an integer column as DECIMAL(38,0): exact, it never wraps or raises.

    The summed units are at most 2**31 in absolute value (`dp_pipeline.query.exact_sums`),
    so any sum of fewer than 2**63 rows is below 2**94 < 10**38, the type's range.
    """
    return sf.coalesce(sf.sum(column.cast(_EXACT)), sf.lit(0).cast(_EXACT))


def _clamped_sum(column):
    """An exact DECIMAL(38,0) cell total clamped into [-2**62, 2**62], as a long.

    The public pre-noise clamp of `dp_pipeline.query.exact_sums`, applied to the final
    totals only (clamping partials would not be exact); the cast cannot fail.
    """
    low, high = sf.lit(-SUM_LIMIT).cast(_EXACT), sf.lit(SUM_LIMIT).cast(_EXACT)
    return sf.least(sf.greatest(column, low), high).cast("long")


def check_schema(df, spec: QuerySpec) -> None:
    fields = {f.name: f.dataType for f in df.schema.fields}

    def need(name: str, role: str):
        if name not in fields:
            raise ValueError(
                f"{role} column {name!r} is not in the DataFrame; its columns are {df.columns}"
            )
        return fields[name]

    for domain in spec.cells.domains:
        kind = need(domain.column, "key")
        if domain.kind == "int" and not isinstance(kind, _INTEGRAL):
            raise TypeError(
                f"key column {domain.column!r} has Spark type {kind.simpleString()} but its "
                f"domain holds integers; it must have an integer type"
            )
        if domain.kind == "str" and not isinstance(kind, StringType):
            raise TypeError(
                f"key column {domain.column!r} has Spark type {kind.simpleString()} but its "
                f"domain holds strings; it must have a string type"
            )
    if spec.privacy_unit is not None:
        kind = need(spec.privacy_unit, "privacy_unit")
        if not isinstance(kind, (*_INTEGRAL, StringType)):
            raise TypeError(
                f"privacy_unit column {spec.privacy_unit!r} has Spark type "
                f"{kind.simpleString()}; it must hold integers or strings"
            )
    if spec.column is not None:
        kind = need(spec.column, "summed")
        if not isinstance(kind, NumericType):
            raise TypeError(
                f"summed column {spec.column!r} has Spark type {kind.simpleString()}; "
                f"it must be numeric"
            )


def _reason_codes(spec: QuerySpec) -> dict[int, tuple[str, str]]:
    """Negative cell codes of dropped rows -> (reason, column)."""
    codes = {}
    for i, column in enumerate(spec.cells.columns):
        codes[-(2 * i + 1)] = ("null_key", column)
        codes[-(2 * i + 2)] = ("out_of_domain", column)
    k = len(spec.cells.columns)
    codes[-(2 * k + 1)] = ("null_unit", spec.privacy_unit or "")
    codes[-(2 * k + 2)] = ("invalid_value", spec.column or "")
    return codes


def _list_position(df, domain, column, tag: str, index: int):
    """(df, position column) of an explicit-list domain: CASE for short lists, else a join."""
    cast = (lambda c: c.cast("long")) if domain.kind == "int" else (lambda c: c)
    values = (
        [int(v) for v in domain.values] if domain.kind == "int" else [str(v) for v in domain.values]
    )
    if len(values) <= _CASE_LIST_LIMIT:
        position = None
        for j, value in enumerate(values):
            condition = cast(column) == sf.lit(value)
            branch = sf.lit(j).cast("long")
            position = (
                sf.when(condition, branch) if position is None else position.when(condition, branch)
            )
        return df, position
    value_name, pos_name = f"_dp_domain{tag}_{index}_value", f"_dp_domain{tag}_{index}_pos"
    kind = "long" if domain.kind == "int" else "string"
    lookup = df.sparkSession.createDataFrame(
        [(v, j) for j, v in enumerate(values)], f"{value_name} {kind}, {pos_name} long"
    )
    df = df.join(sf.broadcast(lookup), cast(column) == sf.col(value_name), "left").drop(value_name)
    return df, sf.col(pos_name)


def invalid_number(column: str):
    """(``column`` as double, a condition: null, NaN or infinite): rows no aggregate takes."""
    value = sf.col(column).cast("double")
    infinite = (value == sf.lit(float("inf"))) | (value == sf.lit(float("-inf")))
    return value, value.isNull() | sf.isnan(value) | infinite


def quantile_position(column: str, bounds, granularity):
    """Spark column: the grid position of ``column`` (null where null, NaN or infinite).

    The same IEEE operations as `dp_pipeline.query.quantile_grid.quantile_positions`, so both
    engines bin every value identically.
    """

    value, invalid = invalid_number(column)
    low, high = (float(b) for b in bounds)
    last = quantile_candidate_count(bounds, granularity) - 1
    clamped = sf.least(sf.greatest(value, sf.lit(low)), sf.lit(high))
    raw = sf.floor((clamped - sf.lit(low)) / sf.lit(float(granularity)))
    position = sf.least(sf.greatest(raw, sf.lit(0).cast("long")), sf.lit(last).cast("long"))
    return sf.when(~invalid, position)


def _with_derived(df, derived):
    """``df`` with the ``derived`` grid-position columns (``{name: GridPosition}``) added."""
    for name, grid in (derived or {}).items():
        df = df.withColumn(name, quantile_position(grid.column, grid.bounds, grid.granularity))
    return df


def coded_rows(df, spec: QuerySpec, tag: str = "", *, null_units: bool = True):
    """df plus the cell column ``_cell<tag>``: the cell index, or a negative reason code.

    Sums also get ``_dp_value_units<tag>`` (clamped value in granularity units)
    and ``_dp_clamped<tag>`` (1 if clamping changed it). ``tag`` keeps the
    columns of several queries over one DataFrame apart. ``null_units=False``
    (the caller has checked that the privacy unit is never null) leaves out the
    null-unit test, so the coding does not read the unit column.
    """
    cell = sf.lit(0).cast("long")
    code = None
    k = len(spec.cells.columns)
    for i, (domain, stride) in enumerate(zip(spec.cells.domains, spec.cells.strides, strict=True)):
        column = sf.col(domain.column)
        if domain.is_range:
            pos = sf.when(
                (column >= sf.lit(domain.start)) & (column < sf.lit(domain.stop)),
                column.cast("long") - sf.lit(domain.start).cast("long"),
            )
        else:
            df, pos = _list_position(df, domain, column, tag, i)
        cell = cell + pos * sf.lit(stride).cast("long")
        null_branch = (column.isNull(), sf.lit(-(2 * i + 1)).cast("long"))
        ood_branch = (pos.isNull(), sf.lit(-(2 * i + 2)).cast("long"))
        for condition, value in (null_branch, ood_branch):
            code = sf.when(condition, value) if code is None else code.when(condition, value)
    if spec.privacy_unit is not None and null_units:
        code = code.when(sf.col(spec.privacy_unit).isNull(), sf.lit(-(2 * k + 1)).cast("long"))
    if spec.column is not None:
        value, invalid = invalid_number(spec.column)
        code = code.when(invalid, sf.lit(-(2 * k + 2)).cast("long"))
        bounds = spec.value_bounds
        # The same IEEE operations as dp_pipeline.engines.pandas.aggregate._value_units.
        raw = sf.rint(
            value * sf.lit(float(bounds.scale_denominator)) / sf.lit(float(bounds.scale_numerator))
        )
        lower, upper = float(bounds.lower_units), float(bounds.upper_units)
        df = df.withColumn(
            _UNITS + tag,
            sf.when(
                ~invalid, sf.least(sf.greatest(raw, sf.lit(lower)), sf.lit(upper)).cast("long")
            ),
        ).withColumn(
            _CLAMPED + tag,
            sf.when(~invalid & ((raw < sf.lit(lower)) | (raw > sf.lit(upper))), 1).otherwise(0),
        )
    return df.withColumn(CELL_COLUMN + tag, code.otherwise(cell))


def _unit_key(salt: BoundingSalt):
    """The 60-bit keyed unit key of `dp_pipeline.engines.bounding.unit_keys`, in Spark SQL."""
    digest = sf.sha2(sf.concat(sf.lit(salt.unit_salt + "|"), sf.col(_UNIT).cast("string")), 256)
    return sf.conv(sf.substring(digest, 1, 15), 16, 10).cast("long")


def _bounded_pairs(coded, spec: QuerySpec):
    """The general bounding rule in Spark SQL: per-cell aggregates of ``coded`` (one table).

    Only the rows of units with several rows come here (there is a privacy unit).
    ``coded`` has the untagged columns of `coded_rows`. Output: ``_cell``, ``n``,
    ``s`` (the exact DECIMAL(38,0) sum, pair partials exact too), ``clamped``,
    ``removed_per_cell``, ``removed_cells``, ``pairs_removed``; negative
    ``_cell`` rows count dropped rows by reason.
    """

    if spec.privacy_unit is None:
        raise InternalError("the general bounding rule needs a privacy unit")
    is_sum = spec.column is not None
    valid = sf.col(CELL_COLUMN) >= 0
    zero = sf.lit(0).cast("long")
    salt = BoundingSalt.derive(spec.master_key(), spec.release_id, spec.table)
    rows = coded.withColumn(_UNIT, sf.col(spec.privacy_unit))
    m = spec.max_per_cell
    if is_sum:
        rows = rows.withColumn("_dp_unit_key", _unit_key(salt))
        row_rank = sf.xxhash64(
            sf.lit(salt.seed_rows).cast("long"),
            sf.col("_dp_unit_key"),
            sf.col(CELL_COLUMN),
            sf.col(_UNITS),
        )
        window = Window.partitionBy(_UNIT, CELL_COLUMN).orderBy(row_rank, sf.col(_UNITS))
        rows = rows.withColumn("_dp_row_rank", sf.row_number().over(window))
        kept = sf.col("_dp_row_rank") <= m
        pairs = rows.groupBy(_UNIT, CELL_COLUMN).agg(
            sf.count(sf.lit(1)).alias("n_all"),
            sf.sum(sf.when(kept, 1).otherwise(0)).cast("long").alias("n_kept"),
            _exact_sum(sf.when(kept, sf.col(_UNITS)).otherwise(zero)).alias("s_kept"),
            sf.sum(_CLAMPED).alias("clamped"),
        )
    else:
        pairs = rows.groupBy(_UNIT, CELL_COLUMN).agg(sf.count(sf.lit(1)).alias("n_all"))
        pairs = pairs.withColumn("n_kept", sf.least(sf.col("n_all"), sf.lit(m).cast("long")))
        pairs = pairs.withColumn("s_kept", zero.cast(_EXACT)).withColumn("clamped", zero)
    cell_rank = sf.xxhash64(
        sf.lit(salt.seed_cells).cast("long"), _unit_key(salt), sf.col(CELL_COLUMN)
    )
    window = Window.partitionBy(sf.col(_UNIT), valid).orderBy(cell_rank, sf.col(CELL_COLUMN))
    pairs = pairs.withColumn("_dp_cell_rank", sf.row_number().over(window))
    keep = valid & (sf.col("_dp_cell_rank") <= spec.max_cells)
    dropped = valid & ~keep
    return pairs.groupBy(CELL_COLUMN).agg(
        sf.sum(sf.when(~valid, sf.col("n_all")).when(keep, sf.col("n_kept")).otherwise(zero)).alias(
            "n"
        ),
        _exact_sum(sf.when(keep, sf.col("s_kept"))).alias("s"),
        sf.sum("clamped").alias("clamped"),
        sf.sum(sf.when(keep, sf.col("n_all") - sf.col("n_kept")).otherwise(zero)).alias(
            "removed_per_cell"
        ),
        sf.sum(sf.when(dropped, sf.col("n_all")).otherwise(zero)).alias("removed_cells"),
        sf.sum(sf.when(dropped, 1).otherwise(0)).cast("long").alias("pairs_removed"),
    )


_DIAGNOSTIC_SUMS = ("n", "clamped", "removed_per_cell", "removed_cells", "pairs_removed")


def _code_summary(aggregates) -> list[dict]:
    """Per (table, reason code or 0 for kept cells, deferred): the diagnostic totals."""
    group = sf.when(sf.col(CELL_COLUMN) < 0, sf.col(CELL_COLUMN)).otherwise(sf.lit(0).cast("long"))
    rows = (
        aggregates.groupBy(TABLE_COLUMN, group.alias("code"), _DEFERRED)
        .agg(*[sf.sum(sf.col(name)).alias(name) for name in _DIAGNOSTIC_SUMS])
        .collect()
    )
    return [row.asDict() for row in rows]


def _diagnostics(summary: list[dict], specs, coded) -> list[Diagnostics]:
    """Every query's `Diagnostics` from `_code_summary` rows without deferred rows."""
    by_table: dict[int, dict[int, dict]] = {index: {} for index in range(len(specs))}
    for row in summary:
        if row[_DEFERRED]:
            raise InternalError("diagnostics asked for before every unit was bounded")
        by_table[int(row[TABLE_COLUMN])][int(row["code"])] = row
    out = []
    for index, spec in enumerate(specs):
        diagnostics = _table_diagnostics(by_table[index], spec)
        if spec.on_invalid == "error":
            _raise_on_invalid(diagnostics, spec)
        out.append(diagnostics)
    return out


def _table_diagnostics(by_code: dict[int, dict], spec: QuerySpec) -> Diagnostics:
    codes = _reason_codes(spec)
    null_key = {c: 0 for c in spec.cells.columns}
    out_of_domain = {c: 0 for c in spec.cells.columns}
    other = {"null_unit": 0, "invalid_value": 0}
    for code, row in by_code.items():
        if code == 0:
            continue
        reason, column = codes[code]
        if reason == "null_key":
            null_key[column] = int(row["n"])
        elif reason == "out_of_domain":
            out_of_domain[column] = int(row["n"])
        else:
            other[reason] = int(row["n"])
    valid = by_code.get(0)
    used = int(valid["n"]) if valid else 0
    removed_per_cell = int(valid["removed_per_cell"]) if valid else 0
    removed_cells = int(valid["removed_cells"]) if valid else 0
    return Diagnostics(
        rows_in=sum(int(r["n"]) for r in by_code.values()) + removed_per_cell + removed_cells,
        rows_null_key=null_key,
        rows_out_of_domain=out_of_domain,
        rows_null_unit=other["null_unit"],
        rows_invalid_value=other["invalid_value"],
        rows_clamped=int(valid["clamped"]) if valid else 0,
        rows_removed_max_per_cell=removed_per_cell,
        rows_removed_max_cells=removed_cells,
        unit_cells_removed_max_cells=int(valid["pairs_removed"]) if valid else 0,
        rows_used=used,
    )


def _raise_on_invalid(diagnostics: Diagnostics, spec: QuerySpec) -> None:
    for domain in spec.cells.domains:
        column = domain.column
        if diagnostics.rows_null_key[column]:
            raise invalid_rows_error(column, "have a null key")
        if diagnostics.rows_out_of_domain[column]:
            raise invalid_rows_error(column, f"have a key outside the declared domain {domain!r}")
    if diagnostics.rows_null_unit:
        raise invalid_rows_error(spec.privacy_unit, "have a null privacy unit")
    if diagnostics.rows_invalid_value:
        raise invalid_rows_error(spec.column, "hold null, NaN or infinite values")


@dataclass(frozen=True)
class _UnitCheck:
    """What the first job learned about the privacy unit column."""

    has_nulls: bool  # some rows have a null unit (dropped with a reason code)
    deferral: str  # "none", "lookup" (broadcast `lookup`) or "window" (all rows)
    lookup: object = None  # small DataFrame of the units with several rows


_RUN_SCHEMA = "first long, last long, increasing boolean, nulls long"


def _increasing_run(batches):
    """mapInArrow: is this partition's unit column strictly increasing (nulls skipped)?

    Yields one row: first and last non-null id (null if none), whether the ids
    increase strictly in row order, and the number of null ids. After the first
    id out of order it only counts nulls.
    """
    import pyarrow as pa

    run = IncreasingRun()
    for batch in batches:
        run.update(batch.column(0))
    yield pa.RecordBatch.from_pydict(
        {
            "first": [run.first],
            "last": [run.last],
            "increasing": [run.increasing],
            "nulls": [run.nulls],
        },
        schema=pa.schema(
            [
                ("first", pa.int64()),
                ("last", pa.int64()),
                ("increasing", pa.bool_()),
                ("nulls", pa.int64()),
            ]
        ),
    )


def _sorted_and_unique(df, unit: str) -> tuple[bool, bool]:
    """(every non-null integer unit provably occurs once, some unit is null), no shuffle.

    Proof of uniqueness without a shuffle when the input is sorted by the unit
    (as person files usually are): the ids increase strictly within every Spark
    partition and the partitions' [first, last] ranges are disjoint. Returns
    (False, _) when that does not hold; the caller then checks with a window.
    """
    runs = df.select(sf.col(unit).cast("long")).mapInArrow(_increasing_run, _RUN_SCHEMA).collect()
    return _runs_prove_unique([(r["first"], r["last"], r["increasing"], r["nulls"]) for r in runs])


def _runs_prove_unique(runs) -> tuple[bool, bool]:
    """(the runs prove every non-null unit occurs once, some unit is null).

    ``runs``: one (first, last, increasing, nulls) per Spark task.
    """
    has_nulls = any(nulls for _, _, _, nulls in runs)
    if not all(increasing for _, _, increasing, _ in runs):
        return False, has_nulls
    ranges = sorted((first, last) for first, last, _, _ in runs if first is not None)
    disjoint = all(previous[1] < current[0] for previous, current in itertools.pairwise(ranges))
    return disjoint, has_nulls


def _check_units(df, unit: str) -> _UnitCheck:
    """One job over the unit column alone: null units, and units with several rows.

    Integer units sorted in the input are proven unique without a shuffle
    (`_sorted_and_unique`). Otherwise a window over the unit is the one shuffle
    that bounding needs (the ids only, a few bytes a row). No unit with several
    rows: no row is deferred and the tables need no shuffle by unit. Up to
    `_BROADCAST_UNITS` of them: a broadcast lookup marks their rows. More: the
    rows themselves are windowed by unit.
    """
    if isinstance(df.schema[unit].dataType, _INTEGRAL):
        unique, has_nulls = _sorted_and_unique(df, unit)
        if unique:
            return _UnitCheck(has_nulls, "none")
    rows_of_unit = sf.count(sf.lit(1)).over(Window.partitionBy(sf.col(_UNIT)))
    found = (
        df.select(sf.col(unit).alias(_UNIT))
        .withColumn(_UNIT_ROWS, rows_of_unit)
        .filter((sf.col(_UNIT_ROWS) > 1) | sf.col(_UNIT).isNull())
        .select(_UNIT)
        .distinct()
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        multi = found.filter(sf.col(_UNIT).isNotNull())
        count = multi.count()
        has_nulls = found.filter(sf.col(_UNIT).isNull()).limit(1).count() > 0
        if count == 0:
            return _UnitCheck(has_nulls, "none")
        if count > _BROADCAST_UNITS:
            return _UnitCheck(has_nulls, "window")
        # Materialize the small lookup on the driver so later plans do not rerun this job.
        lookup = df.sparkSession.createDataFrame(multi.toArrow().to_pandas())
        return _UnitCheck(has_nulls, "lookup", lookup.withColumn(_DEFERRED, sf.lit(True)))
    finally:
        found.unpersist()


def _mark_deferred(coded, unit: str, check: _UnitCheck):
    """``coded`` plus ``_dp_deferred``: does this row's (non-null) unit have several rows?"""
    if check.deferral == "none":
        return coded.withColumn(_DEFERRED, sf.lit(False))
    if check.deferral == "window":
        unit_rows = sf.count(sf.lit(1)).over(Window.partitionBy(sf.col(unit)))
        return coded.withColumn(_DEFERRED, sf.col(unit).isNotNull() & (unit_rows > 1))
    lookup = sf.broadcast(check.lookup)
    joined = coded.join(lookup, sf.col(unit) == sf.col(_UNIT), "left").drop(_UNIT)
    return joined.withColumn(_DEFERRED, sf.coalesce(sf.col(_DEFERRED), sf.lit(False)))


def _stable_input(df, specs: Sequence[QuerySpec]):
    """``df``, or its needed columns evaluated once when re-running it may change the rows.

    The unit check and the aggregation read ``df`` in separate jobs, and the
    aggregation trusts the check (a unit found with one row is not bounded). A
    plan Spark marks non-deterministic (``rand()``, a non-deterministic UDF)
    could give other rows the second time, so it is evaluated once into a local
    checkpoint (lineage cut: a lost block fails the job instead of recomputing
    different rows). File scans are deterministic; `run_release` also checks
    that the input's bytes did not change during the run.
    """
    try:
        deterministic = bool(df._jdf.queryExecution().analyzed().deterministic())
    except Exception:  # an API change must fail safe: evaluate once
        deterministic = False
    if deterministic:
        return df
    needed = []
    for spec in specs:
        for name in (*spec.cells.columns, spec.privacy_unit, spec.column):
            if name is not None and name not in needed:
                needed.append(name)
    return df.select(*needed).localCheckpoint(eager=True)


def _parquet_pieces(df, specs: Sequence[QuerySpec], unit: str | None, derived: dict | None = None):
    """(path, row group) of every row group ``df`` reads, or None if it is not a bare local scan.

    Only ``spark.read.parquet(...)`` of local (``file:``) files without
    partition columns qualifies (no projection or filter: every row of every
    file is an input row), and only when pyarrow reads every column the
    queries use with the type Spark gives it: integer keys and units, string
    keys, integer or floating-point summed columns.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if sum(spec.cells.total for spec in specs) > _ONE_PASS_CELLS:
        return None
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
        for domain in spec.cells.domains:
            if domain.column in derived:
                continue
            checks[domain.column] = (
                pa.types.is_integer
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


def _parquet_pass(
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
    (`_ids_are_unique`, one job reading the unit column) and then aggregating.
    Otherwise (some unit has several rows), or if the input is not a bare
    local Parquet scan (`_parquet_pieces`) or a task fails, this returns None
    and the caller takes the general path.
    ``source`` is the input as given (the scan); ``df`` is it with the
    ``derived`` columns, for the lazy error examples of the diagnostics.
    """
    from py4j.protocol import Py4JJavaError

    pieces = _parquet_pieces(source, specs, unit, derived)
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
        if unit is not None and not (result["complete"] and _runs_prove_unique(result["runs"])[0]):
            # Ids not in order (or row groups overlapping): prove uniqueness exactly by
            # sorting every id, then aggregate without the order requirement.
            if not _ids_are_unique(context, pieces, slices, unit):
                return None
            if not result["complete"]:
                result = aggregate(require_increasing=False)
    except Py4JJavaError:  # e.g. a file that executors cannot open: Spark reads it
        return None
    if not result["complete"]:
        return None
    tables = result["tables"]

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
                    _DEFERRED: False,
                    "n": n,
                    "clamped": clamped,
                    "removed_per_cell": 0,
                    "removed_cells": 0,
                    "pairs_removed": 0,
                }
            )
    coded = df  # lazy: only an on_invalid="error" message reads it, for its example
    for index, spec in enumerate(specs):
        coded = coded_rows(coded, spec, _tag(index))
    diagnostics = _diagnostics(summary, specs, coded)
    table = _aggregates_table(tables)
    if collect:
        return table, diagnostics
    frame = df.sparkSession.createDataFrame(table).persist(StorageLevel.MEMORY_AND_DISK)
    return frame, diagnostics


def _ids_are_unique(context, pieces, slices: int, unit: str) -> bool:
    """Exactly: no non-null unit id occurs twice (all ids sorted on the driver).

    Declines (False) above `_ID_SORT_ROWS` rows, where the general path's shuffle
    by unit is the better way to find the units with several rows.
    """
    import numpy as np
    import pyarrow.parquet as pq

    rows = 0
    for path, group in pieces:
        rows += pq.ParquetFile(path).metadata.row_group(group).num_rows
    if rows > _ID_SORT_ROWS:
        return False
    parts = context.parallelize(pieces, slices).mapPartitions(parquet_ids_function(unit))
    ids = np.sort(np.concatenate(parts.collect()))
    return bool(np.all(ids[1:] > ids[:-1]))


def _aggregates_table(tables):
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
            _DEFERRED: pa.array(np.zeros(size, dtype=bool)),
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


def aggregate_queries(
    df, specs: Sequence[QuerySpec], *, collect: bool = False, derived: dict | None = None
):
    """Bounded true aggregates of every query in ``specs`` over ``df``, in one pass.

    Returns (aggregates, diagnostics): ``aggregates`` is a persisted DataFrame
    with ``_dp_table`` (index into ``specs``), ``_cell`` (cell index, or a
    negative reason code), ``n`` (rows kept), ``s`` (sum of kept value units,
    exact and then clamped into ``[-2**62, 2**62]``, `dp_pipeline.query.exact_sums`),
    ``clamped`` and the bounding counters, plus ``true_n`` / ``true_s``: the
    same cell's aggregates before contribution bounding (for accuracy reports
    on synthetic data; never released). Only non-empty cells appear. The
    diagnostics (one per query) are computed eagerly, so bad data raises here
    with ``on_invalid="error"``, before any noise.

    A bare scan of local Parquet files is aggregated by `_parquet_pass` when
    it can prove every unit has one row (sorted integer ids, or no unit);
    anything else by Spark SQL jobs. Both give the same rows and diagnostics.
    With ``collect`` (a release, which collects every cell anyway), the
    Parquet path returns its rows as a ``pyarrow.Table`` already on the
    driver instead of a DataFrame; the other path still returns a DataFrame.

    ``derived``: ``{column name: dp_pipeline.query.quantile_grid.GridPosition}``, integer key
    columns computed from the input (a quantile's grid positions) by both paths, so
    a bare Parquet scan keeps the one-pass path.

    All queries must share the privacy unit column (or all have none).
    """
    if not specs:
        raise ValueError("aggregate_queries needs at least one query")
    units = {spec.privacy_unit for spec in specs}
    if len(units) != 1:
        raise ValueError(
            f"queries aggregated in one pass must share the privacy unit column; got "
            f"{sorted(str(u) for u in units)}"
        )
    (unit,) = units
    source = df
    df = _with_derived(df, derived)
    for spec in specs:
        check_schema(df, spec)
    if unit is not None:
        df = _stable_input(df, specs)
    result = _parquet_pass(source, df, specs, unit, collect, derived or {})
    if result is not None:
        return result
    check = None if unit is None else _check_units(df, unit)
    coded = df
    for index, spec in enumerate(specs):
        # Without null units the scans need not read the unit column at all.
        coded = coded_rows(
            coded, spec, _tag(index), null_units=check is not None and check.has_nulls
        )
    zero = sf.lit(0).cast("long")

    def per_table(index: int, spec: QuerySpec) -> list:
        tag = _tag(index)
        is_sum = spec.column is not None
        return [
            sf.lit(index).alias(TABLE_COLUMN),
            sf.col(CELL_COLUMN + tag).alias(CELL_COLUMN),
            # A count's rows sum nothing: null skips the DECIMAL(38,0) addition (~25% of it).
            (sf.col(_UNITS + tag) if is_sum else sf.lit(None).cast("long")).alias(_UNITS),
            (sf.col(_CLAMPED + tag) if is_sum else sf.lit(0)).alias(_CLAMPED),
        ]

    windowed = check is not None and check.deferral == "window"
    if check is None:
        coded = coded.withColumn(_DEFERRED, sf.lit(False))
    else:
        # Units with one row are within every bound; the rows of the others are
        # marked "deferred" and bounded by the general rule below.
        coded = _mark_deferred(coded, unit, check)
    if windowed:
        # One generator row per table, so the window over all rows is evaluated once.
        tables = sf.array(*[sf.struct(*per_table(i, spec)) for i, spec in enumerate(specs)])
        rows = coded.select(_DEFERRED, sf.inline(tables))
    else:
        # One projection per table: ~15% faster than the generator (bench_release).
        rows = None
        for index, spec in enumerate(specs):
            part = coded.select(_DEFERRED, *per_table(index, spec))
            rows = part if rows is None else rows.unionByName(part)
    valid = sf.col(CELL_COLUMN) >= 0
    counters = ("removed_per_cell", "removed_cells", "pairs_removed")
    first = (
        rows.groupBy(TABLE_COLUMN, CELL_COLUMN, _DEFERRED)
        .agg(
            sf.count(sf.lit(1)).alias("n"),
            _exact_sum(sf.col(_UNITS)).alias(_S_EXACT),
            sf.coalesce(sf.sum(_CLAMPED).cast("long"), zero).alias("clamped"),
        )
        .select(
            TABLE_COLUMN,
            CELL_COLUMN,
            _DEFERRED,
            "n",
            _clamped_sum(sf.col(_S_EXACT)).alias("s"),
            "clamped",
            *[zero.alias(name) for name in counters],
            sf.when(valid, sf.col("n")).otherwise(zero).alias("true_n"),
            sf.when(valid, _clamped_sum(sf.col(_S_EXACT))).otherwise(zero).alias("true_s"),
            _S_EXACT,  # the exact total, for the re-aggregation of deferred units below
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    # One small job: the reason-code totals of every table, and whether any row is deferred.
    summary = _code_summary(first)
    if not any(row[_DEFERRED] for row in summary):
        try:
            diagnostics = _diagnostics(summary, specs, coded)
        except BaseException:
            first.unpersist()
            raise
        return first, diagnostics

    # Rows of units with several rows: the general rule, table by table.
    columns = [sf.col(unit)]
    for index, spec in enumerate(specs):
        columns.append(sf.col(CELL_COLUMN + _tag(index)))
        if spec.column is not None:
            columns += [sf.col(_UNITS + _tag(index)), sf.col(_CLAMPED + _tag(index))]
    multi = coded.filter(sf.col(_DEFERRED)).select(*columns).persist(StorageLevel.MEMORY_AND_DISK)
    # The union carries exact DECIMAL(38,0) sums; the final totals are clamped once.
    exact_zero = zero.cast(_EXACT)
    direct = first.filter(~sf.col(_DEFERRED)).select(
        TABLE_COLUMN,
        CELL_COLUMN,
        *[sf.col(_S_EXACT if name == "s" else name) for name in _AGGREGATES],
        "true_n",
        sf.when(valid, sf.col(_S_EXACT)).otherwise(exact_zero).alias(_TRUE_S_EXACT),
    )
    unbounded = first.filter(sf.col(_DEFERRED) & valid).select(
        TABLE_COLUMN,
        CELL_COLUMN,
        *[
            (exact_zero.alias(_S_EXACT) if name == "s" else zero.alias(name))
            for name in _AGGREGATES
        ],
        "true_n",
        sf.col(_S_EXACT).alias(_TRUE_S_EXACT),
    )
    combined = direct.unionByName(unbounded)
    for index, spec in enumerate(specs):
        tag = _tag(index)
        sums = (
            [sf.col(_UNITS + tag).alias(_UNITS), sf.col(_CLAMPED + tag).alias(_CLAMPED)]
            if spec.column is not None
            else []
        )
        view = multi.select(sf.col(unit), sf.col(CELL_COLUMN + tag).alias(CELL_COLUMN), *sums)
        bounded = _bounded_pairs(view, spec).select(
            sf.lit(index).alias(TABLE_COLUMN),
            CELL_COLUMN,
            *[sf.col(name).alias(_S_EXACT if name == "s" else name) for name in _AGGREGATES],
            zero.alias("true_n"),
            exact_zero.alias(_TRUE_S_EXACT),
        )
        combined = combined.unionByName(bounded)
    totals = {"s": _clamped_sum(sf.sum(_S_EXACT)), "true_s": _clamped_sum(sf.sum(_TRUE_S_EXACT))}
    aggregates = (
        combined.groupBy(TABLE_COLUMN, CELL_COLUMN)
        .agg(
            *[
                totals.get(name, sf.sum(name).cast("long")).alias(name)
                for name in (*_AGGREGATES, "true_n", "true_s")
            ]
        )
        .withColumn(_DEFERRED, sf.lit(False))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        diagnostics = _diagnostics(_code_summary(aggregates), specs, coded)
    except BaseException:
        aggregates.unpersist()
        raise
    finally:
        first.unpersist()
        multi.unpersist()
    return aggregates, diagnostics
