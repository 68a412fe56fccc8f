"""The exact invalid-unit count of a pandas DataFrame (``on_invalid = "error"``), never published.

A check is ``(reason, column, domain)``: ``"null_key"`` and ``"out_of_domain"``
test a key column against its `dp_pipeline.query.domain.Domain`,
``"hierarchy_mismatch"`` the rows against a `dp_pipeline.query.hierarchy.HierarchyRule`
(its finest column named), ``"null_unit"``
the privacy unit, ``"invalid_value"`` a summed or quantile column (null, NaN or
infinite). Rows are judged by the same functions the pandas engine drops them
with (`dp_pipeline.engines.pandas.aggregate`). The count is what the release
noises (`dp_pipeline.release.tables.invalid_rows`): the distinct privacy units with at
least one row breaking a check, plus one when some invalid row has no readable
unit (a null unit, or a malformed row the reader dropped); without a unit
column, every invalid row (malformed ones included).
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

__all__ = ["invalid_rows_mask", "invalid_unit_count"]


def invalid_rows_mask(
    df: pd.DataFrame, checks: Sequence[tuple[str, str, Domain | HierarchyRule | None]]
) -> np.ndarray:
    """Boolean mask of the rows of ``df`` that break at least one of ``checks``."""
    invalid = np.zeros(len(df), dtype=bool)
    keys: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for reason, column, domain in checks:
        if reason in ("null_key", "out_of_domain"):
            if column not in keys:
                series = input_column(df, column, "key")
                check_key_dtype(series, domain)
                keys[column] = key_positions(series, domain)
            null, positions = keys[column]
            invalid |= null if reason == "null_key" else ~null & (positions < 0)
        elif reason == HIERARCHY_MISMATCH:
            invalid |= hierarchy_breaks(domain, hierarchy_positions(df, domain))
        elif reason == "null_unit":
            invalid |= input_column(df, column, "privacy_unit").isna().to_numpy()
        else:
            series = input_column(df, column, "value")
            if not pd.api.types.is_numeric_dtype(series.dtype):
                continue  # the engine names the column's wrong type
            invalid |= ~np.isfinite(series.to_numpy(dtype=np.float64, na_value=np.nan))
    return invalid


def invalid_unit_count(
    df: pd.DataFrame,
    checks: Sequence[tuple[str, str, Domain | HierarchyRule | None]],
    privacy_unit: str | None,
    malformed_rows: int = 0,
) -> int:
    """Exact count of the units with an invalid row (see the module docstring).

    Sensitivity 1 under add/remove or replace of one unit, the unreadable rows
    (null unit, malformed) counting as one unit. Non-private: only its noisy
    value may leave the release.
    """
    invalid = invalid_rows_mask(df, checks)
    if privacy_unit is None:
        return int(invalid.sum()) + int(malformed_rows)
    units = input_column(df, privacy_unit, "privacy_unit")[invalid]
    null = units.isna().to_numpy()
    unreadable = bool(null.any()) or malformed_rows > 0
    return int(units[~null].nunique()) + int(unreadable)
