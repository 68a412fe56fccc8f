"""The numpy bounding rule against a literal transcription of its definition.

`dp_pipeline.engines.bounding` states the rule: 60-bit unit keys from sha256,
rows of a (unit, cell) ranked by ``xxhash64(seed_rows, unit_key, cell, value)``
then value, pairs of a unit ranked by ``xxhash64(seed_cells, unit_key, cell)``
then cell. The reference below applies it unit by unit with Python sorts; the
vectorized code (with its shortcuts when nothing is dropped) must agree exactly.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import numpy as np
import pytest

from dp_pipeline import MasterKey
from dp_pipeline.engines.bounding import (
    BoundingSalt,
    bound_contributions,
    bound_rows,
    first_least_per_group,
    spark_xxhash64,
    unit_keys,
)

SALT = BoundingSalt.derive(MasterKey(bytes(range(32))), "release", "table")


def reference_unit_key(unit) -> int:
    digest = hashlib.sha256(f"{SALT.unit_salt}|{unit}".encode()).hexdigest()
    return int(digest[:15], 16)


def reference_bounding(units, cells, values, max_cells, max_per_cell):
    """{cell: (kept rows, kept sum)} and the three removal counts, by the rule's definition."""
    rows = defaultdict(list)
    for unit, cell, value in zip(units, cells, values, strict=True):
        rows[unit, cell].append(value)
    kept = defaultdict(lambda: [0, 0])
    removed_per_cell = removed_cells = pairs_removed = 0
    by_unit = defaultdict(list)
    for unit, cell in rows:
        by_unit[unit].append(cell)
    for unit, unit_cells in by_unit.items():
        key = reference_unit_key(unit)

        def cell_rank(cell, key=key):
            return (int(spark_xxhash64(SALT.seed_cells, key, cell)[0]), cell)

        ranked = sorted(unit_cells, key=cell_rank)
        for cell in ranked[max_cells:]:
            pairs_removed += 1
            removed_cells += len(rows[unit, cell])
        for cell in ranked[:max_cells]:

            def row_rank(value, key=key, cell=cell):
                return (int(spark_xxhash64(SALT.seed_rows, key, cell, value)[0]), value)

            values_here = sorted(rows[unit, cell], key=row_rank)
            removed_per_cell += max(0, len(values_here) - max_per_cell)
            kept[cell][0] += min(len(values_here), max_per_cell)
            kept[cell][1] += sum(values_here[:max_per_cell])
    return dict(kept), (removed_per_cell, removed_cells, pairs_removed)


def vectorized_bounding(units, cells, values, max_cells, max_per_cell, with_values=True):
    codes, keys = unit_keys(np.asarray(units, dtype=object), SALT)
    result = bound_contributions(
        codes,
        keys,
        np.asarray(cells, dtype=np.int64),
        np.asarray(values, dtype=np.int64) if with_values else None,
        max_cells,
        max_per_cell,
        SALT,
    )
    kept = defaultdict(lambda: [0, 0])
    sums = result.sums if with_values else np.zeros(result.cells.size, dtype=np.int64)
    for cell, count, total in zip(result.cells, result.counts, sums, strict=True):
        kept[int(cell)][0] += int(count)
        kept[int(cell)][1] += int(total)
    removals = (
        result.rows_removed_max_per_cell,
        result.rows_removed_max_cells,
        result.pairs_removed_max_cells,
    )
    return dict(kept), removals


def test_unit_keys_are_the_first_15_hex_digits_of_the_salted_sha256():
    units = ["007", "a", "p-12", "émile", "42", "42"]
    codes, keys = unit_keys(np.array(units, dtype=object), SALT)
    assert keys.tolist() == [reference_unit_key(u) for u in units]
    assert codes[4] == codes[5] and len(set(codes.tolist())) == 5
    integer_codes, integer_keys = unit_keys(np.array([5, 70, 5], dtype=np.int64), SALT)
    assert integer_keys.tolist() == [reference_unit_key(u) for u in ("5", "70", "5")]
    assert integer_codes[0] == integer_codes[2]


@pytest.mark.parametrize(
    ("max_cells", "max_per_cell", "rows_per_unit"),
    [
        (1, 1, 6),  # one pair per unit: the least-rank shortcut
        (2, 1, 6),  # general pair ranking
        (3, 2, 6),  # rows dropped within pairs and pairs dropped
        (8, 8, 4),  # nothing dropped: both shortcuts
        (8, 1, 4),  # rows dropped within pairs only
        (1, 3, 1),  # one row per unit
    ],
)
def test_vectorized_bounding_equals_the_rule_row_by_row(max_cells, max_per_cell, rows_per_unit):
    rng = np.random.default_rng(max_cells * 100 + max_per_cell * 10 + rows_per_unit)  # test data
    n_units = 300
    units = [f"u{u}" for u in range(n_units) for _ in range(rng.integers(1, rows_per_unit + 1))]
    cells = rng.integers(0, 5, size=len(units)).tolist()
    values = rng.integers(-50, 50, size=len(units)).tolist()
    expected = reference_bounding(units, cells, values, max_cells, max_per_cell)
    assert vectorized_bounding(units, cells, values, max_cells, max_per_cell) == expected
    counts_only = vectorized_bounding(units, cells, values, max_cells, max_per_cell, False)
    assert {c: kept[0] for c, kept in counts_only[0].items()} == {
        c: kept[0] for c, kept in expected[0].items()
    }
    assert counts_only[1] == expected[1]


def test_the_one_pair_shortcut_breaks_rank_ties_by_the_least_cell_as_the_sort_does():
    # Equal 64-bit ranks cannot be forced through the hash: the shortcut is checked on
    # crafted ranks with ties against the general rule (sort by unit, rank, cell).
    rng = np.random.default_rng(3)  # test data only
    units = np.sort(rng.integers(0, 40, size=200))
    cells = rng.permutation(200)
    order = np.lexsort((cells, units))
    units, cells = units[order], cells[order]
    ranks = rng.integers(0, 3, size=200)  # many ties
    starts = np.r_[True, units[1:] != units[:-1]]
    by_rule = np.lexsort((cells, ranks, units))
    expected = np.zeros(200, dtype=bool)
    expected[by_rule[np.r_[True, units[by_rule][1:] != units[by_rule][:-1]]]] = True
    np.testing.assert_array_equal(first_least_per_group(ranks, starts), expected)


@pytest.mark.parametrize(
    ("max_cells", "max_per_cell", "rows_per_unit"),
    [(1, 1, 6), (2, 1, 6), (3, 2, 6), (8, 8, 4), (8, 1, 4), (1, 3, 1)],
)
def test_kept_rows_are_the_rows_the_rule_keeps(max_cells, max_per_cell, rows_per_unit):
    # A selection keeps the rows themselves (their values are scored one by one): the
    # same rows as the rule's definition, hence the same counts and sums per cell.
    rng = np.random.default_rng(max_cells * 100 + max_per_cell * 10 + rows_per_unit)  # test data
    units = [f"u{u}" for u in range(300) for _ in range(rng.integers(1, rows_per_unit + 1))]
    cells = rng.integers(0, 5, size=len(units))
    values = rng.integers(0, 40, size=len(units))
    expected, removals = reference_bounding(
        units, cells.tolist(), values.tolist(), max_cells, max_per_cell
    )
    codes, keys = unit_keys(np.asarray(units, dtype=object), SALT)
    result = bound_rows(codes, keys, cells, values, max_cells, max_per_cell, SALT)
    kept = {
        int(c): [
            int((cells[result.keep] == c).sum()),
            int(values[result.keep & (cells == c)].sum()),
        ]
        for c in np.unique(cells[result.keep])
    }
    assert kept == expected
    assert (
        result.rows_removed_max_per_cell,
        result.rows_removed_max_cells,
        result.pairs_removed_max_cells,
    ) == removals
    # Each unit keeps at most max_per_cell rows in at most max_cells cells.
    per_pair = defaultdict(int)
    for unit, cell in zip(np.asarray(units)[result.keep], cells[result.keep], strict=True):
        per_pair[unit, int(cell)] += 1
    assert max(per_pair.values()) <= max_per_cell
    per_unit = defaultdict(int)
    for unit, _ in per_pair:
        per_unit[unit] += 1
    assert max(per_unit.values()) <= max_cells
