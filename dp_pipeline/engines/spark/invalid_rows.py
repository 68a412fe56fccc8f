"""The exact invalid-unit count of a Spark DataFrame (``on_invalid = "error"``), never published.

The checks of `dp_pipeline.engines.pandas.invalid_rows`, as Spark SQL conditions
with the Spark engine's coding rules (`dp_pipeline.engines.spark_sql.coding`: a
NaN integer key is null, a non-integral one outside the domain), counted in one
job that returns one integer: the distinct privacy units with an invalid row,
plus one when some invalid row has no readable unit (null unit, malformed CSV
row); without a unit column, the invalid rows. No other count or value leaves Spark.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import functions as sf
from pyspark.sql.types import DoubleType, FloatType

from dp_pipeline.engines.spark_sql.coding import hierarchy_broken
from dp_pipeline.query.domain import Domain
from dp_pipeline.query.hierarchy import HIERARCHY_MISMATCH, HierarchyRule

__all__ = ["invalid_unit_count"]


def _key_conditions(df, column: str, domain: Domain):
    """(null, outside the domain) conditions of a key column."""
    value = sf.col(column)
    null = value.isNull()
    integral = sf.lit(True)
    if isinstance(df.schema[column].dataType, DoubleType | FloatType):
        null = null | sf.isnan(value)
        integral = sf.rint(value) == value
    if domain.is_range:
        inside = (value >= sf.lit(domain.start)) & (value < sf.lit(domain.stop)) & integral
    elif domain.kind == "int":
        inside = integral & value.cast("long").isin([int(v) for v in domain.values])
    else:
        inside = value.cast("string").isin([str(v) for v in domain.values])
    return null, ~null & ~sf.coalesce(inside, sf.lit(False))


def invalid_unit_count(
    df,
    checks: Sequence[tuple[str, str, Domain | HierarchyRule | None]],
    privacy_unit: str | None,
    malformed: str | None = None,
) -> tuple[int, int]:
    """(exact count of the units with an invalid row, malformed rows) of ``df``: one job.

    ``malformed``: a boolean column of ``df`` marking malformed CSV rows (their other
    fields are not checked: they are dropped whole). Sensitivity 1, as the pandas twin.
    """
    conditions = []
    for index, (reason, column, domain) in enumerate(checks):
        if reason in ("null_key", "out_of_domain"):
            null, outside = _key_conditions(df, column, domain)
            conditions.append(null if reason == "null_key" else outside)
        elif reason == HIERARCHY_MISMATCH:
            df, broken = hierarchy_broken(df, domain, f"_check{index}")
            conditions.append(broken)
        elif reason == "null_unit":
            conditions.append(sf.col(column).isNull())
        else:
            value = sf.col(column).cast("double")
            infinite = sf.abs(value) == sf.lit(float("inf"))
            conditions.append(value.isNull() | sf.isnan(value) | infinite)
    invalid = sf.lit(False)
    for condition in conditions:
        invalid = invalid | sf.coalesce(condition, sf.lit(False))
    bad = sf.lit(False) if malformed is None else sf.col(malformed)
    invalid = ~bad & invalid
    counts = [sf.sum(bad.cast("long")).alias("malformed")]
    if privacy_unit is None:
        counts.append(sf.sum(invalid.cast("long")).alias("units"))
    else:
        unit = sf.col(privacy_unit)
        counts.append(sf.count_distinct(sf.when(invalid & unit.isNotNull(), unit)).alias("units"))
        counts.append(sf.max((invalid & unit.isNull()).cast("int")).alias("unreadable"))
    (row,) = df.agg(*counts).collect()
    malformed_rows = int(row["malformed"] or 0)
    if privacy_unit is None:
        return int(row["units"] or 0) + malformed_rows, malformed_rows
    unreadable = bool(row["unreadable"]) or malformed_rows > 0
    return int(row["units"] or 0) + int(unreadable), malformed_rows
