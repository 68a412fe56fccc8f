"""Keyed streams: determinism, domain separation, exact uniform draws, secrecy of the key."""

from __future__ import annotations

import logging
import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from dp_pipeline.noise.uniform import (
    bernoulli_ratio,
    uniform_below,
    uniform_below_each,
    uniform_below_int,
)
from dp_pipeline.randomness import (
    MasterKey,
    SecureStream,
    derive_stream,
    derive_stream_key,
    encode_labels,
)

KEY_HEX = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"


@pytest.fixture
def key() -> MasterKey:
    return MasterKey.from_hex(KEY_HEX)


def test_same_key_and_labels_give_identical_streams(key):
    a = derive_stream(key, "release-1", "table", 3).random_uint64(1000)
    b = derive_stream(MasterKey.from_hex(KEY_HEX), "release-1", "table", 3).random_uint64(1000)
    assert np.array_equal(a, b)


def test_chunking_does_not_change_the_stream(key):
    whole = derive_stream(key, "x").random_bytes(200_000)
    stream = derive_stream(key, "x")
    parts = b"".join(stream.random_bytes(n) for n in (1, 7, 64, 65_535, 70_000, 64_333))
    assert parts == whole[: len(parts)]


@pytest.mark.parametrize(
    "labels",
    [("release-1", "table", 4), ("release-2", "table", 3), ("release-1", "other", 3), ("r",)],
)
def test_different_labels_give_different_streams(key, labels):
    base = derive_stream(key, "release-1", "table", 3).random_bytes(64)
    assert derive_stream(key, *labels).random_bytes(64) != base


def test_different_keys_give_different_streams(key):
    other = MasterKey.from_hex("ff" * 32)
    assert derive_stream(key, "a").random_bytes(64) != derive_stream(other, "a").random_bytes(64)


def test_label_types_are_separated(key):
    assert encode_labels(("1",)) != encode_labels((1,))
    assert encode_labels(("a", "bc")) != encode_labels(("ab", "c"))
    assert derive_stream(key, "1").random_bytes(32) != derive_stream(key, 1).random_bytes(32)


label = st.one_of(st.text(max_size=6), st.integers(-1000, 1000), st.binary(max_size=6))


@given(st.lists(label, min_size=1, max_size=4), st.lists(label, min_size=1, max_size=4))
def test_label_encoding_is_injective(a, b):
    def canonical(labels):
        return [(type(x).__name__, x) for x in labels]

    if canonical(a) != canonical(b):
        assert encode_labels(tuple(a)) != encode_labels(tuple(b))
    else:
        assert encode_labels(tuple(a)) == encode_labels(tuple(b))


def test_bool_label_is_refused(key):
    with pytest.raises(TypeError, match="bool"):
        derive_stream(key, True)


def test_no_labels_is_refused(key):
    with pytest.raises(ValueError, match="at least one label"):
        derive_stream(key)


def test_key_never_shown(key, caplog, tmp_path):
    secret_fragments = [KEY_HEX, KEY_HEX[:16], KEY_HEX.upper()[:16]]
    raw = bytes.fromhex(KEY_HEX)
    shown = [repr(key), str(key), f"{key}", repr(derive_stream(key, "a"))]
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("key is %s", key)
    shown.append(caplog.text)
    for text in shown:
        for fragment in secret_fragments:
            assert fragment.lower() not in text.lower()
        assert repr(raw) not in text
    assert key.fingerprint in repr(key)


@pytest.mark.parametrize(
    "bad, exc, message",
    [
        ("zz" * 32, ValueError, "non-hexadecimal"),
        ("00" * 31, ValueError, "64 hexadecimal digits"),
        (b"\x00" * 32, TypeError, "must be a str"),
    ],
)
def test_bad_hex_key_errors_do_not_echo_input(bad, exc, message):
    with pytest.raises(exc, match=message) as info:
        MasterKey.from_hex(bad)
    assert "zz" * 4 not in str(info.value)


def test_wrong_length_bytes_key():
    with pytest.raises(ValueError, match="exactly 32 bytes, got 31"):
        MasterKey(b"\x01" * 31)


def test_key_from_file_and_env(tmp_path, monkeypatch, key):
    hex_file = tmp_path / "key.hex"
    hex_file.write_text(KEY_HEX + "\n")
    raw_file = tmp_path / "key.bin"
    raw_file.write_bytes(bytes.fromhex(KEY_HEX))
    assert MasterKey.from_file(hex_file) == key
    assert MasterKey.from_file(raw_file) == key
    monkeypatch.setenv("DP_TEST_KEY", KEY_HEX)
    assert MasterKey.from_env("DP_TEST_KEY") == key
    with pytest.raises(KeyError, match="DP_MISSING_KEY"):
        MasterKey.from_env("DP_MISSING_KEY")
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    with pytest.raises(ValueError, match="neither 32 raw bytes") as info:
        MasterKey.from_file(bad)
    assert "not a key" not in str(info.value)


def test_fresh_keys_differ():
    assert MasterKey() != MasterKey()


def test_master_key_refuses_to_be_pickled(key):
    with pytest.raises(TypeError, match="never pickled or shipped to Spark executors"):
        pickle.dumps(key)


def test_stream_key_pickles_and_opens_the_same_stream(key):
    stream_key = derive_stream_key(key, "r", "t", 0)
    assert "secret" in repr(stream_key)
    shipped = pickle.loads(pickle.dumps(stream_key))
    assert shipped.stream().random_bytes(64) == derive_stream(key, "r", "t", 0).random_bytes(64)
    assert key._key not in pickle.dumps(stream_key)


@pytest.mark.parametrize("bound", [1, 2, 3, 7, 10, 1000, 2**32 + 15, 2**63])
def test_uniform_below_range(key, bound):
    draws = uniform_below(derive_stream(key, "u", bound), bound, 20_000)
    assert draws.dtype == np.int64
    assert int(np.min(draws)) >= 0 and int(np.max(draws)) <= bound - 1


def test_uniform_below_is_uniform_chi_square(key):
    # 7 cells, 700k draws: a 1% relative distortion of one cell shifts chi-square
    # by ~7 on 6 dof; the test threshold is p < 1e-4 (false-positive rate 1e-4).
    draws = uniform_below_each(derive_stream(key, "chi"), np.full(700_000, 7))
    counts = np.bincount(draws, minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-4


def test_uniform_below_per_element_bounds(key):
    bounds = np.array([1, 2, 3, 5, 1000] * 20_000)
    draws = uniform_below_each(derive_stream(key, "pe"), bounds)
    assert np.all(draws < bounds) and np.all(draws >= 0)
    fives = draws[bounds == 5]
    assert stats.chisquare(np.bincount(fives, minlength=5)).pvalue > 1e-4


def test_uniform_below_big_bounds_are_exact_ints(key):
    bound = 10**40 + 7
    draws = uniform_below_each(derive_stream(key, "big"), np.array([bound] * 2000, dtype=object))
    assert draws.dtype == object
    assert all(0 <= int(x) < bound for x in draws)
    # The top decile is hit with probability ~1/10 per draw.
    top = sum(int(x) >= bound * 9 // 10 for x in draws)
    assert 130 < top < 270
    scalar = uniform_below_int(derive_stream(key, "one"), bound)
    assert 0 <= scalar < bound


def test_bernoulli_rational(key):
    n = 400_000
    hits = int(bernoulli_ratio(derive_stream(key, "b"), np.full(n, 3), 7).sum())
    assert stats.binomtest(hits, n, 3 / 7).pvalue > 1e-4


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (
            lambda s: uniform_below_each(s, np.zeros(3, dtype=int)),
            ValueError,
            "bounds must all be >= 1, got minimum 0",
        ),
        (lambda s: uniform_below_each(s, np.array([1.5])), TypeError, "bounds must be integers"),
        (lambda s: uniform_below_each(s, True), TypeError, "got bool"),
        (lambda s: uniform_below_int(s, 0), ValueError, "bound must be >= 1, got 0"),
    ],
)
def test_bad_uniform_arguments(key, call, exc, message):
    with pytest.raises(exc, match=message):
        call(derive_stream(key, "bad"))


def test_stream_rejects_bad_key():
    with pytest.raises(ValueError, match="32 bytes"):
        SecureStream(b"short")


@pytest.mark.parametrize(
    "raw, rule",
    [
        (bytes(32), "fewer than 16 distinct byte values"),
        (b"\x3c" * 32, "fewer than 16 distinct byte values"),
        (bytes(range(32)), "successive byte differences"),
        (bytes(range(0, 256, 8)), "successive byte differences"),
        # 16 distinct bytes whose 16 cyclic steps are distinct (1..15 and 136), twice.
        (bytes(i * (i + 1) // 2 for i in range(16)) * 2, "repeats a pattern of 16 bytes"),
    ],
)
def test_weak_keys_are_named_by_their_rule(raw, rule):
    weakness = MasterKey(raw).weakness()
    assert weakness is not None and rule in weakness
    assert raw.hex() not in weakness


def test_a_random_key_is_weak_with_probability_below_1e_15():
    # Exact: P(32 uniform bytes take at most 15 distinct values) = sum over k <= 15 of
    # S(32, k) * 256!/(256 - k)! / 256**32 (S: Stirling numbers of the second kind); the
    # same for the 31 steps; a period p <= 16 has probability 256**-(32 - p).
    def at_most_15_distinct(n: int) -> Fraction:
        stirling = [[0] * 16 for _ in range(n + 1)]
        stirling[0][0] = 1
        for i in range(1, n + 1):
            for k in range(1, 16):
                stirling[i][k] = k * stirling[i - 1][k] + stirling[i - 1][k - 1]
        return sum(
            (Fraction(stirling[n][k] * math.perm(256, k), 256**n) for k in range(1, 16)),
            Fraction(0),
        )

    periods = sum(Fraction(1, 256 ** (32 - p)) for p in range(1, 17))
    total = at_most_15_distinct(32) + at_most_15_distinct(31) + periods
    assert total < Fraction(1, 10**15)
    assert all(MasterKey().weakness() is None for _ in range(2000))
    assert MasterKey.generate().weakness() is None
