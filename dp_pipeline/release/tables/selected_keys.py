"""Tables grouped by keys selected from the data: select the keys, then the tables on them.

For each column whose domain is ``"from_data"``, the plan's selection
(`dp_pipeline.release.plan.key_selections`) runs on the release's input first:

- pandas (and a Spark input the engine would aggregate on the driver alike): the
  input read once, `dp_pipeline.keyselect.select_keys` on it;
- Spark: `dp_pipeline.keyselect.spark.select_keys_spark`, streamed (one pass over the
  bounded rows, no key set on the driver before the selection), whose released keys
  are then collected: they are the selection's output and the table's domain.

Both release the same keys: each key's decision is drawn from its own keyed stream
(labels: the release id, its digest and the column), after keyed bounding (salt: the
release id and the column). Rows whose selected key is null or not of its type are
invalid: dropped, never a key. Then every table is computed as if the released keys,
sorted by value, had been declared as the column's domain: the same engines, the same
noise streams (release id, table, digest), so pandas and Spark publish the same bytes;
rows of keys not released are outside that domain and count in no cell. A table whose
selected key released no key has no cell and is published empty. The plan passed on
carries the resolved domains and each selection's count of released keys (DP output).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import replace

import numpy as np
import pandas as pd

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.keyselect import SelectionKey, select_keys
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.plan.key_selections import selection_plans
from dp_pipeline.release.plan.release_plan import ReleasePlan
from dp_pipeline.release.spec.model import ReleaseSpec, TableSpec, replaced

__all__ = [
    "SELECTION_LABEL",
    "empty_table",
    "resolved_plans",
    "selected_keys_pandas",
    "selection_materials",
]

SELECTION_LABEL = "key selection"
# The unit column of a release whose every row is its own unit (privacy_unit.each_row).
_ROW_UNIT = "_dp_row_unit"


def selection_materials(
    spec: ReleaseSpec, master: MasterKey, release_digest: str, column: str
) -> tuple[SelectionKey, BoundingSalt]:
    """(selection key, bounding salt) of ``column``'s selection in this release."""
    key = SelectionKey.derive(master, SELECTION_LABEL, spec.release_id, release_digest, column)
    salt = BoundingSalt.derive(master, spec.release_id, f"{SELECTION_LABEL} {column}")
    return key, salt


def selected_keys_pandas(
    spec: ReleaseSpec,
    plan: ReleasePlan,
    master: MasterKey,
    frame: pd.DataFrame,
    release_digest: str,
) -> dict[str, tuple]:
    """Each selected column -> its released keys (sorted), selected on a pandas frame."""
    unit = spec.privacy_unit
    if unit is None:  # every row its own unit: one key per unit, nothing to bound
        frame = frame.assign(**{_ROW_UNIT: np.arange(len(frame), dtype=np.int64)})
        unit = _ROW_UNIT
    released = {}
    for entry in selection_plans(plan):
        key, salt = selection_materials(spec, master, release_digest, entry.column)
        chosen = select_keys(
            frame,
            key=entry.column,
            privacy_unit=unit,
            plan=entry.selection,
            selection_key=key,
            salt=salt,
            on_invalid="drop",
        )
        released[entry.column] = tuple(sorted(chosen.keys.tolist()))
    return released


def selected_keys_spark(
    spec: ReleaseSpec, plan: ReleasePlan, master: MasterKey, frame, release_digest: str
) -> dict[str, tuple]:
    """`selected_keys_pandas` on a Spark DataFrame: streamed selection, released keys
    collected (they are the selection's output)."""
    spark_selection = importlib.import_module("dp_pipeline.keyselect.spark")
    functions = importlib.import_module("pyspark.sql.functions")
    unit = spec.privacy_unit
    if unit is None:
        frame = frame.withColumn(_ROW_UNIT, functions.monotonically_increasing_id())
        unit = _ROW_UNIT
    released = {}
    for entry in selection_plans(plan):
        key, salt = selection_materials(spec, master, release_digest, entry.column)
        chosen = spark_selection.select_keys_spark(
            frame,
            key=entry.column,
            privacy_unit=unit,
            plan=entry.selection,
            selection_key=key,
            salt=salt,
        )
        values = [row[0] for row in chosen.collect()]
        released[entry.column] = tuple(sorted(int(v) if isinstance(v, int) else v for v in values))
    return released


def resolved_plans(
    plan: ReleasePlan, released: dict[str, tuple]
) -> tuple[ReleasePlan, ReleasePlan]:
    """(the plan to compute: tables with at least one cell, the plan to publish: every
    table), both over the spec whose selected columns' domains are the released keys."""
    spec = plan.spec
    domains = {**spec.domains, **released}
    tables = {}
    for table in spec.tables:
        cells = math.prod(len(domains[key]) for key in table.keys)
        tables[table.name] = replace(table, cells=cells)
    resolved_spec = replaced(spec, domains=domains, tables=tuple(tables.values()))
    every = tuple(replace(t, table=tables[t.table.name]) for t in plan.tables)
    publish = replace(plan, spec=resolved_spec, tables=every)
    compute = replace(publish, tables=tuple(t for t in every if t.table.cells > 0))
    return compute, publish


def empty_table(spec: ReleaseSpec, table: TableSpec, with_truth: bool) -> pd.DataFrame:
    """A table with no cell (a selected key released no key): its columns, no row."""
    columns = {}
    for key in table.keys:
        integer = key in spec.key_selections and spec.key_selections[key].type == "integer"
        integer = integer or isinstance(spec.domains.get(key), range)
        columns[key] = pd.Series([], dtype=np.int64 if integer else object)
    columns["value"] = pd.Series([], dtype=np.int64)
    if with_truth:
        columns["true_value"] = pd.Series([], dtype=np.int64)
    return pd.DataFrame(columns)
