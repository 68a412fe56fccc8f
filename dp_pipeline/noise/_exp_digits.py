"""Exact binary digits of e^{-k} and an exact Geometric(e^{-1}) sampler built on them.

The count V of successes before the first failure of independent
Bernoulli(e^{-1}) trials (CKS 2020, Algorithm 2, the loop that draws V) has
P[V >= k] = e^{-k}. We draw it in one pass instead of a loop: read the
keystream as the binary expansion of a uniform real u in [0, 1) and set
V = #{k >= 1 : u < e^{-k}}, so P[V >= k] = P[u < e^{-k}] = e^{-k} exactly.

The comparison is lazy and exact. With the first ``b`` bits W of u and
T_k = floor(2^b e^{-k}) (computed with integers only, below):
W < T_k proves u < e^{-k}; W > T_k proves u > e^{-k}; only W == T_k
(probability about 2^-b per threshold) needs more bits, which a scalar
routine reads from the same stream. e^{-k} is irrational for k >= 1
(Lindemann), so 2^b e^{-k} is never an integer and every comparison ends.

The same V also gives Bernoulli(e^{-m}) for an integer m >= 0 as [V >= m]
(the product of m independent Bernoulli(e^{-1}) of CKS Algorithm 1).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dp_pipeline.errors import InternalError

__all__ = ["floor_scaled_exp_neg", "geometric_exp_neg_one"]

WORD_BITS = 64


@lru_cache(maxsize=4096)
def floor_scaled_exp_neg(k: int, bits: int) -> int:
    """floor(2^bits * e^{-k}) exactly, for integers k >= 1 and bits >= 0.

    e^{k} is bracketed by the partial sum S_N of its Taylor series and
    S_N + k^{N+1}/(N+1)! * (N+2)/(N+2-k) (geometric bound on the tail once
    N+2 > k); the answer is accepted when both ends of the bracket for
    2^bits / e^{k} have the same floor, and N grows otherwise.
    """
    if k < 1 or bits < 0:
        raise InternalError(f"floor_scaled_exp_neg needs k >= 1 and bits >= 0, got {k}, {bits}")
    terms = 2 * k + bits + 8
    while True:
        # N! * S_N = sum_i k^i * N!/i!, accumulated from i = N down to 0 (all integers).
        scaled_sum, factor = 0, 1
        for i in range(terms, -1, -1):
            scaled_sum += k**i * factor
            factor *= i if i else 1
        factorial = factor
        # N! * tail <= k^{N+1} (N+2) / ((N+1)(N+2-k)), rounded up.
        tail_num = k ** (terms + 1) * (terms + 2)
        tail_den = (terms + 1) * (terms + 2 - k)
        tail = -(-tail_num // tail_den)
        high = (factorial << bits) // scaled_sum
        low = (factorial << bits) // (scaled_sum + tail)
        if high == low:
            return low
        terms *= 2


@lru_cache(maxsize=16)
def _thresholds(bits: int) -> np.ndarray:
    """T_k = floor(2^bits e^{-k}) for k = 1 .. K while T_k > 0, ascending (T_K first)."""
    values = []
    k = 1
    while True:
        value = floor_scaled_exp_neg(k, bits)
        if value == 0:
            break
        values.append(value)
        k += 1
    values.reverse()
    array = np.array(values, dtype=np.uint64)
    if np.any(np.diff(array.astype(object)) <= 0):
        raise InternalError("thresholds floor(2^b e^{-k}) must be strictly decreasing in k")
    return array


def _resolve_tie(prefix: int, nbits: int, stream, bits: int) -> int:
    """V for a uniform u whose first ``nbits`` bits are ``prefix``, reading more bits on ties."""
    mask = (1 << bits) - 1
    count = 0
    k = 1
    while True:
        threshold = floor_scaled_exp_neg(k, nbits)
        while prefix == threshold:
            word = int(stream.random_uint64(1)[0]) >> (WORD_BITS - bits)
            prefix = (prefix << bits) | (word & mask)
            nbits += bits
            threshold = floor_scaled_exp_neg(k, nbits)
        if prefix > threshold:
            return count
        count += 1
        k += 1


def geometric_exp_neg_one(stream, size: int, *, bits: int = WORD_BITS) -> np.ndarray:
    """``size`` exact draws of V with P[V >= k] = e^{-k} (int64).

    ``bits`` (<= 64) is how many bits of u one pass compares; only tests lower
    it, to make the tie path frequent enough to test its exactness.
    """
    if not 1 <= bits <= WORD_BITS:
        raise InternalError(f"bits must be in [1, 64], got {bits}")
    thresholds = _thresholds(bits)
    words = stream.random_uint64(size)
    if bits < WORD_BITS:
        words = words >> np.uint64(WORD_BITS - bits)
    position = np.searchsorted(thresholds, words, side="left")
    values = (thresholds.size - position).astype(np.int64)
    # A tie is W == T_k for some k, or W == 0 (which equals T_k for every k past the table).
    clipped = np.minimum(position, thresholds.size - 1)
    ties = np.flatnonzero((thresholds[clipped] == words) | (words == 0))
    for index in ties:
        values[index] = _resolve_tie(int(words[index]), bits, stream, bits)
    return values


@lru_cache(maxsize=16)
def _thresholds_by_k(bits: int) -> np.ndarray:
    """[unused, T_1, T_2, ..., T_K, 0]: T_k by k, with 0 standing for every k > K."""
    ascending = _thresholds(bits)
    return np.concatenate([[np.uint64(0)], ascending[::-1], [np.uint64(0)]]).astype(np.uint64)


def bernoulli_exp_neg_integer(stream, wholes: np.ndarray, *, bits: int = WORD_BITS) -> np.ndarray:
    """Exact Bernoulli(e^{-m_i}) for int64 m_i >= 1: [u < e^{-m}] from one word per element.

    Equals [V >= m] for the V of `geometric_exp_neg_one` (the same lazy comparison,
    only at k = m), i.e. m independent Bernoulli(e^{-1}) all succeeding.
    """
    table = _thresholds_by_k(bits)
    words = stream.random_uint64(wholes.size)
    if bits < WORD_BITS:
        words = words >> np.uint64(WORD_BITS - bits)
    thresholds = table[np.minimum(wholes, table.size - 1)]
    result = words < thresholds
    for index in np.flatnonzero(words == thresholds):
        value = _resolve_tie(int(words[index]), bits, stream, bits)
        result[index] = value >= int(wholes[index])
    return result
