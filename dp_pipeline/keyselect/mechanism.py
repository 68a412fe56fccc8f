"""The key selection mechanism: release key k iff c_k + Z_k >= τ, Z_k exact and keyed.

Guarantee: with the counts of `dp_pipeline.keyselect.counts` (each unit on at most
``max_cells`` keys) and a `SelectionPlan` (or a `weighted.WeightedPlan` with its
totals), the released set has the privacy profile `SelectionPlan.delta_at` (theorem in
`dp_pipeline.keyselect.plan`). Each decision is an exact Bernoulli draw of the event
c_k + Z_k >= τ (`dp_pipeline.keyselect.decisions`) from the stream of k's VALUE
(`SelectionKey`), so a key's decision never depends on which other keys exist, on
their order, or on the engine or partition that evaluates it: pandas and a Spark
partition give the same keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect.counts import distinct_unit_counts
from dp_pipeline.keyselect.decisions import NoisePlan, release_decisions
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.plan import SelectionPlan

__all__ = [
    "NoisePlan",
    "PartitionSelector",
    "SelectedKeys",
    "release_decisions",
    "select_keys",
    "select_partition",
]


@dataclass(frozen=True)
class SelectedKeys:
    """The released keys (sorted by value) and the threshold they cleared. The number of
    candidate keys the data had is not here: it is not a private output."""

    keys: np.ndarray
    threshold: int
    plan: NoisePlan


def select_keys(
    df: pd.DataFrame,
    *,
    key: str,
    privacy_unit: str,
    plan: SelectionPlan,
    selection_key: SelectionKey,
    salt: BoundingSalt,
    on_invalid: str = "drop",
) -> SelectedKeys:
    """Bound, count distinct units per key, and release the keys that clear the plan's
    threshold (pandas; each key's decision from its own keyed stream)."""
    counts = distinct_unit_counts(
        df,
        key=key,
        privacy_unit=privacy_unit,
        max_cells=plan.max_cells,
        salt=salt,
        selection_key=selection_key,
        on_invalid=on_invalid,
    )
    released = release_decisions(plan, selection_key, counts.keys, counts.counts)
    return SelectedKeys(keys=counts.keys[released], threshold=plan.threshold, plan=plan)


def select_partition(
    batch: pd.DataFrame,
    *,
    key_column: str,
    count_column: str,
    plan: NoisePlan,
    selection_key: SelectionKey,
) -> pd.DataFrame:
    """The rows of ``batch`` (one row per key: its value and its bounded count of
    distinct units) whose key is released; rows with a count below 1 are never released.

    A pure function of the batch and the key material, whatever the batch boundaries:
    what a Spark ``mapInPandas`` over the per-key counts calls (`PartitionSelector`).
    """
    for column in (key_column, count_column):
        if column not in batch.columns:
            raise DPValueError(f"select_partition: column {column!r} is not in the batch")
    counts = batch[count_column].to_numpy(dtype=np.int64)
    candidates = counts >= 1
    keys = batch[key_column].to_numpy(dtype=object)[candidates]
    released = np.zeros(len(batch), dtype=bool)
    released[candidates] = release_decisions(plan, selection_key, keys, counts[candidates])
    return batch[released]


@dataclass(frozen=True)
class PartitionSelector:
    """Picklable ``mapInPandas`` function: each batch of (key, count) rows -> released rows."""

    key_column: str
    count_column: str
    plan: NoisePlan
    selection_key: SelectionKey

    def __call__(self, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for batch in batches:
            yield select_partition(
                batch,
                key_column=self.key_column,
                count_column=self.count_column,
                plan=self.plan,
                selection_key=self.selection_key,
            )
