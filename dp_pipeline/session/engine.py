"""Running a planned session query on a pandas or a Spark DataFrame, as ``df.dp`` does.

The same engine calls as ``df.dp.*`` (pandas) and ``dp_pipeline.spark`` /
``dp_pipeline.selection.spark`` (Spark), so a session query releases exactly what the
same query gives there under the same key and labels, bit for bit on both engines.
`engine_of` and `check_columns` read only the DataFrame's type and column names (its
schema), never a row: a session calls them before it reserves any budget. PySpark is
optional: the Spark selection module is loaded only for a Spark DataFrame.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import pandas as pd

from dp_pipeline.engines.backend import noisy_tables
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.from_data.pandas import run_selected
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.query.variance import VarianceSpec
from dp_pipeline.selection.pandas import run_quantile_pandas, run_top_k_pandas
from dp_pipeline.selection.query import QuantileQuery
from dp_pipeline.session.plan import PlannedQuery

__all__ = ["check_columns", "engine_of", "run_planned"]


def _is_spark(df: object) -> bool:
    # Classic and Spark Connect DataFrames, recognised without importing PySpark.
    return any(
        kind.__name__ == "DataFrame" and kind.__module__.startswith("pyspark.sql")
        for kind in type(df).__mro__
    )


def engine_of(df: object) -> str:
    """ "pandas" or "spark" for ``df``'s type; a `DPTypeError` for anything else."""
    if isinstance(df, pd.DataFrame):
        return "pandas"
    if _is_spark(df):
        return "spark"
    raise DPTypeError(
        f"a session query takes a pandas or Spark DataFrame as df, got {type(df).__name__}"
    )


def check_columns(df, columns: Sequence[str], call: str) -> None:
    """Refuse ``df`` when it lacks one of ``columns`` (its schema only; no row is read)."""
    present = set(df.columns)
    missing = [column for column in columns if column not in present]
    if missing:
        raise DPValueError(
            f"{call}: the DataFrame has no column(s) {missing} that this query reads "
            f"(nothing was spent); its columns are {list(df.columns)}"
        )


def _spark_selection():
    # The Spark selection module imports PySpark, an optional dependency.
    return importlib.import_module("dp_pipeline.selection.spark")


def _spark_from_data():
    # The Spark key selection imports PySpark, an optional dependency.
    return importlib.import_module("dp_pipeline.from_data.spark")


def _spark_variance():
    # The Spark variance module imports PySpark, an optional dependency.
    return importlib.import_module("dp_pipeline.engines.spark_sql.variance")


def _run_spark(planned: PlannedQuery, df):
    """A count, sum, mean, var or std on Spark (its key perhaps selected from the data,
    streamed), computed now and kept as a local checkpoint."""
    spark = _spark_from_data()
    statistic = planned.statistic_plan()
    if isinstance(statistic.spec, VarianceSpec):
        variance = (
            _spark_variance().SparkDPVariance(statistic.spec)
            if statistic.selection is None
            else spark.SelectedVariance(statistic)
        )
        return variance(df).localCheckpoint(eager=True)
    selected = spark.select_rows(df, statistic)
    ((noisy, _diagnostics),) = noisy_tables(selected.rows, [selected.spec])
    return selected.finish(noisy).localCheckpoint(eager=True)


def run_planned(planned: PlannedQuery, df, engine: str):
    """Read ``df``, bound, aggregate and noise (or select) as ``planned`` says.

    pandas: the result ``df.dp`` gives (a DataFrame with ``attrs["dp"]``). Spark: a
    count, sum or mean is the noisy DataFrame ``df.transform(dp_count(...))`` gives,
    computed now and kept as a local checkpoint, so that it is never recomputed from
    the input (a changed input would get the same noise); a selection the small pandas
    DataFrame of ``dp_pipeline.selection.spark``.
    """
    query = planned.query
    if isinstance(query, VarianceSpec | QuerySpec):
        if engine == "spark":
            return _run_spark(planned, df)
        return run_selected(df, planned.statistic_plan())
    if isinstance(query, QuantileQuery):
        if engine == "spark":
            return _spark_selection().run_quantile_spark(df, query)
        return run_quantile_pandas(df, query)
    if engine == "spark":
        return _spark_selection().run_top_k_spark(df, query)
    return run_top_k_pandas(df, query)
