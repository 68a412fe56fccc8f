"""DP selection on Spark: the engine of ``dp_pipeline.spark.dp_quantile``, ``dp_median``,
``dp_top_k`` (`run_quantile_spark`, `run_top_k_spark`).

The utilities' inputs are Spark aggregations; the selection runs on the driver
with the same code as the pandas engine (`dp_pipeline.selection.query`), so a
fixed key, release id and table give the same result on both engines.

- quantile / median: one ``groupBy`` of the (group, grid position) of every value
  (``clip(floor((clip(x, lo, hi) - lo) / g), 0, m - 1)`` in IEEE double, the
  expression of `dp_pipeline.query.quantile_grid.quantile_positions`; groups coded by
  the count engine's rules), after each privacy unit's rows are bounded by the count
  engine's keyed rule (window functions); collected to the driver as at most
  ``groups·m`` rows plus one per reason a row is dropped.
- top-k: the count engine's bounded per-candidate aggregation
  (`dp_pipeline.spark`): ``peeling`` collects the true bounded counts (one row
  per non-empty candidate) and peels on the driver; ``one_shot`` collects the
  count engine's noisy release (discrete Laplace noise added on the executors
  from the per-partition streams) and keeps its top k.

Each query names its privacy unit (``privacy_unit=None``: per record) and takes
``by=`` for one selection per declared group. Each run reads the DataFrame eagerly and
returns a small pandas DataFrame whose ``attrs["dp"]`` shows its `SelectionInfo`,
exactly as ``df.dp.quantile / median / top_k`` do.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import functions as sf
from pyspark.sql.types import NumericType, StringType

from dp_pipeline.engines.backend import aggregate, noisy_tables
from dp_pipeline.engines.spark_sql.bounding import (
    FIRST_IN_PAIR_COLUMN,
    KEEP_PAIR_COLUMN,
    KEEP_ROW_COLUMN,
    kept_rows,
)
from dp_pipeline.engines.spark_sql.coding import (
    INTEGRAL_TYPES,
    UNIT_COLUMN,
    check_schema,
    coded_rows,
    invalid_number,
    quantile_position,
)
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.diagnostics import Diagnostics, invalid_rows_error
from dp_pipeline.selection.query import QuantileQuery, TopKQuery
from dp_pipeline.udfs.noise import CELL_COLUMN

__all__ = [
    "check_numeric_column",
    "run_quantile_spark",
    "run_top_k_spark",
]

# The selections moved beside the Spark aggregations, with the call shape of df.dp.
_MOVED = {"dp_quantile": "column, q", "dp_median": "column", "dp_top_k": "column, k"}


def __getattr__(name: str) -> object:
    if name in _MOVED:
        arguments = _MOVED[name]
        raise DPTypeError(
            f"dp_pipeline.selection.spark.{name}(df, {arguments}, ...) is now "
            f"dp_pipeline.spark.{name}({arguments}, ...), a query for df.transform, as "
            f"dp_count is: write df.transform({name}({arguments}, ...)) for the selection as "
            f"a Spark DataFrame, or {name}({arguments}, ...).collect(df) for the pandas "
            f"result with attrs['dp']"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_CELL = "_dp_group"
_POSITION = "_dp_position"
_OUTSIDE = "_dp_outside"


def check_numeric_column(df, column: str, role: str) -> None:
    """Raise, naming ``role`` (e.g. "quantile column"), unless ``column`` is numeric in ``df``."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise DPValueError(
            f"{role} {column!r} is not in the DataFrame; its columns are {df.columns}"
        )
    kind = fields[column]
    if not isinstance(kind, NumericType):
        raise DPTypeError(
            f"{role} {column!r} has Spark type {kind.simpleString()}; it must be numeric"
        )


def _check_unit_column(df, privacy_unit: str) -> None:
    """Refuse a privacy unit column that is missing or holds neither integers nor strings."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    if privacy_unit not in fields:
        raise DPValueError(
            f"privacy_unit column {privacy_unit!r} is not in the DataFrame; its columns are "
            f"{df.columns}"
        )
    kind = fields[privacy_unit]
    if not isinstance(kind, (*INTEGRAL_TYPES, StringType)):
        raise DPTypeError(
            f"privacy_unit column {privacy_unit!r} has Spark type {kind.simpleString()}; "
            f"it must hold integers or strings"
        )


def _coded_quantile_rows(df, query: QuantileQuery):
    """One row per input row: cell (the group, or a negative reason code), grid position,
    clamped flag and the unit. Reason codes as `dp_pipeline.engines.spark_sql.coding.
    reason_codes` over the groups: null / out-of-domain key of group column i, then a null
    unit, then an invalid value (each row to the first rule it breaks, as the pandas path)."""
    selection = query.selection
    k = 0 if selection.groups is None else len(selection.groups.columns)
    if selection.groups is None:
        coded, cell = df, sf.lit(0).cast("long")
    else:
        spec = query.groups_spec()
        check_schema(df, spec)
        coded, cell = coded_rows(df, spec, null_units=False), sf.col(CELL_COLUMN)
    columns = []
    if selection.privacy_unit is not None:
        unit = sf.col(selection.privacy_unit)
        cell = sf.when((cell >= 0) & unit.isNull(), sf.lit(-(2 * k + 1)).cast("long")).otherwise(
            cell
        )
        columns.append(unit.alias(UNIT_COLUMN))
    value, invalid = invalid_number(query.column)
    cell = sf.when((cell >= 0) & invalid, sf.lit(-(2 * k + 2)).cast("long")).otherwise(cell)
    low, high = (float(b) for b in query.bounds)
    position = quantile_position(query.column, query.bounds, query.granularity)
    outside = (cell >= 0) & ~invalid & ((value < sf.lit(low)) | (value > sf.lit(high)))
    return coded.select(
        cell.alias(_CELL),
        sf.coalesce(position, sf.lit(-1).cast("long")).alias(_POSITION),
        outside.cast("int").alias(_OUTSIDE),
        *columns,
    )


def run_quantile_spark(df, query: QuantileQuery) -> pd.DataFrame:
    """One Spark job: bounded per-(group, grid position) counts (and the rows dropped, by
    reason); select on the driver.

    Guarantee: each privacy unit keeps at most ``max_per_cell`` rows in each of at most
    ``max_cells`` groups, by the keyed rule of the count engine
    (`dp_pipeline.engines.spark_sql.bounding.kept_rows`, the numpy rule's twin), so the
    counts, and the selection for a given key and labels, equal the pandas path's.
    """
    selection = query.selection
    check_numeric_column(df, query.column, "quantile column")
    if selection.privacy_unit is not None:
        _check_unit_column(df, selection.privacy_unit)
    rows = _coded_quantile_rows(df, query)
    valid = sf.col(_CELL) >= 0
    if selection.privacy_unit is not None:
        rows = kept_rows(
            rows, _CELL, _POSITION, selection.max_cells, selection.max_per_cell, query.salt()
        )
        keep, keep_pair = sf.col(KEEP_ROW_COLUMN) == 1, sf.col(KEEP_PAIR_COLUMN) == 1
        first = sf.col(FIRST_IN_PAIR_COLUMN) == 1
    else:
        keep, keep_pair, first = valid, valid, sf.lit(False)

    def total(condition):
        return sf.sum(sf.when(condition, 1).otherwise(0)).cast("long")

    collected = (
        rows.groupBy(_CELL, _POSITION)
        .agg(
            sf.count(sf.lit(1)).alias("n"),
            sf.sum(_OUTSIDE).cast("long").alias("outside"),
            total(keep).alias("kept"),
            total(keep_pair & ~keep).alias("removed_per_cell"),
            total(valid & ~keep_pair).alias("removed_cells"),
            total(valid & first & ~keep_pair).alias("pairs_removed"),
        )
        .collect()
    )
    width = len(query.candidates)
    buckets = np.zeros((selection.group_count, width), dtype=np.int64)
    dropped: dict[int, int] = {}
    removed = np.zeros(3, dtype=np.int64)
    clamped = 0
    for row in collected:
        cell = int(row[_CELL])
        if cell < 0:
            dropped[cell] = dropped.get(cell, 0) + int(row["n"])
            continue
        buckets[cell, int(row[_POSITION])] = int(row["kept"])
        clamped += int(row["outside"])
        removed += [int(row[c]) for c in ("removed_per_cell", "removed_cells", "pairs_removed")]
    diagnostics = _quantile_diagnostics(query, dropped, clamped, removed, buckets)
    return query.release(buckets, diagnostics)


def _quantile_diagnostics(query: QuantileQuery, dropped, clamped, removed, buckets) -> Diagnostics:
    """The pandas path's `Diagnostics` from the reason codes' row counts; under
    ``on_invalid="error"`` the pandas path's error for the first rule some row breaks."""
    selection = query.selection
    columns = () if selection.groups is None else selection.groups.columns
    k = len(columns)
    null_keys = {c: dropped.get(-(2 * i + 1), 0) for i, c in enumerate(columns)}
    outside_domains = {c: dropped.get(-(2 * i + 2), 0) for i, c in enumerate(columns)}
    null_units = dropped.get(-(2 * k + 1), 0)
    invalid = dropped.get(-(2 * k + 2), 0)
    if query.on_invalid == "error":
        for i, column in enumerate(columns):
            if null_keys[column]:
                raise invalid_rows_error(column, "have a null key")
            if outside_domains[column]:
                domain = selection.groups.domains[i]
                raise invalid_rows_error(
                    column, f"have a key outside the declared domain {domain!r}"
                )
        if null_units:
            raise invalid_rows_error(selection.privacy_unit, "have a null privacy unit")
        if invalid:
            raise invalid_rows_error(query.column, "hold null, NaN or infinite values")
    used = int(buckets.sum())
    return Diagnostics(
        rows_in=int(sum(dropped.values())) + used + int(removed[0]) + int(removed[1]),
        rows_null_key=null_keys,
        rows_out_of_domain=outside_domains,
        rows_null_unit=null_units,
        rows_invalid_value=invalid,
        rows_clamped=clamped,
        rows_removed_max_per_cell=int(removed[0]),
        rows_removed_max_cells=int(removed[1]),
        unit_cells_removed_max_cells=int(removed[2]),
        rows_used=used,
    )


def run_top_k_spark(df, query: TopKQuery) -> pd.DataFrame:
    """Per-candidate bounded counts in Spark (true or noisy); select on the driver."""
    spec = query.counts
    total = spec.cells.total
    counts = np.zeros(total, dtype=np.int64)
    if query.method == "one_shot":
        ((noisy, diagnostics),) = noisy_tables(df, [spec])
        released = noisy.select(*spec.cells.columns, "count").collect()
        positions = []
        for index, domain in enumerate(spec.cells.domains):
            keys = np.array([row[index] for row in released], dtype=object)
            positions.append(
                domain.positions(keys.astype(np.int64) if domain.kind == "int" else keys)
            )
        counts[spec.cells.cell_index(positions)] = [int(row["count"]) for row in released]
        return query.release(counts, diagnostics)
    (true,) = aggregate(df, [spec])
    return query.release(true.count, true.diagnostics)
