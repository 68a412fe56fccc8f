"""Mean, var and std tables of a release, run by the engines' own queries.

A mean table is the engines' mean query (`dp_pipeline.engines.pandas.aggregate.run_pandas`,
or one query of the Spark pass); a var or std table the engines' variance
(`dp_pipeline.engines.variance`, `dp_pipeline.engines.spark_sql.variance`), both with the
plan's mechanisms (`dp_pipeline.release.plan.moments`) and the release's stream labels,
so pandas and Spark draw the same noise and publish the same bytes. The released
table is the keys and ``value`` (the mean, variance or standard deviation, float64);
its noisy aggregates are accounted in the plan and never published.
"""

from __future__ import annotations

import pandas as pd

from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.engines.variance import (
    aggregate_variance,
    cell_keys,
    variance_frame,
    with_variance_columns,
)
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.release.plan.moments import MOMENT_STATISTICS, mean_query, variance_spec
from dp_pipeline.release.plan.queries import run_context, table_spec
from dp_pipeline.release.plan.release_plan import TablePlan
from dp_pipeline.release.spec.model import ReleaseSpec

__all__ = [
    "MOMENT_STATISTICS",
    "VARIANCES",
    "mean_spec",
    "moment_table_pandas",
    "noised_spec",
    "spark_variances",
    "with_truth_column",
]

VARIANCES = ("var", "std")


def _mechanisms(table_plan: TablePlan) -> list:
    return [measure.event.mechanism for measure in table_plan.measures]


def mean_spec(spec: ReleaseSpec, table_plan: TablePlan, master, release_digest: str) -> QuerySpec:
    """The engines' `QuerySpec` of a mean table with the plan's sum and count noise."""
    table = table_plan.table
    query = mean_query(table, spec, _mechanisms(table_plan))
    return QuerySpec.bind(query, run_context(spec, table, master, release_digest))


def noised_spec(spec: ReleaseSpec, table_plan: TablePlan, master, release_digest: str) -> QuerySpec:
    """The engines' `QuerySpec` of a count, sum or mean table with the plan's noise."""
    if table_plan.table.statistic == "mean":
        return mean_spec(spec, table_plan, master, release_digest)
    return table_spec(spec, table_plan.table, table_plan.mechanism, master, release_digest)


def _released(table_plan: TablePlan, frame: pd.DataFrame, column: str) -> pd.DataFrame:
    keys = list(table_plan.table.keys)
    out = frame[keys].copy()
    out["value"] = frame[column].to_numpy()
    return out


def moment_table_pandas(
    spec: ReleaseSpec, table_plan: TablePlan, master, frame: pd.DataFrame, release_digest: str
) -> tuple[pd.DataFrame, Diagnostics]:
    """A mean, var or std table of the pandas ``frame``: (keys and value, diagnostics)."""
    table = table_plan.table
    if table.statistic == "mean":
        released, found = run_pandas(frame, mean_spec(spec, table_plan, master, release_digest))
        return _released(table_plan, released, "mean"), found
    variance = variance_spec(spec, table, _mechanisms(table_plan), master, release_digest)
    centered, squares = aggregate_variance(with_variance_columns(frame, variance), variance)
    released = variance_frame(cell_keys(frame, variance), variance, centered, squares)
    return _released(table_plan, released, table.statistic), centered.diagnostics


def spark_variances(
    spec: ReleaseSpec,
    table_plans: list[TablePlan],
    master,
    frame,
    release_digest: str,
    results: dict,
    found: dict,
) -> None:
    """The var and std tables of the Spark DataFrame ``frame`` into ``results`` (keys and
    value, on the driver) and their diagnostics into ``found``: one aggregation job each."""
    from dp_pipeline.engines.spark_sql.variance import spark_variance

    for table_plan in table_plans:
        table = table_plan.table
        variance = variance_spec(spec, table, _mechanisms(table_plan), master, release_digest)
        released, found[table.name] = spark_variance(frame, variance)
        released.attrs = {}
        results[table.name] = _released(table_plan, released, table.statistic)


def with_truth_column(table) -> bool:
    """Whether the report compares this table's cells with integer truths (synthetic input).

    Counts and sums of granularity 1 only: a mean, a variance or a sum in fractional
    units has no integer truth, and its accuracy is given by its margins alone.
    """
    return table.statistic == "count" or (table.statistic == "sum" and table.granularity is None)
