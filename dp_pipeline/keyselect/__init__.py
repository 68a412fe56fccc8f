"""Private key selection: release only the keys whose noisy count of distinct units clears
an exact threshold (for grouping keys nobody declared a domain for).

- `plan`: the threshold and the selection's δ for a target (ε, δ), ``max_cells`` and
  the neighbouring relation, every δ an upper bound computed in exact rationals
  (`exact_exp`, `tails`, `noise_profiles`), the selection's privacy profile and its
  accountant event, and the least ε that releases a key held by N units
  (`minimum_epsilon`); `rules`: the parameters' rules and limits shared by every
  policy; `budget`: the decimal grid of that least ε.
- `key_streams`: per-key uniforms (one keyed BLAKE2b call, then ChaCha20) and 64-bit
  hashes from each key's value.
- `counts`: keyed bounding (at most ``max_cells`` keys per unit) and the distinct units
  per key, with the validity rules for key columns.
- `decisions`: each key's release as an exact Bernoulli draw of its threshold event.
- `mechanism`: the selection on pandas (`select_keys`) and per batch for a Spark
  ``mapInPandas`` (`select_partition`, `PartitionSelector`).
- `weighted`: the weighted policy for ``max_cells > 1`` (per-unit weights within a norm).
- `partitions`: bounding per partition of whole units (`PairBounder`), for Spark.
- `spark`: the streamed selection on a Spark DataFrame (`select_keys_spark`; imports
  PySpark, so it is not re-exported here).

One job per module; nothing here reads a spec or touches the ledger.
"""

from __future__ import annotations

from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.mechanism import (
    PartitionSelector,
    SelectedKeys,
    select_keys,
    select_partition,
)
from dp_pipeline.keyselect.plan import SelectionPlan, minimum_epsilon, plan_selection

__all__ = [
    "PartitionSelector",
    "SelectedKeys",
    "SelectionKey",
    "SelectionPlan",
    "minimum_epsilon",
    "plan_selection",
    "select_keys",
    "select_partition",
]
