"""Contribution bounding in Spark SQL: at most ``max_cells`` cells and ``max_per_cell`` rows.

Window functions ranked by the keyed hashes of `dp_pipeline.engines.bounding`
(the same Spark xxhash64 the numpy rule reimplements), so both engines keep
the same rows of every privacy unit. Tables that share rows (post-processing
combines them) rank each row by its cell over the union of their keys
(``ROW_CELL_COLUMN``), with the group's salt, as the numpy rule does. A selection
that scores each kept row's own value keeps the rows themselves (`kept_rows`).
"""

from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as sf

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.engines.spark_sql.coding import (
    CLAMPED_COLUMN,
    S_HIGH_COLUMN,
    S_LOW_COLUMN,
    UNIT_COLUMN,
    VALUE_UNITS_COLUMN,
    SumRule,
)
from dp_pipeline.errors import InternalError
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import CELL_COLUMN

# A deferred row's cell over the union of its shared-rows group's keys (negative: undefined).
ROW_CELL_COLUMN = "_dp_row_cell"


def unit_key(salt: BoundingSalt):
    """The 60-bit keyed unit key of `dp_pipeline.engines.bounding.unit_keys`, in Spark SQL."""
    digest = sf.sha2(
        sf.concat(sf.lit(salt.unit_salt + "|"), sf.col(UNIT_COLUMN).cast("string")), 256
    )
    return sf.conv(sf.substring(digest, 1, 15), 16, 10).cast("long")


KEEP_ROW_COLUMN = "_dp_keep_row"  # 1: the row is kept
KEEP_PAIR_COLUMN = "_dp_keep_pair"  # 1: the row's (unit, cell) pair is among the unit's kept
FIRST_IN_PAIR_COLUMN = "_dp_first_in_pair"  # 1 on one row of every (unit, cell) pair


def kept_rows(rows, cell, value, max_cells: int, max_per_cell: int, salt: BoundingSalt):
    """``rows`` with the keyed rule's verdict per row (`dp_pipeline.engines.bounding.bound_rows`).

    ``rows`` has the privacy unit in ``UNIT_COLUMN``; ``cell`` and ``value`` are long
    column names, the cell negative on rows no query takes (left out of the ranking).
    A (unit, cell) pair's rows rank by ``(xxhash64(seed_rows, unit_key, cell, value),
    value)`` and its first ``max_per_cell`` are kept; a unit's pairs rank by
    ``(xxhash64(seed_cells, unit_key, cell), cell)`` and its first ``max_cells`` are kept
    (``dense_rank`` over the rows ranks their pairs). Adds `KEEP_ROW_COLUMN`,
    `KEEP_PAIR_COLUMN` and `FIRST_IN_PAIR_COLUMN` (0 on rows with a negative cell).
    """
    valid = sf.col(cell) >= 0
    key = unit_key(salt)
    rows = rows.withColumn("_dp_unit_key", key)
    row_rank = sf.xxhash64(
        sf.lit(salt.seed_rows).cast("long"), sf.col("_dp_unit_key"), sf.col(cell), sf.col(value)
    )
    in_pair = Window.partitionBy(UNIT_COLUMN, cell).orderBy(row_rank, sf.col(value))
    cell_rank = sf.xxhash64(
        sf.lit(salt.seed_cells).cast("long"), sf.col("_dp_unit_key"), sf.col(cell)
    )
    in_unit = Window.partitionBy(sf.col(UNIT_COLUMN), valid).orderBy(cell_rank, sf.col(cell))
    position = sf.row_number().over(in_pair)
    pair_kept = valid & (sf.dense_rank().over(in_unit) <= max_cells)
    return (
        rows.withColumn("_dp_row_position", position)
        .withColumn(KEEP_PAIR_COLUMN, pair_kept.cast("int"))
        .withColumn(
            KEEP_ROW_COLUMN,
            (
                sf.col(KEEP_PAIR_COLUMN).cast("boolean")
                & (sf.col("_dp_row_position") <= max_per_cell)
            ).cast("int"),
        )
        .withColumn(FIRST_IN_PAIR_COLUMN, (valid & (sf.col("_dp_row_position") == 1)).cast("int"))
        .drop("_dp_row_position", "_dp_unit_key")
    )


def bounded_pairs(coded, spec: QuerySpec, rule: SumRule):
    """The general bounding rule in Spark SQL: per-cell aggregates of ``coded`` (one table).

    Only the rows of units with several rows come here (there is a privacy unit).
    ``coded`` has the untagged columns of `coded_rows`. Output: ``_cell``, ``n``,
    ``_dp_s_high`` / ``_dp_s_low`` (the exact sum as summed by ``rule``, pair
    partials exact too; exact while no cell has more than `LIMB_ROWS` rows under
    the limb rule, as every partial sums a subset of one cell's rows), ``clamped``,
    ``removed_per_cell``, ``removed_cells``, ``pairs_removed``; negative
    ``_cell`` rows count dropped rows by reason.
    """

    if spec.privacy_unit is None:
        raise InternalError("the general bounding rule needs a privacy unit")
    is_sum = spec.column is not None
    valid = sf.col(CELL_COLUMN) >= 0
    zero = sf.lit(0).cast("long")
    rows = coded.withColumn(UNIT_COLUMN, sf.col(spec.privacy_unit))
    if spec.shared_rows is not None:
        return _summed(_shared_pairs(rows, spec, rule), rule)
    salt = BoundingSalt.derive(spec.master_key(), spec.release_id, spec.table)
    m = spec.max_per_cell
    if is_sum:
        rows = rows.withColumn("_dp_unit_key", unit_key(salt))
        row_rank = sf.xxhash64(
            sf.lit(salt.seed_rows).cast("long"),
            sf.col("_dp_unit_key"),
            sf.col(CELL_COLUMN),
            sf.col(VALUE_UNITS_COLUMN),
        )
        window = Window.partitionBy(UNIT_COLUMN, CELL_COLUMN).orderBy(
            row_rank, sf.col(VALUE_UNITS_COLUMN)
        )
        rows = rows.withColumn("_dp_row_rank", sf.row_number().over(window))
        kept = sf.col("_dp_row_rank") <= m
        s_high, s_low = rule.sums(*rule.terms(sf.when(kept, sf.col(VALUE_UNITS_COLUMN))))
        pairs = rows.groupBy(UNIT_COLUMN, CELL_COLUMN).agg(
            sf.count(sf.lit(1)).alias("n_all"),
            sf.sum(sf.when(kept, 1).otherwise(0)).cast("long").alias("n_kept"),
            s_high.alias("s_kept_high"),
            s_low.alias("s_kept_low"),
            sf.sum(CLAMPED_COLUMN).alias("clamped"),
        )
    else:
        zero_high, zero_low = rule.zeros()
        pairs = rows.groupBy(UNIT_COLUMN, CELL_COLUMN).agg(sf.count(sf.lit(1)).alias("n_all"))
        pairs = pairs.withColumn("n_kept", sf.least(sf.col("n_all"), sf.lit(m).cast("long")))
        pairs = pairs.withColumn("s_kept_high", zero_high).withColumn("s_kept_low", zero_low)
        pairs = pairs.withColumn("clamped", zero)
    cell_rank = sf.xxhash64(
        sf.lit(salt.seed_cells).cast("long"), unit_key(salt), sf.col(CELL_COLUMN)
    )
    window = Window.partitionBy(sf.col(UNIT_COLUMN), valid).orderBy(cell_rank, sf.col(CELL_COLUMN))
    pairs = pairs.withColumn("_dp_cell_rank", sf.row_number().over(window))
    return _summed(
        pairs.withColumn("_dp_keep", valid & (sf.col("_dp_cell_rank") <= spec.max_cells)), rule
    )


def _shared_pairs(rows, spec: QuerySpec, rule: SumRule):
    """(unit, cell) pairs with ``_dp_keep``: the cell of the unit's best row (shared rows).

    Rows rank by ``xxhash64(seed_rows, unit_key, row cell)`` under the group's
    salt, undefined row cells last, then by row cell and cell: the order of
    `dp_pipeline.engines.bounding.bound_shared_rows`.
    """
    valid = sf.col(CELL_COLUMN) >= 0
    zero = sf.lit(0).cast("long")
    salt = BoundingSalt.derive_shared(spec.master_key(), spec.release_id, spec.shared_rows.group)
    # Every undefined row cell is -1, whatever the reason code: the numpy rule's value.
    row_cell = sf.when(sf.col(ROW_CELL_COLUMN) >= 0, sf.col(ROW_CELL_COLUMN)).otherwise(
        sf.lit(-1).cast("long")
    )
    rank = sf.xxhash64(sf.lit(salt.seed_rows).cast("long"), unit_key(salt), row_cell)
    is_sum = spec.column is not None
    # A sum's tied rows go in value order, the least first (the numpy rule's order).
    tiebreak = [sf.col(VALUE_UNITS_COLUMN)] if is_sum else []
    window = Window.partitionBy(sf.col(UNIT_COLUMN), valid).orderBy(
        (row_cell < 0).asc(), rank, row_cell, sf.col(CELL_COLUMN), *tiebreak
    )
    rows = rows.withColumn("_dp_best", (sf.row_number().over(window) == 1).cast("int"))
    if is_sum:
        best = sf.col("_dp_best") == 1
        s_high, s_low = rule.sums(*rule.terms(sf.when(best, sf.col(VALUE_UNITS_COLUMN))))
        pairs = rows.groupBy(UNIT_COLUMN, CELL_COLUMN).agg(
            sf.count(sf.lit(1)).alias("n_all"),
            sf.max("_dp_best").alias("_dp_best"),
            s_high.alias("s_kept_high"),
            s_low.alias("s_kept_low"),
            sf.sum(CLAMPED_COLUMN).alias("clamped"),
        )
    else:
        zero_high, zero_low = rule.zeros()
        pairs = rows.groupBy(UNIT_COLUMN, CELL_COLUMN).agg(
            sf.count(sf.lit(1)).alias("n_all"), sf.max("_dp_best").alias("_dp_best")
        )
        pairs = (
            pairs.withColumn("s_kept_high", zero_high)
            .withColumn("s_kept_low", zero_low)
            .withColumn("clamped", zero)
        )
    return pairs.withColumn("n_kept", sf.least(sf.col("n_all"), sf.lit(1).cast("long"))).withColumn(
        "_dp_keep", valid & (sf.col("_dp_best") == 1)
    )


def _summed(pairs, rule: SumRule):
    """Per-cell totals of bounded pairs (``_dp_keep`` marks the kept ones) and what was removed."""
    valid = sf.col(CELL_COLUMN) >= 0
    zero = sf.lit(0).cast("long")
    keep = sf.col("_dp_keep")
    dropped = valid & ~keep
    s_high, s_low = rule.sums(
        sf.when(keep, sf.col("s_kept_high")), sf.when(keep, sf.col("s_kept_low"))
    )
    return pairs.groupBy(CELL_COLUMN).agg(
        sf.sum(sf.when(~valid, sf.col("n_all")).when(keep, sf.col("n_kept")).otherwise(zero)).alias(
            "n"
        ),
        s_high.alias(S_HIGH_COLUMN),
        s_low.alias(S_LOW_COLUMN),
        sf.sum("clamped").alias("clamped"),
        sf.sum(sf.when(keep, sf.col("n_all") - sf.col("n_kept")).otherwise(zero)).alias(
            "removed_per_cell"
        ),
        sf.sum(sf.when(dropped, sf.col("n_all")).otherwise(zero)).alias("removed_cells"),
        sf.sum(sf.when(dropped, 1).otherwise(0)).cast("long").alias("pairs_removed"),
    )
