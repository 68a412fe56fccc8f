"""A variance or standard deviation on Spark: ``df.transform(dp_var(...))`` / ``dp_std``.

The Spark dialect of `dp_pipeline.engines.variance`: the same two derived columns as
Spark expressions (the same IEEE operations as the numpy ones, so every row gets the same
centred units), then the ordinary Spark aggregation of the variance's two queries
(`dp_pipeline.engines.backend.aggregate`, dense true vectors on the driver), the same
keyed noise and post-processing as pandas: the released numbers are byte-identical.
The declared cells' true vectors are held on the driver (as for a collected release).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.types import BooleanType, NumericType

from dp_pipeline.engines.spark_sql.coding import invalid_number
from dp_pipeline.engines.variance import aggregate_variance, check_value_column, variance_frame
from dp_pipeline.errors import DPTypeError
from dp_pipeline.query.cost import ReleaseInfo, release_info
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.result_info import attach_info
from dp_pipeline.query.variance import VarianceSpec

__all__ = ["SparkDPVariance", "spark_variance_columns"]


def spark_variance_columns(df: DataFrame, spec: VarianceSpec) -> DataFrame:
    """``df`` with the centred and squared columns (null where the value is not a finite
    number); a value column that is not numeric is refused, naming it."""
    check_value_column(spec, list(df.columns))
    kind = df.schema[spec.column].dataType
    if not isinstance(kind, NumericType) or isinstance(kind, BooleanType):
        raise DPTypeError(
            f"value column {spec.column!r} has type {kind.simpleString()}; {spec.statistic} "
            f"needs a numeric column"
        )
    value, invalid = invalid_number(spec.column)
    bounds = spec.bounds
    centred = value * sf.lit(2.0) - sf.lit(float(bounds.lower + bounds.upper))
    scale = spec.centered.value_bounds
    # The same IEEE operations as dp_pipeline.engines.numpy_rules.rounded_units.
    raw = sf.rint(
        centred * sf.lit(float(scale.scale_denominator)) / sf.lit(float(scale.scale_numerator))
    )
    width = float(spec.width)
    units = sf.least(sf.greatest(raw, sf.lit(-width)), sf.lit(width))
    centred_name, squared_name = spec.derived_columns
    return df.withColumn(centred_name, sf.when(~invalid, centred)).withColumn(
        squared_name, sf.when(~invalid, units * units)
    )


def spark_variance(df: DataFrame, spec: VarianceSpec) -> tuple[pd.DataFrame, Diagnostics]:
    """The release of ``spec`` over the Spark ``df`` as pandas (what ``df.dp`` gives)."""
    info = release_info(spec)
    centered, squares = aggregate_variance(spark_variance_columns(df, spec), spec)
    cells = spec.cells
    decoded = cells.decode(np.arange(cells.total, dtype=np.int64))
    keys = pd.DataFrame(dict(zip(cells.columns, decoded, strict=True)))
    result = variance_frame(keys, spec, centered, squares)
    attach_info(result, info.with_diagnostics(centered.diagnostics))
    return result, centered.diagnostics


class SparkDPVariance:
    """A DP variance or standard deviation to apply with ``df.transform(query)``.

    ``query(df)`` reads ``df`` (one aggregation of both of its queries), noises on the
    driver and returns every declared cell (key columns, ``count``, ``var`` / ``std``) as
    a small Spark DataFrame; ``query.collect(df)`` the same as pandas with ``attrs["dp"]``.
    ``query.info`` is the `ReleaseInfo` (three events), known before any data is read.
    """

    def __init__(self, spec: VarianceSpec) -> None:
        self.spec = spec
        self.diagnostics: Diagnostics | None = None

    @property
    def info(self) -> ReleaseInfo:
        info = release_info(self.spec)
        return info if self.diagnostics is None else info.with_diagnostics(self.diagnostics)

    def collect(self, df: DataFrame) -> pd.DataFrame:
        """The release as a pandas DataFrame on the driver, ``attrs["dp"]`` as ``df.dp``'s."""
        result, self.diagnostics = spark_variance(df, self.spec)
        return result

    def run(self, df: DataFrame) -> tuple[DataFrame, Diagnostics]:
        """(the release as a Spark DataFrame, diagnostics)."""
        result, diagnostics = spark_variance(df, self.spec)
        self.diagnostics = diagnostics
        rows = pd.DataFrame(result)
        rows.attrs = {}  # the info stays with this query
        return df.sparkSession.createDataFrame(rows), diagnostics

    def __call__(self, df: DataFrame) -> DataFrame:
        return self.run(df)[0]

    def __repr__(self) -> str:
        return (
            f"SparkDPVariance({self.spec.statistic} of {self.spec.column!r} by "
            f"{list(self.spec.cells.columns)}, table={self.spec.table!r})"
        )
