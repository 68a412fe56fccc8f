"""Contribution bounding and true aggregates in Spark SQL, for one query or many at once.

`aggregate_queries` computes the bounded per-cell aggregates of several
queries over one DataFrame (the tables of a release) together:

1. A first job finds the privacy units with more than one row, from the unit
   column alone (`dp_pipeline.engines.spark.units`: one aggregate for ids
   numbered in row order, else a pass over sorted ids, else a window over the
   unit, the one shuffle bounding needs).
2. One job codes every row with each query's cell index (integer arithmetic
   on the key columns, a CASE or broadcast lookup for explicit lists) and
   aggregates each table by cell (`dp_pipeline.engines.spark_sql.cell_aggregates`).
   A unit with a single row satisfies every ``max_cells >= 1`` and
   ``max_per_cell >= 1``, so its row goes straight into every table: the keyed
   rule of `dp_pipeline.engines.bounding` would keep it anyway. When no unit has
   several rows this job's result is final (a release collects it at once).
3. Only if some units have several rows, their rows take the general rule
   (`bounded_pairs`: per-table window functions ranked by keyed hashes).

The result equals the general rule applied to every row, so both engines
still release bit-identical tables. Without a privacy unit every row is its
own unit and step 1 and 3 do not run. No Python runs per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import functions as sf

from dp_pipeline.engines.spark.arrow_pass import arrow_pass
from dp_pipeline.engines.spark.parquet_plan import parquet_pass
from dp_pipeline.engines.spark.units import check_units, mark_deferred
from dp_pipeline.engines.spark_sql.bounding import ROW_CELL_COLUMN, bounded_pairs
from dp_pipeline.engines.spark_sql.cell_aggregates import (
    COLLECTED_COLUMNS,
    COUNTERS,
    first_aggregates,
)
from dp_pipeline.engines.spark_sql.coding import (
    AGGREGATE_COLUMNS,
    CLAMPED_COLUMN,
    DEFERRED_COLUMN,
    LIMB_ROWS,
    S_HIGH_COLUMN,
    S_LOW_COLUMN,
    TRUE_S_HIGH_COLUMN,
    TRUE_S_LOW_COLUMN,
    VALUE_UNITS_COLUMN,
    SumRule,
    check_schema,
    clamped_sum,
    coded_rows,
    table_tag,
    with_derived,
)
from dp_pipeline.engines.spark_sql.diagnostics import (
    code_summary,
    collected_code_summary,
    query_diagnostics,
)
from dp_pipeline.errors import DPValueError
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN

__all__ = ["TABLE_COLUMN", "aggregate_queries"]


def stable_input(df, specs: Sequence[QuerySpec]):
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
    except Exception:  # Spark Connect (no JVM here) or an API change: fail safe, evaluate once
        deterministic = False
    if deterministic:
        return df
    needed = []
    for spec in specs:
        hierarchy = spec.hierarchy.columns if spec.hierarchy is not None else ()
        for name in (*spec.cells.columns, *hierarchy, spec.privacy_unit, spec.column):
            if name is not None and name not in needed:
                needed.append(name)
    return df.select(*needed).localCheckpoint(eager=True)


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

    A bare scan of local Parquet files (classic sessions) is aggregated by
    `parquet_pass` when it can prove every unit has one row (sorted integer ids,
    or no unit); any other DataFrame whose columns the numpy rules read by
    `arrow_pass` (one ``mapInArrow``) when its ids are sorted; anything else by
    Spark SQL jobs. All give the same rows and diagnostics. With ``collect`` (a
    release, which collects every cell anyway), the two one-pass paths return
    their rows as a ``pyarrow.Table`` already on the driver instead of a
    DataFrame; the Spark SQL path still returns a DataFrame.

    ``derived``: ``{column name: dp_pipeline.query.quantile_grid.GridPosition}``, integer key
    columns computed from the input (a quantile's grid positions) by both paths, so
    a bare Parquet scan keeps the one-pass path.

    All queries must share the privacy unit column (or all have none).
    """
    if not specs:
        raise DPValueError("aggregate_queries needs at least one query")
    units = {spec.privacy_unit for spec in specs}
    if len(units) != 1:
        raise DPValueError(
            f"queries aggregated in one pass must share the privacy unit column; got "
            f"{sorted(str(u) for u in units)}"
        )
    (unit,) = units
    source = df
    df = with_derived(df, derived)
    for spec in specs:
        check_schema(df, spec)
    result = parquet_pass(source, df, specs, unit, collect, derived or {})
    if result is None:
        result = arrow_pass(source, df, specs, unit, collect, derived or {})
    if result is not None:
        return result
    if unit is not None:
        df = stable_input(df, specs)
    check = None if unit is None else check_units(df, unit)
    coded = df
    for index, spec in enumerate(specs):
        # Without null units the scans need not read the unit column at all.
        coded = coded_rows(
            coded, spec, table_tag(index), null_units=check is not None and check.has_nulls
        )
    zero = sf.lit(0).cast("long")
    windowed = check is not None and check.deferral == "window"
    if check is None:
        coded = coded.withColumn(DEFERRED_COLUMN, sf.lit(False))
    else:
        # Units with one row are within every bound; the rows of the others are
        # marked "deferred" and bounded by the general rule below.
        coded = mark_deferred(coded, unit, check)
    # Sums as two long limbs; if some cell could hold more rows than they sum exactly
    # (the input has more than LIMB_ROWS rows), again as DECIMAL(38,0): same results.
    rule = SumRule.limbs()
    if collect and (check is None or check.deferral == "none"):
        # No unit has several rows: these aggregates are final, collected in one job.
        table, summary = collected_aggregates(coded, specs, rule)
        if input_rows(summary) > LIMB_ROWS:
            table, summary = collected_aggregates(coded, specs, SumRule.decimal())
        return table, query_diagnostics(summary, specs, coded)
    # A window over all rows is evaluated once: one generator row per table.
    first = first_aggregates(coded, specs, rule, one_generator=windowed).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    # One small job: the reason-code totals of every table, and whether any row is deferred.
    summary = code_summary(first)
    if input_rows(summary) > LIMB_ROWS:
        first.unpersist()
        rule = SumRule.decimal()
        first = first_aggregates(coded, specs, rule, one_generator=windowed).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        summary = code_summary(first)
    valid = sf.col(CELL_COLUMN) >= 0
    if not any(row[DEFERRED_COLUMN] for row in summary):
        try:
            diagnostics = query_diagnostics(summary, specs, coded)
        except BaseException:
            first.unpersist()
            raise
        return first, diagnostics

    # Rows of units with several rows: the general rule, table by table. Tables that
    # share rows rank them by their cell over the union of the group's keys.
    groups = {}
    for spec in specs:
        if spec.shared_rows is not None and spec.shared_rows.group not in groups:
            tag = f"_shared{len(groups)}"
            groups[spec.shared_rows.group] = tag
            union = spec.counting_cells(spec.shared_rows.cells)
            coded = coded_rows(coded, union, tag, null_units=False)
    columns = [sf.col(unit), *[sf.col(CELL_COLUMN + tag) for tag in groups.values()]]
    for index, spec in enumerate(specs):
        columns.append(sf.col(CELL_COLUMN + table_tag(index)))
        if spec.column is not None:
            columns += [
                sf.col(VALUE_UNITS_COLUMN + table_tag(index)),
                sf.col(CLAMPED_COLUMN + table_tag(index)),
            ]
    multi = (
        coded.filter(sf.col(DEFERRED_COLUMN)).select(*columns).persist(StorageLevel.MEMORY_AND_DISK)
    )
    # The union carries exact limb sums; the final totals are combined and clamped once.
    zero_high, zero_low = rule.zeros()
    sum_columns = (S_HIGH_COLUMN, S_LOW_COLUMN)
    true_sum_columns = (TRUE_S_HIGH_COLUMN, TRUE_S_LOW_COLUMN)
    direct = first.filter(~sf.col(DEFERRED_COLUMN)).select(
        TABLE_COLUMN,
        CELL_COLUMN,
        *[name for name in AGGREGATE_COLUMNS if name != "s"],
        *sum_columns,
        "true_n",
        *[
            sf.when(valid, sf.col(name)).otherwise(empty).alias(true_name)
            for name, empty, true_name in zip(
                sum_columns, (zero_high, zero_low), true_sum_columns, strict=True
            )
        ],
    )
    unbounded = first.filter(sf.col(DEFERRED_COLUMN) & valid).select(
        TABLE_COLUMN,
        CELL_COLUMN,
        *[zero.alias(name) for name in AGGREGATE_COLUMNS if name != "s"],
        zero_high.alias(S_HIGH_COLUMN),
        zero_low.alias(S_LOW_COLUMN),
        "true_n",
        *[
            sf.col(name).alias(true)
            for name, true in zip(sum_columns, true_sum_columns, strict=True)
        ],
    )
    combined = direct.unionByName(unbounded)
    for index, spec in enumerate(specs):
        tag = table_tag(index)
        sums = (
            [
                sf.col(VALUE_UNITS_COLUMN + tag).alias(VALUE_UNITS_COLUMN),
                sf.col(CLAMPED_COLUMN + tag).alias(CLAMPED_COLUMN),
            ]
            if spec.column is not None
            else []
        )
        if spec.shared_rows is not None:
            row_cell = CELL_COLUMN + groups[spec.shared_rows.group]
            sums = [*sums, sf.col(row_cell).alias(ROW_CELL_COLUMN)]
        view = multi.select(sf.col(unit), sf.col(CELL_COLUMN + tag).alias(CELL_COLUMN), *sums)
        bounded = bounded_pairs(view, spec, rule).select(
            sf.lit(index).alias(TABLE_COLUMN),
            CELL_COLUMN,
            *[name for name in AGGREGATE_COLUMNS if name != "s"],
            *sum_columns,
            zero.alias("true_n"),
            zero_high.alias(TRUE_S_HIGH_COLUMN),
            zero_low.alias(TRUE_S_LOW_COLUMN),
        )
        combined = combined.unionByName(bounded)
    totals = {
        "s": clamped_sum(rule.exact(*rule.sums(*map(sf.col, sum_columns)))),
        "true_s": clamped_sum(rule.exact(*rule.sums(*map(sf.col, true_sum_columns)))),
    }
    aggregates = (
        combined.groupBy(TABLE_COLUMN, CELL_COLUMN)
        .agg(
            *[
                totals.get(name, sf.sum(name).cast("long")).alias(name)
                for name in (*AGGREGATE_COLUMNS, "true_n", "true_s")
            ]
        )
        .withColumn(DEFERRED_COLUMN, sf.lit(False))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        diagnostics = query_diagnostics(code_summary(aggregates), specs, coded)
    except BaseException:
        aggregates.unpersist()
        raise
    finally:
        first.unpersist()
        multi.unpersist()
    return aggregates, diagnostics


def collected_aggregates(coded, specs: Sequence[QuerySpec], rule: SumRule):
    """(`first_aggregates` of ``coded`` as an Arrow table on the driver, its `code_summary`).

    For inputs where no unit has several rows (nothing is deferred): one Spark job
    collects ``_dp_table``, ``_cell``, ``n``, ``s`` and ``clamped``; the columns that
    follow from them (``true_n`` / ``true_s``: ``n`` / ``s`` of cells, 0 for reason
    codes; the bounding counters: 0) and the reason-code totals are computed here.
    """
    collected = (
        first_aggregates(coded, specs, rule, one_generator=False)
        .select(*COLLECTED_COLUMNS)
        .toArrow()
    )
    cells = collected.column(CELL_COLUMN).to_numpy()
    valid = cells >= 0
    zeros = np.zeros(cells.size, dtype=np.int64)
    n = collected.column("n").to_numpy()
    s = collected.column("s").to_numpy()
    table = pa.table(
        {
            TABLE_COLUMN: collected.column(TABLE_COLUMN),
            CELL_COLUMN: cells,
            DEFERRED_COLUMN: pa.array(np.zeros(cells.size, dtype=bool)),
            "n": n,
            "s": s,
            "clamped": collected.column("clamped").to_numpy(),
            **{name: zeros for name in COUNTERS},
            "true_n": np.where(valid, n, 0),
            "true_s": np.where(valid, s, 0),
        }
    )
    return table, collected_code_summary(table)


def input_rows(summary: list[dict]) -> int:
    """The number of input rows, from `code_summary` rows: every table codes every row once.

    A bound on every cell's row count (the condition of the limb sums, `LIMB_ROWS`).
    """
    return max(
        (
            sum(int(row["n"] or 0) for row in summary if row[TABLE_COLUMN] == table)
            for table in {row[TABLE_COLUMN] for row in summary}
        ),
        default=0,
    )
