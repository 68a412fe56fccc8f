"""Key selection at scale: each key's uniform u from its own ChaCha20 keystream, keyed by
a keyed BLAKE2b of the key's value, decided against π(c) in a vectorized first round;
the decisions must be exactly [u < π(c)] for the documented u."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from dp_pipeline.keyselect import plan_selection
from dp_pipeline.keyselect.decisions import release_decisions, release_probability
from dp_pipeline.keyselect.key_streams import SelectionKey, key_label, key_labels
from dp_pipeline.keyselect.weighted import plan_weighted_selection
from dp_pipeline.randomness import encode_labels

NOISE_SECRET = bytes(range(100, 132))
SELECTION = SelectionKey(NOISE_SECRET, bytes(range(140, 172)))
PLANS = {
    "laplace": plan_selection(noise="laplace", epsilon=1, delta="1/1000000", max_cells=3),
    "gaussian": plan_selection(noise="gaussian", epsilon=1, delta="1/1000000", max_cells=2),
    "truncated": plan_selection(noise="laplace", epsilon="1/2", delta="1/100000", max_cells=1),
    "weighted": plan_weighted_selection(
        noise="gaussian", epsilon=1, delta="1/1000000", max_cells=3
    ),
}
U_BITS = 512


def documented_u(value) -> int:
    """The first U_BITS bits of u for ``value``, computed from the documented formula."""
    stream_key = hashlib.blake2b(
        encode_labels((value,)), key=NOISE_SECRET, person=b"dpkeysel/u/v3", digest_size=32
    ).digest()
    cipher = Cipher(algorithms.ChaCha20(stream_key, bytes(16)), mode=None)
    return int.from_bytes(cipher.encryptor().update(bytes(U_BITS // 8)), "big")


@pytest.mark.parametrize("name", sorted(PLANS))
def test_each_decision_is_u_below_pi_for_the_documented_u(name):
    plan = PLANS[name]
    keys = np.array(
        [f"site-{i}" for i in range(300)] + list(range(-150, 150)) + [2**70, "é"], dtype=object
    )
    counts = np.arange(keys.size) % (plan.threshold + 3) + 1
    counts[:5] = 10**6  # counts far above the threshold share one first-round bracket
    brackets = {}
    expected = []
    for value, count in zip(keys.tolist(), counts.tolist(), strict=True):
        if count not in brackets:
            low, high = release_probability(plan, count, U_BITS + 64)
            brackets[count] = ((low * 2**U_BITS).__floor__(), (high * 2**U_BITS).__ceil__())
        low, high = brackets[count]
        u = documented_u(value)
        assert u + 1 <= low or u >= high  # decided at U_BITS bits
        expected.append(u + 1 <= low)
    got = release_decisions(plan, SELECTION, keys, counts)
    assert got.tolist() == expected
    assert 0 < sum(expected) < keys.size


def test_key_labels_are_the_injective_label_encoding_of_each_value():
    values = ["", "a", "é€", np.str_("np"), 0, -7, 2**80, np.int64(-3), np.int32(12)]
    assert key_labels(values) == [key_label(v) for v in values]
    assert key_labels(values) == [encode_labels((v,)) for v in values]
    assert key_labels(["1"]) != key_labels([1])


def test_value_hashes_are_keyed_blake2b_of_the_label():
    hashes = SELECTION.value_hashes(["a", 5])
    for value, got in zip(["a", 5], hashes.tolist(), strict=True):
        digest = hashlib.blake2b(
            encode_labels((value,)),
            key=bytes(range(140, 172)),
            person=b"dpkeysel/h/v2",
            digest_size=8,
        ).digest()
        assert got == int.from_bytes(digest, "big", signed=True)


def test_the_bits_of_u_never_show_in_a_repr():
    bits = SELECTION.uniform("a")
    assert repr(bits) == "UniformBits(<keyed>)"
    assert bits.read(40)[:32].hex() not in repr(bits)
