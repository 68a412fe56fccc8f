"""The thin bridge from a release plan to the engines (pandas ``df.dp`` and `dp_pipeline.spark`).

The release layer adds nothing to the noise: each table is one engine call
with the plan's mechanism, the spec's domains and contribution bounds, and
the stream labels (master key, release id, table name, noise partitions),
so both engines release bit-identical tables. True (non-private) cell values
are computed only for synthetic input, for the report's accuracy section;
they are never written to a released table.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dp_pipeline.release.plan import ReleasePlan, TablePlan
from dp_pipeline.release.spec import ReleaseSpec

__all__ = ["compute_tables", "engine_arguments", "true_values_pandas"]


def engine_arguments(spec: ReleaseSpec, table_plan: TablePlan, master) -> dict:
    """Keyword arguments shared by ``df.dp.count/sum`` and ``dp_pipeline.spark.dp_count/sum``."""
    table = table_plan.table
    arguments = dict(
        by=list(table.keys),
        domains={key: spec.domains[key] for key in table.keys},
        noise=table_plan.mechanism,
        key=master,
        release_id=spec.release_id,
        table=table.name,
        privacy_unit=spec.privacy_unit,
        max_cells=table.max_cells,
        max_per_cell=table.max_per_cell,
        neighbouring=spec.neighbouring,
        noise_partitions=spec.noise_partitions,
        cell_limit=spec.max_cells,
    )
    if table.statistic == "sum":
        arguments.update(column=table.value, bounds=(table.lower, table.upper))
    return arguments


def _full_index(spec: ReleaseSpec, keys) -> pd.MultiIndex:
    # Same order as the engines' cell index: first key most significant.
    return pd.MultiIndex.from_product([list(spec.domains[k]) for k in keys], names=list(keys))


def true_values_pandas(frame: pd.DataFrame, spec: ReleaseSpec, table_plan: TablePlan) -> np.ndarray:
    """Non-private cell values over the full domain (synthetic data only, for the report)."""
    table = table_plan.table
    keys = list(table.keys)
    if table.statistic == "count":
        grouped = frame.groupby(keys, observed=True).size()
    else:
        clamped = frame[table.value].clip(table.lower, table.upper)
        grouped = clamped.groupby([frame[k] for k in keys], observed=True).sum()
    if len(keys) == 1:
        grouped.index = pd.MultiIndex.from_arrays([grouped.index], names=keys)
    full = grouped.reindex(_full_index(spec, keys), fill_value=0)
    return full.to_numpy(np.int64)


def compute_tables(
    spec: ReleaseSpec,
    plan: ReleasePlan,
    master,
    input_path: Path,
    input_format: str,
    *,
    with_truth: bool,
    progress,
    spark=None,
) -> tuple[dict[str, pd.DataFrame], dict[str, float]]:
    """Every table of the plan as a pandas DataFrame (keys, ``value``[, ``true_value``])."""
    if spec.engine == "pandas":
        return _pandas(spec, plan, master, input_path, input_format, with_truth, progress)
    return _spark(spec, plan, master, input_path, input_format, with_truth, progress, spark)


def _statistic_column(table_plan: TablePlan) -> str:
    return table_plan.table.statistic  # the engines name the released column after it


def _pandas(spec, plan, master, input_path, input_format, with_truth, progress):
    import dp_pipeline.pandas_accessor  # noqa: F401  (registers df.dp)

    timings = {}
    started = time.perf_counter()
    progress(f"pandas: reading {input_path}")
    frame = pd.read_csv(input_path) if input_format == "csv" else pd.read_parquet(input_path)
    timings["read"] = time.perf_counter() - started
    progress(f"pandas: read {len(frame):,} rows in {timings['read']:.1f} s")
    results = {}
    started = time.perf_counter()
    for index, table_plan in enumerate(plan.tables, 1):
        arguments = engine_arguments(spec, table_plan, master)
        if table_plan.table.statistic == "count":
            released = frame.dp.count(**arguments)
        else:
            column = arguments.pop("column")
            released = frame.dp.sum(column, **arguments)
        released = released.rename(columns={_statistic_column(table_plan): "value"})
        released = released[[*table_plan.table.keys, "value"]]
        if with_truth:
            released["true_value"] = true_values_pandas(frame, spec, table_plan)
        results[table_plan.table.name] = released
        progress(
            f"pandas: table {index}/{len(plan.tables)} {table_plan.table.name} "
            f"({len(released):,} cells)"
        )
    timings["aggregate_noise"] = time.perf_counter() - started
    return results, timings


def _spark(spec, plan, master, input_path, input_format, with_truth, progress, spark):
    from dp_pipeline.spark import dp_count, dp_sum

    timings = {}
    own_session = spark is None
    if own_session:
        progress(f"spark: starting a session on {spec.master}")
        spark = spark_session(spec.master)
    try:
        started = time.perf_counter()
        reader = spark.read
        if input_format == "csv":
            frame = reader.option("header", True).option("inferSchema", True).csv(str(input_path))
        else:
            frame = reader.parquet(str(input_path))
        frame = frame.cache()
        rows = frame.count()
        timings["read"] = time.perf_counter() - started
        progress(f"spark: read {rows:,} rows in {timings['read']:.1f} s")
        results = {}
        started = time.perf_counter()
        for index, table_plan in enumerate(plan.tables, 1):
            arguments = engine_arguments(spec, table_plan, master)
            function = dp_count if table_plan.table.statistic == "count" else dp_sum
            released = frame.transform(function(**arguments)).toPandas()
            released = released.rename(columns={_statistic_column(table_plan): "value"})
            # Spark returns cells in partition order; publish them in the declared domain
            # order, as the pandas engine does, so both engines write identical files.
            keys = list(table_plan.table.keys)
            declared = _full_index(spec, keys)
            position = pd.Series(np.arange(len(declared)), index=declared)
            order = position.reindex(pd.MultiIndex.from_frame(released[keys])).to_numpy()
            if np.isnan(order.astype(np.float64)).any() or len(order) != len(position):
                raise RuntimeError(
                    f"table {table_plan.table.name!r}: the Spark engine did not return "
                    f"exactly the declared cells"
                )
            released = released.iloc[np.argsort(order, kind="stable")]
            released = released[[*keys, "value"]].reset_index(drop=True)
            if with_truth:
                truth = _spark_truth(frame, spec, table_plan)
                released = released.merge(truth, on=list(table_plan.table.keys), how="left")
                released["true_value"] = released["true_value"].fillna(0).astype(np.int64)
            results[table_plan.table.name] = released
            progress(
                f"spark: table {index}/{len(plan.tables)} {table_plan.table.name} "
                f"({len(released):,} cells)"
            )
        timings["aggregate_noise"] = time.perf_counter() - started
        frame.unpersist()
    finally:
        if own_session:
            spark.stop()
    return results, timings


def spark_session(master: str):
    """``local_session`` for ``local[N]`` / ``local[*]`` masters, else a session on ``master``."""
    from dp_pipeline.spark import local_session

    match = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master)
    if match:
        cores = match.group(1)
        return local_session(None if cores in (None, "*") else int(cores))
    from pyspark.sql import SparkSession

    return SparkSession.builder.master(master).appName("dp_pipeline release").getOrCreate()


def _spark_truth(frame, spec, table_plan) -> pd.DataFrame:
    from pyspark.sql import functions

    table = table_plan.table
    if table.statistic == "count":
        aggregated = frame.groupBy(*table.keys).agg(
            functions.count(functions.lit(1)).alias("true_value")
        )
    else:
        clamped = functions.least(
            functions.greatest(functions.col(table.value), functions.lit(table.lower)),
            functions.lit(table.upper),
        )
        aggregated = frame.groupBy(*table.keys).agg(functions.sum(clamped).alias("true_value"))
    return aggregated.toPandas()
