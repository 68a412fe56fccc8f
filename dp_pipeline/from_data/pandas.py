"""A key selected from a pandas DataFrame, then the statistic on exactly the released keys.

`run_selected` is step 2 of `dp_pipeline.from_data.plan`: the released keys
(`dp_pipeline.keyselect.select_keys`, each key's decision from its own keyed stream), the
rows whose key is released, and the statistic over those keys with the noise calibrated
before reading. Its result carries the plan's `ReleaseInfo` with the number of keys kept
(never the number the data had) and the run's diagnostics.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.pandas.aggregate import release_frame
from dp_pipeline.engines.variance import (
    aggregate_variance,
    cell_keys,
    variance_frame,
    with_variance_columns,
)
from dp_pipeline.errors import DPValueError
from dp_pipeline.from_data.plan import PlannedStatistic, SelectedKey, Statistic, bind_keys
from dp_pipeline.keyselect import select_keys
from dp_pipeline.query.cost import ReleaseInfo
from dp_pipeline.query.result_info import attach_info
from dp_pipeline.query.variance import VarianceSpec

__all__ = ["ROW_UNIT", "released_keys", "run_selected", "run_statistic"]

# Without a privacy unit each row is its own unit: a column of row numbers stands for it.
ROW_UNIT = "__dp_row_unit"


def released_keys(df: pd.DataFrame, selection: SelectedKey) -> list[object]:
    """The keys of ``selection.column`` the selection releases, sorted by value (Python
    str or int values: what both engines release)."""
    column, unit = selection.column, selection.privacy_unit
    if column not in df.columns:
        raise DPValueError(f"key column {column!r} is not in the DataFrame")
    frame = df
    if unit is None:
        frame = pd.DataFrame({column: df[column].to_numpy(), ROW_UNIT: np.arange(len(df))})
        unit = ROW_UNIT
    selected = select_keys(
        frame,
        key=column,
        privacy_unit=unit,
        plan=selection.plan,
        selection_key=selection.selection_key(),
        salt=selection.salt(),
        on_invalid=selection.on_invalid,
    )
    return sorted(selected.keys.tolist())


def run_statistic(df: pd.DataFrame, spec: Statistic, info: ReleaseInfo) -> pd.DataFrame:
    """``spec`` on ``df`` as ``df.dp`` runs it (every cell of ``spec``), ``attrs["dp"]``
    ``info`` with the run's diagnostics."""
    if isinstance(spec, VarianceSpec):
        centered, squares = aggregate_variance(with_variance_columns(df, spec), spec)
        result = variance_frame(cell_keys(df, spec), spec, centered, squares)
        diagnostics = centered.diagnostics
    else:
        (true,) = aggregate(df, [spec])
        result = release_frame(df, spec, true)
        diagnostics = true.diagnostics
    attach_info(result, info.with_diagnostics(diagnostics))
    return result


def _empty_release(df: pd.DataFrame, planned: PlannedStatistic, column: str) -> pd.DataFrame:
    """No key released: the statistic's columns with no row (the key column keeps the
    input's dtype). The stand-in cells are computed on no row and dropped."""
    stand_in = df.iloc[0:0].assign(**{column: pd.Series([], dtype=np.int64)})
    empty = run_statistic(stand_in, planned.spec, planned.info).iloc[0:0].copy()
    empty[column] = empty[column].astype(df[column].dtype)
    return empty


def run_selected(df: pd.DataFrame, planned: PlannedStatistic) -> pd.DataFrame:
    """``planned`` on ``df``: with a key selected from the data, its released keys, then the
    statistic on their rows over exactly those keys; ``attrs["dp"]`` is the plan's info
    (with the keys kept) and the run's diagnostics."""
    selection = planned.selection
    if selection is None:
        return run_statistic(df, planned.spec, planned.info)
    keys = released_keys(df, selection)
    column = selection.column
    info = replace(planned.info, key_selection=selection.info.with_keys_kept(len(keys)))
    if not keys:
        result = _empty_release(df, planned, column)
        attach_info(result, info)
        return result
    rows = df[df[column].isin(keys)]
    spec = bind_keys(planned.spec, column, keys, selection.cell_limit)
    return run_statistic(rows, spec, info)
