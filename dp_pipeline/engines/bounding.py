"""Keyed, deterministic contribution bounding (the rule both engines implement).

Which rows a privacy unit keeps must (a) depend only on that unit's own rows,
as differential privacy requires, (b) not be "the first ones" (an adversary or
a file order must not steer it), and (c) be identical in pandas and Spark. The
rule:

1. ``unit_key = int(sha256(salt_hex + "|" + str(unit))[:15 hex digits])`` — a
   60-bit key per unit (Spark: ``sha2`` + ``conv``; pandas: ``hashlib``).
2. Rows of one (unit, cell) are ranked by
   ``row_rank = xxhash64(seed_rows, unit_key, cell, value_units)`` then by the
   value; the first ``max_per_cell`` are kept (counts keep ``min(n, max_per_cell)``
   rows, which are interchangeable).
3. A unit's (unit, cell) pairs are ranked by
   ``cell_rank = xxhash64(seed_cells, unit_key, cell)`` then by cell index; the
   first ``max_cells`` are kept.

``xxhash64`` is Spark's ``xxhash64`` expression on LongType inputs (XXH64's
8-byte "hashLong" step chained from Spark's fixed seed 42); `spark_xxhash64`
below is a numpy transcription, checked against Spark in the tests. The salt
and seeds come from ``key.hmac_sha256(b"bounding", labels(release_id, table))``;
they appear in Spark plans, so they are derived values, never the master key.

Shared rows (count tables combined by post-processing, ``max_cells =
max_per_cell = 1``, `dp_pipeline.query.spec.SharedRows`): one salt for the
group, ``key.hmac_sha256(b"bounding", labels(release_id, "shared rows",
group))``, and each row ranked by ``xxhash64(seed_rows, unit_key, row_cell)``
where ``row_cell`` is its cell index in the product of the union of the group's
keys (−1 when one of those keys is null or outside its domain; such rows rank
last). A unit keeps the cell of its best row (rank, then row_cell, then cell):
a pair ranks by its best row, and since the best row is the same in every
table of the group, every table keeps it and the true margins agree exactly.

Selections that score each kept row's own value (a quantile's grid position)
apply steps 1-3 with ``value_units`` = that value and keep the rows themselves
(`bound_rows`), rather than their per-cell aggregates.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dp_pipeline.errors import InternalError
from dp_pipeline.randomness import MasterKey, encode_labels

__all__ = [
    "BoundingResult",
    "BoundingSalt",
    "RowBounding",
    "bound_contributions",
    "bound_rows",
    "bound_shared_rows",
    "first_least_per_group",
    "spark_xxhash64",
    "unit_keys",
]

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
SPARK_XXHASH_SEED = 42


@dataclass(frozen=True)
class BoundingSalt:
    """Public-in-plans values derived from the master key for one (release, table)."""

    unit_salt: str  # 32 hex digits, prefixed to each unit before sha256
    seed_cells: int  # signed 64-bit
    seed_rows: int

    @classmethod
    def derive(cls, key: MasterKey, release_id: str, table: str) -> BoundingSalt:
        return cls._of(key.hmac_sha256(b"bounding", encode_labels((release_id, table))))

    @classmethod
    def derive_shared(cls, key: MasterKey, release_id: str, group: str) -> BoundingSalt:
        """The one salt of a group of tables that keep the same rows (three labels, so
        never equal to a table's two-label salt)."""
        labels = encode_labels((release_id, "shared rows", group))
        return cls._of(key.hmac_sha256(b"bounding", labels))

    @classmethod
    def _of(cls, digest: bytes) -> BoundingSalt:
        return cls(
            unit_salt=digest[:16].hex(),
            seed_cells=int.from_bytes(digest[16:24], "little", signed=True),
            seed_rows=int.from_bytes(digest[24:32], "little", signed=True),
        )

    def __repr__(self) -> str:
        return "BoundingSalt(<derived>)"


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _hash_long(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's XXH64.hashLong(input, seed) on uint64 arrays (wrapping arithmetic)."""
    h = seed + _P5 + np.uint64(8)
    k = _rotl(value * _P2, 31) * _P1
    h ^= k
    h = _rotl(h, 27) * _P1 + _P4
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def spark_xxhash64(*columns: np.ndarray | int) -> np.ndarray:
    """numpy equal of Spark SQL ``xxhash64(c1, c2, ...)`` on non-null LongType columns (int64)."""
    arrays = [np.asarray(c, dtype=np.int64) for c in columns]
    length = max((a.size for a in arrays if a.ndim), default=1)
    with np.errstate(over="ignore"):
        h = np.full(length, SPARK_XXHASH_SEED, dtype=np.uint64)
        for array in arrays:
            values = np.broadcast_to(array, (length,)).view(np.uint64)
            h = _hash_long(values, h)
    return h.view(np.int64)


def unit_keys(units: pd.Series | np.ndarray, salt: BoundingSalt) -> tuple[np.ndarray, np.ndarray]:
    """(unit codes for grouping, 60-bit unit keys) for a column of non-null units.

    The key is the first 15 hex digits of sha256(salt + "|" + str(unit)), which
    Spark computes as ``conv(substring(sha2(...), 1, 15), 16, 10)``. Hashing runs
    once per distinct unit.
    """
    codes, uniques = pd.factorize(np.asarray(units), sort=False)
    prefix = salt.unit_salt + "|"
    sha256 = hashlib.sha256
    # The first 15 hex digits of the digest are its first 60 bits: the top of its first
    # 8 bytes, read for all units at once as big-endian words (no per-unit int to build).
    digests = b"".join(
        [sha256((prefix + str(u)).encode("utf-8")).digest()[:8] for u in uniques.tolist()]
    )
    words = np.frombuffer(digests, dtype=">u8")
    keys = (words >> np.uint64(4)).astype(np.int64)
    return codes.astype(np.int64), keys[codes]


@dataclass(frozen=True)
class BoundingResult:
    """Kept (unit, cell) pairs aggregated, and what bounding removed."""

    cells: np.ndarray  # cell index of each kept (unit, cell) pair
    counts: np.ndarray  # rows kept in that pair
    sums: np.ndarray | None  # sum of kept value units in that pair
    rows_removed_max_per_cell: int
    rows_removed_max_cells: int
    pairs_removed_max_cells: int


def _group_starts(*sorted_keys: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows that start a new group in lexicographically sorted keys."""
    n = sorted_keys[0].size
    starts = np.zeros(n, dtype=bool)
    if n:
        starts[0] = True
        for key in sorted_keys:
            starts[1:] |= key[1:] != key[:-1]
    return starts


def _rank_within_groups(starts: np.ndarray) -> np.ndarray:
    index = np.arange(starts.size)
    group_first = np.maximum.accumulate(np.where(starts, index, 0))
    return index - group_first


def bound_contributions(
    unit_codes: np.ndarray,
    unit_key: np.ndarray,
    cells: np.ndarray,
    value_units: np.ndarray | None,
    max_cells: int,
    max_per_cell: int,
    salt: BoundingSalt,
) -> BoundingResult:
    """Apply the keyed bounding rule of this module to valid rows (numpy, vectorized).

    The pair sums are exact int64: each adds at most ``max_per_cell`` kept values
    of at most ``B`` units, and `dp_pipeline.query.spec.QuerySpec` refuses
    ``max_per_cell * B > 2**62`` before any data is read, so no partial sum can wrap.
    """
    order = np.lexsort((cells, unit_codes))
    s_units, s_cells = unit_codes[order], cells[order]
    starts = _group_starts(s_units, s_cells)
    rank_in_pair = _rank_within_groups(starts)
    if value_units is not None and rank_in_pair.size and rank_in_pair.max() >= max_per_cell:
        # Some pair has rows to drop: rank its rows by the keyed rule (which rows of a
        # pair are summed matters; when every row is kept, their order does not).
        row_rank = spark_xxhash64(salt.seed_rows, unit_key, cells, value_units)
        order = np.lexsort((value_units, row_rank, cells, unit_codes))
        s_units, s_cells = unit_codes[order], cells[order]
    keep_row = rank_in_pair < max_per_cell  # the same (unit, cell) groups in either order
    group_id = np.cumsum(starts) - 1
    n_groups = int(starts.sum())
    n_all = np.bincount(group_id, minlength=n_groups).astype(np.int64)
    n_kept = np.bincount(group_id, weights=keep_row, minlength=n_groups).astype(np.int64)
    sums = None
    if value_units is not None:
        largest = max(int(value_units.max()), -int(value_units.min())) if value_units.size else 0
        if max_per_cell * largest >= 2**63:
            raise InternalError(
                f"max_per_cell {max_per_cell} x {largest} units could wrap an int64 pair sum; "
                f"QuerySpec refuses such bounds"
            )
        kept_values = np.where(keep_row, value_units[order], 0)
        first = np.flatnonzero(starts)
        sums = np.add.reduceat(kept_values, first) if first.size else np.zeros(0, np.int64)
    pair_unit = s_units[starts]
    pair_cell = s_cells[starts]
    keep_pair = _keep_pairs(pair_unit, pair_cell, unit_key[order][starts], max_cells, salt)
    return BoundingResult(
        cells=pair_cell[keep_pair],
        counts=n_kept[keep_pair],
        sums=None if sums is None else sums[keep_pair],
        rows_removed_max_per_cell=int((n_all - n_kept)[keep_pair].sum()),
        rows_removed_max_cells=int(n_all[~keep_pair].sum()),
        pairs_removed_max_cells=int((~keep_pair).sum()),
    )


@dataclass(frozen=True)
class RowBounding:
    """Which input rows the keyed rule keeps (`bound_rows`), and what it removed."""

    keep: np.ndarray  # bool, one per input row
    rows_removed_max_per_cell: int
    rows_removed_max_cells: int
    pairs_removed_max_cells: int


def bound_rows(
    unit_codes: np.ndarray,
    unit_key: np.ndarray,
    cells: np.ndarray,
    values: np.ndarray,
    max_cells: int,
    max_per_cell: int,
    salt: BoundingSalt,
) -> RowBounding:
    """The keyed bounding rule of this module (steps 1-3), as a mask of the kept rows.

    Guarantee: every unit keeps at most ``max_per_cell`` rows in each of at most
    ``max_cells`` cells, chosen from its own rows only: rows of a (unit, cell) by
    ``(xxhash64(seed_rows, unit_key, cell, value), value)``, pairs by
    ``(xxhash64(seed_cells, unit_key, cell), cell)``, exactly as `bound_contributions`
    ranks a sum's rows (``values`` in the place of its value units), and as the Spark SQL
    dialect (`dp_pipeline.engines.spark_sql.bounding.kept_rows`) does. Rows tied on
    (unit, cell, value) are interchangeable, so the kept multiset of (cell, value) is the
    same on every engine.
    """
    order = np.lexsort((cells, unit_codes))
    s_units, s_cells = unit_codes[order], cells[order]
    starts = _group_starts(s_units, s_cells)
    rank_in_pair = _rank_within_groups(starts)
    group_id = np.cumsum(starts) - 1
    if rank_in_pair.size and rank_in_pair.max() >= max_per_cell:
        # Rank the rows of the pairs that have rows to drop by the keyed rule, in place:
        # each such pair's rows are contiguous in ``order`` and stay in their places, so
        # ``starts`` still holds (the other pairs keep all of their rows in any order).
        crowded = np.flatnonzero(np.bincount(group_id)[group_id] > max_per_cell)
        rows = order[crowded]
        row_rank = spark_xxhash64(salt.seed_rows, unit_key[rows], cells[rows], values[rows])
        order[crowded] = rows[np.lexsort((values[rows], row_rank, group_id[crowded]))]
    keep_row = rank_in_pair < max_per_cell
    keep_pair = _keep_pairs(
        s_units[starts], s_cells[starts], unit_key[order][starts], max_cells, salt
    )
    in_kept_pair = keep_pair[group_id]
    keep = np.zeros(order.size, dtype=bool)
    keep[order] = keep_row & in_kept_pair
    return RowBounding(
        keep=keep,
        rows_removed_max_per_cell=int((~keep_row & in_kept_pair).sum()),
        rows_removed_max_cells=int((~in_kept_pair).sum()),
        pairs_removed_max_cells=int((~keep_pair).sum()),
    )


def _keep_pairs(
    pair_unit: np.ndarray, pair_cell: np.ndarray, pair_key: np.ndarray, max_cells: int, salt
) -> np.ndarray:
    """Mask of the (unit, cell) pairs kept: each unit's first ``max_cells`` by
    ``(cell_rank, cell)``. Pairs come sorted by unit, then cell."""
    unit_starts = _group_starts(pair_unit)
    first = np.flatnonzero(unit_starts)
    pairs_per_unit = np.diff(np.append(first, pair_unit.size))
    if not pairs_per_unit.size or pairs_per_unit.max() <= max_cells:
        return np.ones(pair_unit.size, dtype=bool)  # no unit has a pair to drop
    cell_rank = spark_xxhash64(salt.seed_cells, pair_key, pair_cell)
    if max_cells == 1:
        return first_least_per_group(cell_rank, unit_starts)
    pair_order = np.lexsort((pair_cell, cell_rank, pair_unit))
    keep = np.zeros(pair_unit.size, dtype=bool)
    keep[pair_order] = _rank_within_groups(_group_starts(pair_unit[pair_order])) < max_cells
    return keep


def first_least_per_group(rank: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Mask of each group's first element of least ``rank`` (groups contiguous, ``starts``
    marking their first elements): the one pair a unit keeps at ``max_cells = 1``, its
    pairs being in cell order, so rank ties go to the least cell. No sort of the ranks."""
    first = np.flatnonzero(starts)
    group_id = np.cumsum(starts) - 1
    at_minimum = rank == np.minimum.reduceat(rank, first)[group_id]
    position = np.where(at_minimum, np.arange(rank.size), rank.size)
    keep = np.zeros(rank.size, dtype=bool)
    keep[np.minimum.reduceat(position, first)] = True
    return keep


def bound_shared_rows(
    unit_codes: np.ndarray,
    unit_key: np.ndarray,
    cells: np.ndarray,
    row_cells: np.ndarray,
    salt: BoundingSalt,
    values: np.ndarray | None = None,
) -> BoundingResult:
    """The shared-rows rule of this module (one row per unit), vectorized.

    ``unit_key`` comes from the group's salt (`BoundingSalt.derive_shared`);
    ``row_cells`` is each row's cell index over the union of the group's keys
    (−1 if undefined). Every table of the group given the same rows keeps, for
    each unit, the cell of the same row. A sum passes its rows' clamped
    ``values`` (int64 units): the kept row's value is its unit's sum, rows
    tied on rank, union cell and cell being taken in value order (the least),
    so every sum of the group over the same column sums the same row.
    """
    rank = spark_xxhash64(salt.seed_rows, unit_key, row_cells)
    undefined = row_cells < 0
    tiebreak = () if values is None else (values,)
    order = np.lexsort((*tiebreak, cells, row_cells, rank, undefined, unit_codes))
    s_units, s_cells = unit_codes[order], cells[order]
    unit_starts = _group_starts(s_units)
    best_cell = s_cells[unit_starts]
    unit_id = np.cumsum(unit_starts) - 1
    in_best = s_cells == best_cell[unit_id]
    rows_in_best = np.bincount(unit_id, weights=in_best, minlength=best_cell.size)
    pair_order = np.lexsort((s_cells, s_units))
    pairs = int(_group_starts(s_units[pair_order], s_cells[pair_order]).sum())
    return BoundingResult(
        cells=best_cell,
        counts=np.ones(best_cell.size, dtype=np.int64),
        sums=None if values is None else values[order][unit_starts],
        rows_removed_max_per_cell=int(rows_in_best.sum()) - best_cell.size,
        rows_removed_max_cells=int(cells.size - rows_in_best.sum()),
        pairs_removed_max_cells=pairs - best_cell.size,
    )
