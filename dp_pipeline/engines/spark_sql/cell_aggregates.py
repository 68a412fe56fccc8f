"""Per-(table, cell) aggregates of coded rows in Spark SQL, before the general bounding rule.

The rows of every query's table (`coding.coded_rows`, one tagged cell column per
table) are aggregated by cell: one grouped aggregate per table (each computes
only its statistic's sums: a count table counts), or, when a window over all
rows marks the deferred units, one aggregate over a generator row per table so
the window is evaluated once. Both give the same rows: ``_dp_table``, ``_cell``
(cell index, or a negative reason code), ``_dp_deferred``, ``n``, ``s`` (exact
total clamped into ``[-2**62, 2**62]``), ``clamped``, the bounding counters (0),
``true_n`` / ``true_s`` (0 for reason codes), and the exact limb sums
``_dp_s_high`` / ``_dp_s_low`` of the `SumRule` for re-aggregating deferred units.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import functions as sf

from dp_pipeline.engines.spark_sql.coding import (
    CLAMPED_COLUMN,
    DEFERRED_COLUMN,
    S_HIGH_COLUMN,
    S_LOW_COLUMN,
    VALUE_UNITS_COLUMN,
    SumRule,
    clamped_sum,
    table_tag,
)
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import CELL_COLUMN, TABLE_COLUMN

COUNTERS = ("removed_per_cell", "removed_cells", "pairs_removed")
# Columns of a collected aggregation without deferred units (the rest follow from them).
COLLECTED_COLUMNS = (TABLE_COLUMN, CELL_COLUMN, "n", "s", "clamped")


def table_rows(index: int, spec: QuerySpec) -> list:
    """Columns of query ``index``'s row of a coded row: table, cell, value units, clamped."""
    tag = table_tag(index)
    is_sum = spec.column is not None
    return [
        sf.lit(index).alias(TABLE_COLUMN),
        sf.col(CELL_COLUMN + tag).alias(CELL_COLUMN),
        # A count's rows sum nothing: null skips the limb additions.
        (sf.col(VALUE_UNITS_COLUMN + tag) if is_sum else sf.lit(None).cast("long")).alias(
            VALUE_UNITS_COLUMN
        ),
        (sf.col(CLAMPED_COLUMN + tag) if is_sum else sf.lit(0)).alias(CLAMPED_COLUMN),
    ]


def _finished(grouped, table, rule: SumRule, *, is_sum: bool):
    """The aggregate columns of grouped ``n`` (and, for sums, limb sums and ``clamped``)."""
    zero = sf.lit(0).cast("long")
    valid = sf.col(CELL_COLUMN) >= 0
    if is_sum:
        total = clamped_sum(rule.exact(sf.col(S_HIGH_COLUMN), sf.col(S_LOW_COLUMN)))
        sums = [total.alias("s"), "clamped"]
        true_sum = sf.when(valid, total).otherwise(zero)
        limbs = [S_HIGH_COLUMN, S_LOW_COLUMN]
    else:
        zero_high, zero_low = rule.zeros()
        sums = [zero.alias("s"), zero.alias("clamped")]
        true_sum = zero
        limbs = [zero_high.alias(S_HIGH_COLUMN), zero_low.alias(S_LOW_COLUMN)]
    return grouped.select(
        table,
        CELL_COLUMN,
        DEFERRED_COLUMN,
        "n",
        *sums,
        *[zero.alias(name) for name in COUNTERS],
        sf.when(valid, sf.col("n")).otherwise(zero).alias("true_n"),
        true_sum.alias("true_s"),
        *limbs,
    )


def _sums(rule: SumRule, value_units, clamped) -> list:
    high, low = rule.sums(*rule.terms(value_units))
    zero = sf.lit(0).cast("long")
    return [
        high.alias(S_HIGH_COLUMN),
        low.alias(S_LOW_COLUMN),
        sf.coalesce(sf.sum(clamped).cast("long"), zero).alias("clamped"),
    ]


def table_aggregate(coded, index: int, spec: QuerySpec, rule: SumRule):
    """Query ``index``'s aggregates of ``coded`` (tagged columns, ``_dp_deferred``), by cell.

    A count table counts its rows and nothing else (the plain ``GROUP BY``
    count); a sum table adds the exact limb sums of its value units.
    """
    tag = table_tag(index)
    is_sum = spec.column is not None
    measures = [sf.count(sf.lit(1)).alias("n")]
    if is_sum:
        measures += _sums(rule, sf.col(VALUE_UNITS_COLUMN + tag), sf.col(CLAMPED_COLUMN + tag))
    grouped = coded.groupBy(sf.col(CELL_COLUMN + tag).alias(CELL_COLUMN), DEFERRED_COLUMN).agg(
        *measures
    )
    return _finished(grouped, sf.lit(index).alias(TABLE_COLUMN), rule, is_sum=is_sum)


def first_aggregates(coded, specs: Sequence[QuerySpec], rule: SumRule, *, one_generator: bool):
    """Every query's per-(table, cell, deferred) aggregates of ``coded``, as one DataFrame.

    ``one_generator``: one aggregate over a generator row per table (``coded``
    is then evaluated once, e.g. a window over all rows); otherwise one
    aggregate per table, each scanning only its own columns. Exact under the
    limb rule while no cell has more than `LIMB_ROWS` rows.
    """
    if one_generator:
        tables = sf.array(*[sf.struct(*table_rows(i, spec)) for i, spec in enumerate(specs)])
        rows = coded.select(DEFERRED_COLUMN, sf.inline(tables))
        grouped = rows.groupBy(TABLE_COLUMN, CELL_COLUMN, DEFERRED_COLUMN).agg(
            sf.count(sf.lit(1)).alias("n"),
            *_sums(rule, sf.col(VALUE_UNITS_COLUMN), sf.col(CLAMPED_COLUMN)),
        )
        return _finished(grouped, TABLE_COLUMN, rule, is_sum=True)
    out = None
    for index, spec in enumerate(specs):
        part = table_aggregate(coded, index, spec, rule)
        out = part if out is None else out.unionByName(part)
    return out
