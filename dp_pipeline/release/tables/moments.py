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

import numpy as np
import pandas as pd

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.pandas.aggregate import release_frame
from dp_pipeline.engines.variance import (
    aggregate_variance,
    cell_keys,
    variance_frame,
    with_variance_columns,
)
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.query.variance import variance_columns
from dp_pipeline.release.plan.moments import MOMENT_STATISTICS, mean_query, variance_spec
from dp_pipeline.release.plan.queries import run_context, table_spec
from dp_pipeline.release.plan.release_plan import TablePlan
from dp_pipeline.release.spec.model import ReleaseSpec
from dp_pipeline.udfs.noise import release_columns

__all__ = [
    "MOMENT_STATISTICS",
    "VARIANCES",
    "add_spark_truth",
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
    spec: ReleaseSpec,
    table_plan: TablePlan,
    master,
    frame: pd.DataFrame,
    release_digest: str,
    with_truth: bool = False,
) -> tuple[pd.DataFrame, Diagnostics]:
    """A mean, var or std table of the pandas ``frame``: (keys and value, diagnostics).

    ``with_truth`` (synthetic input only): also ``true_value``, the statistic of the
    bounded true aggregates (what the noise is added to), never published.
    """
    table = table_plan.table
    if table.statistic == "mean":
        query = mean_spec(spec, table_plan, master, release_digest)
        (true,) = aggregate(frame, [query])
        released = _released(table_plan, release_frame(frame, query, true), "mean")
        if with_truth:
            released["true_value"] = release_columns(query, true.vectors())["mean"]
        return released, true.diagnostics
    variance = variance_spec(spec, table, _mechanisms(table_plan), master, release_digest)
    centered, squares = aggregate_variance(with_variance_columns(frame, variance), variance)
    keys = cell_keys(frame, variance)
    return _variance_table(table_plan, variance, keys, centered, squares, with_truth)


def _variance_table(table_plan, variance, keys, centered, squares, with_truth) -> tuple:
    statistic = table_plan.table.statistic
    released = variance_frame(keys, variance, centered, squares)
    released = _released(table_plan, released, statistic)
    if with_truth:
        true = variance_columns(variance, centered.vectors(), squares.vectors())
        released["true_value"] = true[statistic]
    return released, centered.diagnostics


def spark_variances(
    spec: ReleaseSpec,
    table_plans: list[TablePlan],
    master,
    frame,
    release_digest: str,
    results: dict,
    found: dict,
    with_truth: bool = False,
) -> None:
    """The var and std tables of the Spark DataFrame ``frame`` into ``results`` (keys and
    value, on the driver) and their diagnostics into ``found``: one aggregation job each
    (`dp_pipeline.engines.spark_sql.variance`; ``with_truth`` as `moment_table_pandas`)."""
    from dp_pipeline.engines.spark_sql.variance import spark_variance_columns

    for table_plan in table_plans:
        table = table_plan.table
        variance = variance_spec(spec, table, _mechanisms(table_plan), master, release_digest)
        centered, squares = aggregate_variance(spark_variance_columns(frame, variance), variance)
        cells = variance.cells
        decoded = cells.decode(np.arange(cells.total, dtype=np.int64))
        keys = pd.DataFrame(dict(zip(cells.columns, decoded, strict=True)))
        results[table.name], found[table.name] = _variance_table(
            table_plan, variance, keys, centered, squares, with_truth
        )


def add_spark_truth(table: pd.DataFrame, table_plan: TablePlan, released, cells, position):
    """``table``'s ``true_value`` from a Spark pass (synthetic input only, for the report).

    A count's or sum's (granularity 1) values before bounding, as the pass collects them;
    a mean's statistic of its bounded true aggregates, as `moment_table_pandas` computes it.
    """
    statistic = table_plan.table.statistic
    if statistic == "mean":
        index = position[table_plan.table.name]
        true = cells.true_aggregates(index).vectors()
        table["true_value"] = release_columns(cells.queries[index], true)["mean"]
    elif with_truth_column(table_plan.table):
        table["true_value"] = released.true_count if statistic == "count" else released.true_sum


def with_truth_column(table) -> bool:
    """Whether a count or sum table's cells get an integer truth (synthetic input only).

    Counts and sums of granularity 1 only (a sum in other units has no integer truth);
    a mean's, var's or std's truth is its statistic of the bounded true aggregates.
    """
    return table.statistic == "count" or (table.statistic == "sum" and table.granularity is None)
