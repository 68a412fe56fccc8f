"""Which privacy units have several rows: the only shuffle bounding needs, often avoided.

A unit with one row satisfies every contribution bound, so only units with
several rows take the general rule; sorted or provably unique unit ids skip it.
Integer ids numbered consecutively in row order (row numbers, generated ids) are
proven unique by one aggregate in the JVM; other sorted ids by a pass over them in
Python (`sorted_and_unique`); anything else by a window over the unit.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as sf

from dp_pipeline.engines.spark.parquet_pass import (
    IncreasingRun,
)
from dp_pipeline.engines.spark_sql.coding import (
    DEFERRED_COLUMN,
    INTEGRAL_TYPES,
    UNIT_COLUMN,
    UNIT_ROWS_COLUMN,
)

# Units with several rows marked by a broadcast join (above: a window over all rows).
BROADCAST_UNITS = 1_000_000


@dataclass(frozen=True)
class UnitCheck:
    """What the first job learned about the privacy unit column."""

    has_nulls: bool  # some rows have a null unit (dropped with a reason code)
    deferral: str  # "none", "lookup" (broadcast `lookup`) or "window" (all rows)
    lookup: object = None  # small DataFrame of the units with several rows


RUN_SCHEMA = "first long, last long, increasing boolean, nulls long"


def increasing_run(batches):
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


# `monotonically_increasing_id`: partition index above bit 33, row number within it below.
ROW_NUMBER_BITS = 33


def consecutive_and_unique(df, unit: str) -> tuple[bool, bool]:
    """(every non-null integer unit provably occurs once, some unit is null), in one JVM aggregate.

    Proof: `monotonically_increasing_id` gives every row a distinct id whose high
    bits are its Spark partition and whose low `ROW_NUMBER_BITS` bits ``r`` count
    the partition's rows. If ``unit - r`` is one constant over the non-null units
    of a partition, distinct rows there have distinct ``r`` hence distinct units;
    if moreover the partitions' [min, max] unit ranges are disjoint, no unit
    occurs twice. A partition with ``2**ROW_NUMBER_BITS`` rows or more (its row
    numbers could run into the next partition's ids) proves nothing. Holds for
    ids numbered consecutively in row order within each partition (gaps at null
    units allowed); anything else returns (False, _) and the caller tries
    `sorted_and_unique`. Reads the unit column only; no Python, no shuffle of rows.
    """
    row_id = "_dp_row_id"
    ids = df.select(
        sf.col(unit).cast("long").alias(UNIT_COLUMN),
        sf.monotonically_increasing_id().alias(row_id),
    )
    # Units within 2**ROW_NUMBER_BITS of the smallest long have no offset (the
    # subtraction would overflow); a partition holding one proves nothing.
    lowest = -(2**63) + 2**ROW_NUMBER_BITS
    row_number = sf.col(row_id).bitwiseAND(sf.lit(2**ROW_NUMBER_BITS - 1).cast("long"))
    offset = sf.when(
        sf.col(UNIT_COLUMN) >= sf.lit(lowest).cast("long"), sf.col(UNIT_COLUMN) - row_number
    )
    runs = (
        ids.groupBy(sf.shiftright(sf.col(row_id), ROW_NUMBER_BITS))
        .agg(
            sf.min(UNIT_COLUMN).alias("first"),
            sf.max(UNIT_COLUMN).alias("last"),
            sf.min(offset).alias("low_offset"),
            sf.max(offset).alias("high_offset"),
            sf.count(sf.lit(1)).alias("rows"),
            sf.count(UNIT_COLUMN).alias("units"),
        )
        .collect()
    )
    return runs_prove_unique(
        [
            (
                run["first"],
                run["last"],
                run["low_offset"] == run["high_offset"]
                and run["rows"] < 2**ROW_NUMBER_BITS
                and (run["first"] is None or run["first"] >= lowest),
                run["rows"] - run["units"],
            )
            for run in runs
        ]
    )


def sorted_and_unique(df, unit: str) -> tuple[bool, bool]:
    """(every non-null integer unit provably occurs once, some unit is null), no shuffle.

    Proof of uniqueness without a shuffle when the input is sorted by the unit
    (as person files usually are): the ids increase strictly within every Spark
    partition and the partitions' [first, last] ranges are disjoint. Returns
    (False, _) when that does not hold; the caller then checks with a window.
    """
    runs = df.select(sf.col(unit).cast("long")).mapInArrow(increasing_run, RUN_SCHEMA).collect()
    return runs_prove_unique([(r["first"], r["last"], r["increasing"], r["nulls"]) for r in runs])


def runs_prove_unique(runs) -> tuple[bool, bool]:
    """(the runs prove every non-null unit occurs once, some unit is null).

    ``runs``: one (first, last, increasing, nulls) per Spark task.
    """
    has_nulls = any(nulls for _, _, _, nulls in runs)
    if not all(increasing for _, _, increasing, _ in runs):
        return False, has_nulls
    ranges = sorted((first, last) for first, last, _, _ in runs if first is not None)
    disjoint = all(previous[1] < current[0] for previous, current in itertools.pairwise(ranges))
    return disjoint, has_nulls


def check_units(df, unit: str) -> UnitCheck:
    """One job over the unit column alone: null units, and units with several rows.

    Integer units numbered consecutively or sorted in the input are proven
    unique without a shuffle (`consecutive_and_unique`, then `sorted_and_unique`).
    Otherwise a window over the unit is the one shuffle that bounding needs (the
    ids only, a few bytes a row). No unit with several rows: no row is deferred
    and the tables need no shuffle by unit. Up to `BROADCAST_UNITS` of them: a
    broadcast lookup marks their rows. More: the rows themselves are windowed by unit.
    """
    if isinstance(df.schema[unit].dataType, INTEGRAL_TYPES):
        for proof in (consecutive_and_unique, sorted_and_unique):
            unique, has_nulls = proof(df, unit)
            if unique:
                return UnitCheck(has_nulls, "none")
    rows_of_unit = sf.count(sf.lit(1)).over(Window.partitionBy(sf.col(UNIT_COLUMN)))
    found = (
        df.select(sf.col(unit).alias(UNIT_COLUMN))
        .withColumn(UNIT_ROWS_COLUMN, rows_of_unit)
        .filter((sf.col(UNIT_ROWS_COLUMN) > 1) | sf.col(UNIT_COLUMN).isNull())
        .select(UNIT_COLUMN)
        .distinct()
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        multi = found.filter(sf.col(UNIT_COLUMN).isNotNull())
        count = multi.count()
        has_nulls = found.filter(sf.col(UNIT_COLUMN).isNull()).limit(1).count() > 0
        if count == 0:
            return UnitCheck(has_nulls, "none")
        if count > BROADCAST_UNITS:
            return UnitCheck(has_nulls, "window")
        # Materialize the small lookup on the driver so later plans do not rerun this job.
        lookup = df.sparkSession.createDataFrame(multi.toArrow().to_pandas())
        return UnitCheck(has_nulls, "lookup", lookup.withColumn(DEFERRED_COLUMN, sf.lit(True)))
    finally:
        found.unpersist()


def mark_deferred(coded, unit: str, check: UnitCheck):
    """``coded`` plus ``_dp_deferred``: does this row's (non-null) unit have several rows?"""
    if check.deferral == "none":
        return coded.withColumn(DEFERRED_COLUMN, sf.lit(False))
    if check.deferral == "window":
        unit_rows = sf.count(sf.lit(1)).over(Window.partitionBy(sf.col(unit)))
        return coded.withColumn(DEFERRED_COLUMN, sf.col(unit).isNotNull() & (unit_rows > 1))
    lookup = sf.broadcast(check.lookup)
    joined = coded.join(lookup, sf.col(unit) == sf.col(UNIT_COLUMN), "left").drop(UNIT_COLUMN)
    return joined.withColumn(DEFERRED_COLUMN, sf.coalesce(sf.col(DEFERRED_COLUMN), sf.lit(False)))
