"""Distinct privacy units per key after keyed bounding: the counts a selection noises.

Rules (each a function of a unit's own rows, so the analysis of
`dp_pipeline.keyselect.plan` holds):

1. Key values are strings (a string or object column) or integers (an integer column,
   or a float column holding integers and NaN, as pandas and Parquet make nullable
   integers). A null key, or a value of another type in the column (a column of mixed
   types), makes the row invalid: dropped under ``on_invalid="drop"``, refused under
   ``on_invalid="error"`` (`dp_pipeline.query.diagnostics.invalid_rows_error`, whose
   message quotes no count or value). Rows with a null privacy unit likewise.
2. Each unit keeps at most ``max_cells`` of its distinct keys: the keyed rule of
   `dp_pipeline.engines.bounding` (``cell_rank = xxhash64(seed_cells, unit_key, cell)``)
   with ``cell`` the 64-bit keyed hash of the key's VALUE
   (`dp_pipeline.keyselect.key_streams.SelectionKey.value_hashes`), ties broken by that
   hash, so which keys a unit keeps never depends on the keys of other units (two of a
   unit's keys with the same 64-bit hash and rank, below 2^-64 per pair, fall back to
   the order first seen).
3. c_k = the number of units that kept k. Keys whose every unit dropped them (c_k = 0)
   are not candidates: such a key would otherwise be released with some probability
   because of rows that bounding removed, which the plan does not account for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dp_pipeline.engines.bounding import BoundingSalt, spark_xxhash64, unit_keys
from dp_pipeline.engines.pandas.aggregate import drop_null_units, unit_column, unit_values
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.query.diagnostics import invalid_rows_error

__all__ = [
    "BoundedPairs",
    "KeyCounts",
    "bounded_pairs",
    "distinct_unit_counts",
    "key_values",
    "sorted_candidates",
]

ON_INVALID = ("drop", "error")


@dataclass(frozen=True)
class KeyCounts:
    """Candidate keys (values, sorted), their counts of distinct units (>= 1), and the
    non-private diagnostics of what bounding and the validity rules removed."""

    keys: np.ndarray
    counts: np.ndarray
    rows_invalid: int
    pairs_removed_max_cells: int


def key_values(series: pd.Series, column: str, on_invalid: str) -> tuple[np.ndarray, np.ndarray]:
    """(values as exact Python str/int objects, valid mask) for a key column (rule 1)."""
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        raise DPTypeError(
            f"key column {column!r} has dtype {dtype}; key selection needs integer or string keys"
        )
    if pd.api.types.is_integer_dtype(dtype):
        null = series.isna().to_numpy()
        values = series.to_numpy(dtype=object, na_value=None)
        rule_bad, bad = "have a null key", null
    elif pd.api.types.is_float_dtype(dtype):
        raw = series.to_numpy(dtype=np.float64)
        null = np.isnan(raw)
        whole = ~null & np.isfinite(raw) & (np.floor(raw) == raw)
        pairs = zip(raw.tolist(), whole.tolist(), strict=True)
        values = np.array([int(v) if ok else None for v, ok in pairs], dtype=object)
        if on_invalid == "error" and null.any():
            raise invalid_rows_error(column, "have a null key")
        rule_bad, bad = "have a key that is not an integer", ~whole
    elif pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype):
        values = series.to_numpy(dtype=object)
        null = series.isna().to_numpy()
        if on_invalid == "error" and null.any():
            raise invalid_rows_error(column, "have a null key")
        is_str = np.fromiter((isinstance(v, str) for v in values), bool, values.size)
        rule_bad, bad = "have a key that is not a string (a column of mixed types)", ~is_str
    else:
        raise DPTypeError(
            f"key column {column!r} has dtype {dtype}; key selection needs integer or string keys"
        )
    if on_invalid == "error" and bad.any():
        raise invalid_rows_error(column, rule_bad)
    return values, ~bad


@dataclass(frozen=True)
class BoundedPairs:
    """The (unit, key) pairs bounding keeps: ``unit[i]`` holds ``uniques[key[i]]``."""

    uniques: np.ndarray
    unit: np.ndarray
    key: np.ndarray
    rows_invalid: int
    pairs_removed_max_cells: int


def bounded_pairs(
    df: pd.DataFrame,
    *,
    key: str,
    privacy_unit: str,
    max_cells: int,
    salt: BoundingSalt,
    selection_key: SelectionKey,
    on_invalid: str = "drop",
) -> BoundedPairs:
    """The distinct (unit, key) pairs of valid rows, at most ``max_cells`` per unit
    (rules 1 and 2 of the module), vectorized."""
    if on_invalid not in ON_INVALID:
        raise DPValueError(f"on_invalid={on_invalid!r}: must be 'drop' or 'error'")
    if key not in df.columns:
        raise DPValueError(f"key column {key!r} is not in the DataFrame")
    values, valid = key_values(df[key], key, on_invalid)
    units = unit_column(df, privacy_unit)
    invalid_keys = int((~valid).sum())
    invalid_units = drop_null_units(units, privacy_unit, on_invalid, valid)
    values = values[valid]
    unit_codes, unit_key = unit_keys(unit_values(units[valid]), salt)
    key_codes, uniques = pd.factorize(values, sort=False)
    key_codes = key_codes.astype(np.int64)
    width = max(len(uniques), 1)
    hashes = selection_key.value_hashes(uniques.tolist())
    # Distinct (unit, key) pairs, sorted by unit, then rank, then the key's hash.
    pairs = np.unique(unit_codes * width + key_codes)
    pair_unit, pair_key = np.divmod(pairs, width)
    pair_hash = hashes[pair_key]
    key_of_unit = np.zeros(int(unit_codes.max()) + 1 if unit_codes.size else 0, dtype=np.int64)
    key_of_unit[unit_codes] = unit_key
    rank = spark_xxhash64(salt.seed_cells, key_of_unit[pair_unit], pair_hash)
    order = np.lexsort((pair_hash, rank, pair_unit))
    sorted_units = pair_unit[order]
    starts = np.ones(sorted_units.size, dtype=bool)
    starts[1:] = sorted_units[1:] != sorted_units[:-1]
    index = np.arange(sorted_units.size)
    rank_in_unit = index - np.maximum.accumulate(np.where(starts, index, 0))
    kept = np.sort(order[rank_in_unit < max_cells])
    return BoundedPairs(
        uniques=np.asarray(uniques, dtype=object),
        unit=pair_unit[kept],
        key=pair_key[kept],
        rows_invalid=invalid_keys + invalid_units,
        pairs_removed_max_cells=int(pairs.size - kept.size),
    )


def sorted_candidates(uniques: np.ndarray, totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, totals) of the keys with a total >= 1 (rule 3), sorted by value."""
    present = totals > 0
    keys, totals = uniques[present], totals[present]
    by_value = np.array(sorted(range(keys.size), key=lambda i: keys[i]), dtype=np.int64)
    return keys[by_value], totals[by_value]


def distinct_unit_counts(
    df: pd.DataFrame,
    *,
    key: str,
    privacy_unit: str,
    max_cells: int,
    salt: BoundingSalt,
    selection_key: SelectionKey,
    on_invalid: str = "drop",
) -> KeyCounts:
    """Bounded counts of distinct units per key (the module's rules), vectorized."""
    pairs = bounded_pairs(
        df,
        key=key,
        privacy_unit=privacy_unit,
        max_cells=max_cells,
        salt=salt,
        selection_key=selection_key,
        on_invalid=on_invalid,
    )
    totals = np.bincount(pairs.key, minlength=len(pairs.uniques)).astype(np.int64)
    keys, counts = sorted_candidates(pairs.uniques, totals)
    return KeyCounts(
        keys=keys,
        counts=counts,
        rows_invalid=pairs.rows_invalid,
        pairs_removed_max_cells=pairs.pairs_removed_max_cells,
    )
