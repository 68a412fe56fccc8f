"""Private key selection on a Spark DataFrame, streamed: the released keys as a DataFrame.

`select_keys_spark` chains the passes of `dp_pipeline.keyselect.partitions`:

1. ``repartition(privacy_unit)`` then ``mapInPandas(PairBounder)``: each partition bounds
   its whole units (at most ``max_cells`` keys per unit, the keyed rule of
   `dp_pipeline.keyselect.counts`) and emits one (key, weight) row per kept pair;
2. ``groupBy(key).sum(weight)``: the counts of distinct units per key (or the weighted
   totals), an ordinary Spark aggregation, never on the driver;
3. ``mapInPandas`` over the per-key totals: each key's exact decision from its own keyed
   randomness (`dp_pipeline.keyselect.decisions`), a narrow map (no shuffle), emitting
   the released key values only (neither the count nor the noise leaves the task).

Guarantee: the released keys are those `dp_pipeline.keyselect.select_keys` (uniform
policy) or `dp_pipeline.keyselect.weighted.select_weighted_keys` (weighted plan) releases
on the same rows with the same key material, whatever the partitioning, since every
step is a function of a unit's own rows or of a key's value and total. The shuffles are
those of a plain "distinct units per key after bounding" pipeline (by unit, then by key);
the selection itself adds one narrow pass over the per-key totals. Nothing is collected:
the result is a lazy DataFrame (unordered; sort it if an order matters).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.keyselect.decisions import NoisePlan
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.mechanism import select_partition
from dp_pipeline.keyselect.partitions import PairBounder

__all__ = ["ReleasedKeys", "select_keys_spark"]

_WEIGHT = "__dp_weight"
_TOTAL = "__dp_total"
_INTEGER_TYPES = (ByteType, ShortType, IntegerType, LongType)


@dataclass(frozen=True)
class ReleasedKeys:
    """Picklable ``mapInPandas`` function: (key, total) batches -> the released key values
    only (the total stays in the task)."""

    key_column: str
    total_column: str
    plan: NoisePlan
    selection_key: SelectionKey

    def __call__(self, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for batch in batches:
            released = select_partition(
                batch,
                key_column=self.key_column,
                count_column=self.total_column,
                plan=self.plan,
                selection_key=self.selection_key,
            )
            yield released[[self.key_column]]


def _key_type(frame: DataFrame, key: str) -> DataType:
    """The Spark type of the released keys: strings stay strings, integers become long
    (the values pandas releases); any other type is refused before anything runs."""
    kind = frame.schema[key].dataType
    if isinstance(kind, StringType):
        return StringType()
    if isinstance(kind, _INTEGER_TYPES):
        return LongType()
    raise DPTypeError(
        f"key column {key!r} has Spark type {kind.simpleString()}; key selection needs "
        f"integer or string keys (cast the column, e.g. .cast('string'))"
    )


def select_keys_spark(
    frame: DataFrame,
    *,
    key: str,
    privacy_unit: str,
    plan: NoisePlan,
    selection_key: SelectionKey,
    salt: BoundingSalt,
    partitions: int | None = None,
) -> DataFrame:
    """The keys of ``frame`` that the selection releases: a one-column DataFrame (the
    ``key`` column), lazy and unordered (module docstring for the passes and guarantee).

    ``plan`` is a `SelectionPlan` (uniform policy) or a `weighted.WeightedPlan` (its
    ``weights``); rows with a null key or unit are dropped, as pandas does under
    ``on_invalid="drop"``. ``partitions`` sets the repartition by unit (default: Spark's
    ``spark.sql.shuffle.partitions``). Raises `DPValueError` / `DPTypeError` for a
    missing column or a key type that cannot be selected, before any job runs.
    """
    for name, what in ((key, "key"), (privacy_unit, "privacy_unit")):
        if name not in frame.columns:
            raise DPValueError(f"{what}={name!r}: no such column in the DataFrame")
    if key == privacy_unit:
        raise DPValueError(f"key={key!r}: must differ from privacy_unit (a unit is not a key)")
    if partitions is not None and (isinstance(partitions, bool) or partitions < 1):
        raise DPValueError(f"partitions={partitions!r}: must be a positive integer or None")
    key_type = _key_type(frame, key)
    bounder = PairBounder(
        key,
        privacy_unit,
        plan.max_cells,
        salt,
        selection_key,
        getattr(plan, "weights", None),
        _WEIGHT,
    )
    rows = frame.select(privacy_unit, key)
    by_unit = (
        rows.repartition(partitions, privacy_unit)
        if partitions is not None
        else rows.repartition(privacy_unit)
    )
    pairs = by_unit.mapInPandas(
        bounder, StructType([StructField(key, key_type), StructField(_WEIGHT, LongType())])
    )
    totals = pairs.groupBy(key).agg(sf.sum(_WEIGHT).alias(_TOTAL))
    selector = ReleasedKeys(key, _TOTAL, plan, selection_key)
    return totals.mapInPandas(selector, StructType([StructField(key, key_type)]))
