"""A key selected from a Spark DataFrame, streamed, then the rows of the released keys.

`select_rows` is step 2 of `dp_pipeline.from_data.plan` on Spark: the released keys come
from `dp_pipeline.keyselect.spark.select_keys_spark` (bounding per unit, distinct units per
key and each key's decision on the executors: no key set reaches the driver before the
selection); only the released keys are collected (they are the query's public output)
and the rows of those keys are kept by a broadcast semi-join. The same key material as
the pandas path, so both engines release the same keys and values, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.types import DataType, StringType, StructField, StructType

from dp_pipeline.engines.spark_sql.variance import SparkDPVariance, spark_variance
from dp_pipeline.errors import DPValueError
from dp_pipeline.from_data.pandas import ROW_UNIT
from dp_pipeline.from_data.plan import PlannedStatistic, SelectedKey, Statistic, bind_keys
from dp_pipeline.keyselect.spark import select_keys_spark
from dp_pipeline.query.cost import ReleaseInfo
from dp_pipeline.query.diagnostics import Diagnostics, invalid_rows_error
from dp_pipeline.query.result_info import attach_info

__all__ = ["SelectedRows", "SelectedVariance", "released_keys_spark", "select_rows"]


def _refuse_nulls(df: DataFrame, selection: SelectedKey) -> None:
    """``on_invalid="error"``: a null key (or unit) is refused as the pandas path does."""
    column, unit = selection.column, selection.privacy_unit
    flags = [sf.max(sf.col(column).isNull().cast("int")).alias("key")]
    if unit is not None:
        flags.append(sf.max(sf.col(unit).isNull().cast("int")).alias("unit"))
    row = df.select(*flags).first()
    if row is not None and row["key"]:
        raise invalid_rows_error(column, "have a null key")
    if unit is not None and row is not None and row["unit"]:
        raise invalid_rows_error(unit, "have a null privacy unit")


def released_keys_spark(df: DataFrame, selection: SelectedKey) -> tuple[list[object], DataType]:
    """The released keys of ``selection.column`` sorted by value (Python str or int), and
    their Spark type."""
    column, unit = selection.column, selection.privacy_unit
    if column not in df.columns:
        raise DPValueError(f"key column {column!r} is not in the DataFrame")
    if selection.on_invalid == "error":
        _refuse_nulls(df, selection)
    frame = df
    if unit is None:  # each row its own unit
        frame = df.select(column).withColumn(ROW_UNIT, sf.monotonically_increasing_id())
        unit = ROW_UNIT
    keys = select_keys_spark(
        frame,
        key=column,
        privacy_unit=unit,
        plan=selection.plan,
        selection_key=selection.selection_key(),
        salt=selection.salt(),
    )
    # The released keys reach the driver (the statistic's domain): at most cell_limit + 1
    # of them, so a selection that keeps too many is refused without collecting them all.
    values = sorted(row[0] for row in keys.limit(selection.cell_limit + 1).collect())
    return values, keys.schema[column].dataType


@dataclass(frozen=True)
class SelectedRows:
    """The rows the statistic reads (those of the released keys), its spec over exactly
    those keys (the stand-in when none was released: ``empty_type`` is then the key
    column's input type) and the info with the keys kept."""

    rows: DataFrame
    spec: Statistic
    info: ReleaseInfo
    column: str
    empty_type: DataType | None

    def finish(self, result: DataFrame) -> DataFrame:
        """The statistic's result: no row and the input's key type when no key was released."""
        if self.empty_type is None:
            return result
        return result.limit(0).withColumn(self.column, sf.col(self.column).cast(self.empty_type))


def select_rows(df: DataFrame, planned: PlannedStatistic) -> SelectedRows:
    """Select ``planned``'s key on ``df`` and keep the rows of the released keys."""
    selection = planned.selection
    if selection is None:
        return SelectedRows(df, planned.spec, planned.info, "", None)
    keys, key_type = released_keys_spark(df, selection)
    column = selection.column
    info = replace(planned.info, key_selection=selection.info.with_keys_kept(len(keys)))
    if not keys:
        stand_in = df.limit(0).withColumn(column, sf.lit(0).cast("long"))
        return SelectedRows(stand_in, planned.spec, info, column, df.schema[column].dataType)
    spec = bind_keys(planned.spec, column, keys, selection.cell_limit)
    released = df.sparkSession.createDataFrame(
        [(key,) for key in keys], StructType([StructField(column, key_type)])
    )
    rows = df.join(sf.broadcast(released), on=column, how="left_semi")
    return SelectedRows(rows, spec, info, column, None)


class SelectedVariance(SparkDPVariance):
    """A variance or std whose key is selected from the data: the released keys first
    (streamed), then the variance on their rows over exactly those keys."""

    def __init__(self, planned: PlannedStatistic) -> None:
        super().__init__(planned.spec)  # type: ignore[arg-type]
        self._planned = planned
        self._info = planned.info

    @property
    def info(self) -> ReleaseInfo:
        return (
            self._info
            if self.diagnostics is None
            else self._info.with_diagnostics(self.diagnostics)
        )

    def _release(self, df: DataFrame) -> tuple[pd.DataFrame, SelectedRows]:
        selected = select_rows(df, self._planned)
        result, self.diagnostics = spark_variance(selected.rows, selected.spec)  # type: ignore[arg-type]
        self._info = selected.info
        return result, selected

    def collect(self, df: DataFrame) -> pd.DataFrame:
        """The release as a pandas DataFrame on the driver, ``attrs["dp"]`` as ``df.dp``'s
        (no row when no key was released)."""
        result, selected = self._release(df)
        if selected.empty_type is not None:
            column = selected.column
            result = result.iloc[0:0].copy()
            text = isinstance(selected.empty_type, StringType)
            result[column] = result[column].astype(object if text else "int64")
        attach_info(result, self._info.with_diagnostics(self.diagnostics))
        return result

    def run(self, df: DataFrame) -> tuple[DataFrame, Diagnostics]:
        """(the release as a Spark DataFrame, diagnostics)."""
        result, selected = self._release(df)
        rows = pd.DataFrame(result)
        rows.attrs = {}  # the info stays with this query
        # With no key released, the stand-in's cells give the schema and are dropped.
        released = selected.finish(df.sparkSession.createDataFrame(rows))
        return released, self.diagnostics  # type: ignore[return-value]
