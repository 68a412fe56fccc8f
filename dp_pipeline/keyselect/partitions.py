"""Key selection as per-partition functions, for Spark ``mapInPandas`` (or any engine that
hands pandas batches to Python workers).

The selection in three passes, each a pure function of its input rows and key material:

1. `PairBounder` over partitions that hold every row of their units (e.g. after
   ``repartition(privacy_unit)``): bounding depends on a unit's own rows only
   (`dp_pipeline.keyselect.counts`), so each partition bounds its units alone and emits
   one row per kept (unit, key) pair: the key and its weight (1 for the uniform policy,
   w(k_u) for the weighted one);
2. the engine sums the weights per key (``groupBy(key).sum``): the counts of distinct
   units (uniform) or the weighted totals, streamed, never collected on the driver;
3. `dp_pipeline.keyselect.mechanism.PartitionSelector` over the per-key totals: each
   key's decision from its own stream, whatever the partitioning.

pandas (`select_keys`, `select_weighted_keys`) and these passes give the same keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.keyselect.counts import bounded_pairs
from dp_pipeline.keyselect.key_streams import SelectionKey

__all__ = ["PairBounder"]


@dataclass(frozen=True)
class PairBounder:
    """Picklable ``mapInPandas`` function: the rows of whole units -> (key, weight) rows.

    ``weights`` is None for the uniform policy (weight 1 per kept pair) or the weighted
    plan's (w(1), ..., w(m)). The batches of one call are concatenated first (a unit's
    rows may span Arrow batches of the same partition). Invalid rows are dropped
    (``on_invalid="drop"``): a per-partition error would say which partition held one.
    """

    key: str
    privacy_unit: str
    max_cells: int
    salt: BoundingSalt
    selection_key: SelectionKey
    weights: tuple[int, ...] | None = None
    weight_column: str = "weight"

    def pairs(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The (key, weight) rows of the kept pairs of ``rows`` (whole units only)."""
        pairs = bounded_pairs(
            rows,
            key=self.key,
            privacy_unit=self.privacy_unit,
            max_cells=self.max_cells,
            salt=self.salt,
            selection_key=self.selection_key,
        )
        if self.weights is None:
            weight = np.ones(pairs.key.size, dtype=np.int64)
        else:
            table = np.array((0, *self.weights), dtype=np.int64)
            per_unit = np.bincount(pairs.unit) if pairs.unit.size else np.zeros(0, np.int64)
            weight = table[per_unit[pairs.unit]]
        return pd.DataFrame({self.key: pairs.uniques[pairs.key], self.weight_column: weight})

    def __call__(self, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        frames = list(batches)
        if frames:
            yield self.pairs(pd.concat(frames, ignore_index=True))
