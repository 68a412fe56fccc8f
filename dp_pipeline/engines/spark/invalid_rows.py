"""The first rule an input's rows break, on a Spark DataFrame (``on_invalid = "error"``).

The checks of `dp_pipeline.engines.pandas.invalid_rows`, as Spark SQL conditions
with the Spark engine's coding rules (`dp_pipeline.engines.spark_sql.coding`: a
NaN integer key is null, a non-integral one outside the domain), all evaluated
in one job that returns one flag per check: no count or value leaves Spark.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import functions as sf
from pyspark.sql.types import DoubleType, FloatType

from dp_pipeline.engines.spark_sql.coding import hierarchy_broken
from dp_pipeline.query.domain import Domain
from dp_pipeline.query.hierarchy import HIERARCHY_MISMATCH, HierarchyRule

__all__ = ["first_broken_check"]


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


def first_broken_check(df, checks: Sequence[tuple[str, str, Domain | HierarchyRule | None]]):
    """``(reason, column)`` of the first check some row of ``df`` breaks, or None."""
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
    if not conditions:
        return None
    flags = df.agg(
        *[sf.max(c.cast("int")).alias(f"_dp_check_{i}") for i, c in enumerate(conditions)]
    ).collect()[0]
    for (reason, column, _), flag in zip(checks, flags, strict=True):
        if flag:
            return reason, column
    return None
