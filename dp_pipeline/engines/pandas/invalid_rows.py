"""The first rule an input's rows break, on a pandas DataFrame (``on_invalid = "error"``).

A check is ``(reason, column, domain)``: ``"null_key"`` and ``"out_of_domain"``
test a key column against its `dp_pipeline.query.domain.Domain`,
``"hierarchy_mismatch"`` the rows against a `dp_pipeline.query.hierarchy.HierarchyRule`
(its finest column named), ``"null_unit"``
the privacy unit, ``"invalid_value"`` a summed or quantile column (null, NaN or
infinite). Rows are judged by the same functions the pandas engine drops them
with (`dp_pipeline.engines.pandas.aggregate`), so a release refused here is one
that would have dropped rows, and one passed here drops none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dp_pipeline.engines.numpy_rules import hierarchy_breaks
from dp_pipeline.engines.pandas.aggregate import (
    check_key_dtype,
    hierarchy_positions,
    input_column,
    key_positions,
)
from dp_pipeline.query.domain import Domain
from dp_pipeline.query.hierarchy import HIERARCHY_MISMATCH, HierarchyRule

__all__ = ["first_broken_check"]


def first_broken_check(
    df: pd.DataFrame, checks: Sequence[tuple[str, str, Domain | HierarchyRule | None]]
) -> tuple[str, str] | None:
    """``(reason, column)`` of the first check some row of ``df`` breaks, or None.

    Only whether a row breaks a rule is computed: no count or value leaves here.
    """
    keys: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for reason, column, domain in checks:
        if reason in ("null_key", "out_of_domain"):
            if column not in keys:
                series = input_column(df, column, "key")
                check_key_dtype(series, domain)
                keys[column] = key_positions(series, domain)
            null, positions = keys[column]
            broken = null if reason == "null_key" else ~null & (positions < 0)
        elif reason == HIERARCHY_MISMATCH:
            broken = hierarchy_breaks(domain, hierarchy_positions(df, domain))
        elif reason == "null_unit":
            broken = input_column(df, column, "privacy_unit").isna().to_numpy()
        else:
            series = input_column(df, column, "value")
            if not pd.api.types.is_numeric_dtype(series.dtype):
                continue  # the engine names the column's wrong type
            broken = ~np.isfinite(series.to_numpy(dtype=np.float64, na_value=np.nan))
        if broken.any():
            return reason, column
    return None
