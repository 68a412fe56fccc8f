"""The key selection mechanism: exact release probabilities, keyed per-key streams,
bounding that never looks at other units, and one-line errors for bad key columns."""

from __future__ import annotations

import dataclasses
import pickle
from fractions import Fraction

import mpmath as mp
import numpy as np
import pandas as pd
import pytest

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.errors import DPError, DPTypeError, DPValueError
from dp_pipeline.keyselect import decisions
from dp_pipeline.keyselect.counts import distinct_unit_counts
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.mechanism import (
    PartitionSelector,
    release_decisions,
    select_keys,
    select_partition,
)
from dp_pipeline.keyselect.partitions import PairBounder
from dp_pipeline.keyselect.plan import plan_selection
from dp_pipeline.randomness import MasterKey

MASTER = MasterKey(bytes(range(7, 39)))
SELECTION = SelectionKey.derive(MASTER, "release", "table")
SALT = BoundingSalt.derive(MASTER, "release", "table")


def mpf(value) -> mp.mpf:
    value = Fraction(value)
    return mp.mpf(value.numerator) / value.denominator


def release_probability(plan, count: int) -> mp.mpf:
    """P[count + Z >= τ] from the noise pmf, written from the definitions (mpmath, at the
    caller's precision)."""
    if plan.policy == "optimal_per_key":  # the recursion of Desfontaines et al. (2022)
        growth, per_key, pi = mp.exp(1 / mpf(plan.scale)), mpf(plan.single_unit_release), 0
        for _ in range(count):
            pi = min(growth * pi + per_key, 1 - (1 - pi - per_key) / growth, mp.mpf(1))
        return pi
    if plan.noise == "gaussian":
        s = mpf(plan.sigma2)
        width = int(mp.sqrt(s) * 30) + 10
        weights = {z: mp.exp(-mp.mpf(z * z) / (2 * s)) for z in range(-width, width + 1)}
    else:
        alpha = mp.exp(-1 / mpf(plan.scale))
        width = plan.truncation if plan.truncation is not None else int(mpf(plan.scale) * 200)
        weights = {z: alpha ** abs(z) for z in range(-width, width + 1)}
    total = mp.fsum(weights.values())
    return mp.fsum(w for z, w in weights.items() if count + z >= plan.threshold) / total


# ε and δ chosen so that π(1..5) lie between about 1e-3 and 0.7: a test of the sampler
# that a wrong scale or threshold fails.
PLANS = {
    "truncated_geometric": plan_selection(
        noise="laplace", epsilon="1/2", delta="1/100", max_cells=1, policy="truncated_geometric"
    ),
    "laplace": plan_selection(
        noise="laplace", epsilon=1, delta="1/5", max_cells=2, policy="threshold"
    ),
    "optimal_per_key": plan_selection(
        noise="laplace", epsilon=2, delta="1/50", max_cells=2, policy="optimal_per_key"
    ),
    "gaussian": plan_selection(noise="gaussian", epsilon=1, delta="1/100", max_cells=1),
}
KEYS_PER_COUNT = 3000


@pytest.mark.parametrize("name", sorted(PLANS))
def test_release_frequency_for_counts_one_to_five_matches_the_exact_pmf(name):
    """Each count n = 1..5 on 3000 keys (distinct values, so independent streams): the
    released share is within 4.5 binomial standard deviations (+1/N) of π(n) computed
    from the pmf. False-positive rate below 1e-5 per check (normal approximation)."""
    plan = PLANS[name]
    # Power: the same check against a plan whose threshold is one lower or one higher
    # must fail for some n (the test tells the true law from its neighbours).
    wrong = {
        shift: dataclasses.replace(plan, threshold=plan.threshold + shift) for shift in (-1, 1)
    }
    if plan.policy == "optimal_per_key":  # its π reads δ/m, not the threshold
        wrong = {
            shift: dataclasses.replace(
                plan, single_unit_release=plan.single_unit_release * Fraction(2) ** shift
            )
            for shift in (-1, 1)
        }
    rejected = {shift: False for shift in wrong}
    for count in range(1, 6):
        keys = np.array([f"{name}-{count}-{i}" for i in range(KEYS_PER_COUNT)], dtype=object)
        released = release_decisions(plan, SELECTION, keys, np.full(keys.size, count))
        exact = float(release_probability(plan, count))
        spread = 4.5 * (exact * (1 - exact) / KEYS_PER_COUNT) ** 0.5 + 1 / KEYS_PER_COUNT
        assert abs(released.mean() - exact) <= spread, (count, released.mean(), exact)
        for shift, other in wrong.items():
            rejected[shift] |= abs(released.mean() - float(release_probability(other, count))) > (
                spread
            )
    assert all(rejected.values())


@pytest.mark.parametrize("name", sorted(PLANS))
def test_a_key_held_by_one_unit_is_released_with_at_most_the_reported_share(name):
    plan = PLANS[name]
    with mp.workdps(80):
        exact = release_probability(plan, 1)
        assert exact <= mpf(plan.single_unit_release) <= exact * (1 + mp.mpf("1e-12"))
    assert plan.single_unit_release <= plan.delta_upper <= plan.delta


def test_a_truncated_geometric_key_far_above_the_threshold_is_always_released():
    plan = PLANS["truncated_geometric"]
    certain = 2 * plan.truncation + 1
    assert release_probability(plan, certain) == 1
    keys = np.array([f"heavy-{i}" for i in range(500)], dtype=object)
    assert release_decisions(plan, SELECTION, keys, np.full(500, certain)).all()
    assert release_probability(plan, certain - 1) < 1


def test_a_keys_decision_depends_on_its_value_not_on_the_other_keys():
    plan = PLANS["laplace"]
    keys = np.array([f"k{i}" for i in range(400)], dtype=object)
    counts = np.arange(400) % 9 + 1
    alone = release_decisions(plan, SELECTION, keys, counts)
    extra = np.array([f"x{i}" for i in range(300)], dtype=object)
    order = np.random.default_rng(5).permutation(700)
    mixed_keys = np.concatenate([keys, extra])[order]
    mixed_counts = np.concatenate([counts, np.full(300, 3)])[order]
    together = release_decisions(plan, SELECTION, mixed_keys, mixed_counts)
    position = {k: i for i, k in enumerate(mixed_keys)}
    assert [together[position[k]] for k in keys] == alone.tolist()
    # Another table's key material gives other draws.
    other = SelectionKey.derive(MASTER, "release", "other table")
    assert release_decisions(plan, other, keys, counts).tolist() != alone.tolist()


def frame(rows: list[tuple[object, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["unit", "key"])


def test_bounding_keeps_max_cells_keys_per_unit_chosen_by_its_own_rows_only():
    heavy = [(1, f"k{i}") for i in range(10)]
    counts = distinct_unit_counts(
        frame(heavy),
        key="key",
        privacy_unit="unit",
        max_cells=3,
        salt=SALT,
        selection_key=SELECTION,
    )
    kept = set(counts.keys.tolist())
    assert len(kept) == 3 and counts.counts.tolist() == [1, 1, 1]
    assert counts.pairs_removed_max_cells == 7
    # Other units (with other keys and some of the same) do not change unit 1's choice.
    others = [(u, f"k{(u * 7) % 13}") for u in range(2, 60)] + [(u, "z") for u in range(2, 9)]
    both = distinct_unit_counts(
        frame(heavy + others),
        key="key",
        privacy_unit="unit",
        max_cells=3,
        salt=SALT,
        selection_key=SELECTION,
    )
    alone = distinct_unit_counts(
        frame(others),
        key="key",
        privacy_unit="unit",
        max_cells=3,
        salt=SALT,
        selection_key=SELECTION,
    )
    with_unit = dict(zip(both.keys.tolist(), both.counts.tolist(), strict=True))
    without = dict(zip(alone.keys.tolist(), alone.counts.tolist(), strict=True))
    added = {k: with_unit[k] - without.get(k, 0) for k in with_unit}
    assert {k for k, v in added.items() if v} == kept
    # Keys every unit dropped are not candidates (count 0 is never noised).
    assert set(with_unit) == set(without) | kept


def test_duplicate_rows_count_a_unit_once_per_key():
    rows = [(1, "a")] * 5 + [(2, "a"), (2, "b"), (3, "b")] * 2
    counts = distinct_unit_counts(
        frame(rows),
        key="key",
        privacy_unit="unit",
        max_cells=2,
        salt=SALT,
        selection_key=SELECTION,
    )
    assert counts.keys.tolist() == ["a", "b"]
    assert counts.counts.tolist() == [2, 2]


def test_pandas_and_partition_function_give_the_same_keys_whatever_the_batches():
    rng = np.random.default_rng(11)
    df = pd.DataFrame({"unit": rng.integers(0, 2000, 6000), "key": rng.zipf(1.6, 6000) % 500})
    plan = plan_selection(noise="gaussian", epsilon=1, delta="1/100000", max_cells=2)
    selected = select_keys(
        df, key="key", privacy_unit="unit", plan=plan, selection_key=SELECTION, salt=SALT
    )
    assert selected.threshold == plan.threshold and selected.keys.size > 5
    counts = distinct_unit_counts(
        df, key="key", privacy_unit="unit", max_cells=2, salt=SALT, selection_key=SELECTION
    )
    table = pd.DataFrame({"key": counts.keys, "n": counts.counts}).sample(frac=1, random_state=3)
    selector = pickle.loads(pickle.dumps(PartitionSelector("key", "n", plan, SELECTION)))
    batches = [table.iloc[i : i + 37] for i in range(0, len(table), 37)]
    released = pd.concat(list(selector(iter(batches))))
    assert sorted(released["key"].tolist()) == selected.keys.tolist()
    zero = select_partition(
        pd.DataFrame({"key": ["a", "b"], "n": [0, -1]}),
        key_column="key",
        count_column="n",
        plan=plan,
        selection_key=SELECTION,
    )
    assert zero.empty


def test_integer_keys_and_string_keys_never_share_a_stream():
    plan = PLANS["gaussian"]
    ints = release_decisions(plan, SELECTION, np.arange(2000, dtype=object), np.full(2000, 5))
    strs = release_decisions(
        plan, SELECTION, np.array([str(i) for i in range(2000)], object), np.full(2000, 5)
    )
    assert ints.tolist() != strs.tolist()


def test_the_selection_key_never_shows_its_bytes():
    text = repr(SELECTION) + str(SELECTION)
    assert text == "SelectionKey(<secret>)" * 2
    assert bytes(range(7, 39)).hex() not in text


BAD_COLUMNS = [
    (
        [(1, "a"), (2, None)],
        "error",
        DPValueError,
        r"^column 'key': some rows have a null key \(on_invalid='error'",
    ),
    (
        [(1, "a"), (2, 5)],
        "error",
        DPValueError,
        r"^column 'key': some rows have a key that is not a string \(a column of mixed types\)",
    ),
    (
        [(1, 1.0), (2, 2.5)],
        "error",
        DPValueError,
        r"^column 'key': some rows have a key that is not an integer",
    ),
    (
        [(1, True), (2, False)],
        "drop",
        DPTypeError,
        r"^key column 'key' has dtype bool; key selection needs integer or string keys$",
    ),
    (
        [(None, "a"), ("u2", "b")],
        "error",
        DPValueError,
        r"^column 'unit': some rows have a null privacy unit",
    ),
]


@pytest.mark.parametrize(("rows", "on_invalid", "kind", "message"), BAD_COLUMNS)
def test_bad_key_columns_get_one_line_errors_that_quote_no_value(rows, on_invalid, kind, message):
    with pytest.raises(kind, match=message) as caught:
        distinct_unit_counts(
            frame(rows),
            key="key",
            privacy_unit="unit",
            max_cells=1,
            salt=SALT,
            selection_key=SELECTION,
            on_invalid=on_invalid,
        )
    assert isinstance(caught.value, DPError)
    assert "\n" not in str(caught.value)
    assert "2.5" not in str(caught.value) and "'a'" not in str(caught.value)


def test_invalid_rows_are_dropped_and_counted_under_drop():
    rows = [("u1", "a"), ("u2", None), ("u3", 7), (None, "a"), ("u4", "a")]
    counts = distinct_unit_counts(
        frame(rows),
        key="key",
        privacy_unit="unit",
        max_cells=1,
        salt=SALT,
        selection_key=SELECTION,
    )
    assert counts.keys.tolist() == ["a"] and counts.counts.tolist() == [2]
    assert counts.rows_invalid == 3


def test_a_bad_on_invalid_and_a_missing_column_are_refused():
    with pytest.raises(DPValueError, match=r"^on_invalid='skip': must be 'drop' or 'error'$"):
        distinct_unit_counts(
            frame([(1, "a")]),
            key="key",
            privacy_unit="unit",
            max_cells=1,
            salt=SALT,
            selection_key=SELECTION,
            on_invalid="skip",
        )
    with pytest.raises(DPValueError, match=r"^key column 'merchant' is not in the DataFrame$"):
        distinct_unit_counts(
            frame([(1, "a")]),
            key="merchant",
            privacy_unit="unit",
            max_cells=1,
            salt=SALT,
            selection_key=SELECTION,
        )


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_lazy_comparison_gives_the_same_decisions_whatever_bits_it_starts_with(
    name, monkeypatch
):
    """The decision is [u < π(c)] for the key's uniform u: starting the comparison at 8
    bits (so that about one key in 30 needs the finer rounds) must decide every key as
    starting at 128 bits does (these keys take the finer rounds 4 to 12 times per plan)."""
    plan = PLANS[name]
    keys = np.array([f"lazy-{i}" for i in range(1500)], dtype=object)
    counts = np.arange(1500) % 6 + 1
    coarse_calls = []
    original = decisions.release_probability

    def counting(*args):
        coarse_calls.append(args[2])
        return original(*args)

    fine = release_decisions(plan, SELECTION, keys, counts)
    monkeypatch.setattr(decisions, "FIRST_BITS", 8)
    monkeypatch.setattr(decisions, "release_probability", counting)
    coarse = release_decisions(plan, SELECTION, keys, counts)
    assert coarse.tolist() == fine.tolist()
    assert sum(bits > 8 + 64 for bits in coarse_calls) >= 3  # the finer rounds ran


def test_counts_below_one_and_keys_of_other_types_are_refused_with_one_line_errors():
    with pytest.raises(
        DPValueError, match=r"^counts: every candidate key needs a count of at least 1"
    ):
        release_decisions(PLANS["laplace"], SELECTION, np.array(["a"], object), np.array([0]))
    with pytest.raises(DPTypeError, match=r"^a selected key must be a str or an int, got float$"):
        release_decisions(PLANS["laplace"], SELECTION, np.array([2.5], object), np.array([3]))
    with pytest.raises(DPTypeError, match=r"^a selected key must be a str or an int, got bool$"):
        SELECTION.value_hashes([True])


def test_bounding_per_partition_of_whole_units_sums_to_the_pandas_counts():
    rng = np.random.default_rng(21)
    df = pd.DataFrame({"unit": rng.integers(0, 500, 4000), "key": rng.zipf(1.5, 4000) % 300})
    counts = distinct_unit_counts(
        df, key="key", privacy_unit="unit", max_cells=3, salt=SALT, selection_key=SELECTION
    )
    bounder = pickle.loads(pickle.dumps(PairBounder("key", "unit", 3, SALT, SELECTION)))
    parts = [df[df["unit"] % 4 == r] for r in range(4)]  # whole units per partition
    pairs = pd.concat([next(bounder(iter([p.iloc[:50], p.iloc[50:]]))) for p in parts])
    summed = pairs.groupby("key")["weight"].sum()
    assert summed.index.tolist() == counts.keys.tolist()
    assert summed.tolist() == counts.counts.tolist()
