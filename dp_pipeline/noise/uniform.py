"""Exact uniform integers and rational Bernoulli draws as numpy array programs: the one
implementation (the keyed stream of `dp_pipeline.randomness` only produces keystream words).

Two representations, chosen by the caller from bounds proven in advance:

* int64 arrays for bounds up to 2^63 (bounds up to 2^32 use Lemire's
  multiply-and-reject method on 32-bit words, bounds above use masked
  rejection on 64-bit words);
* object arrays of exact Python ints for any bound.

Every method is exact: each value in [0, bound) has probability exactly
1/bound (rejection, never ``%`` alone, never floats), so a Bernoulli(num/den)
draw ``uniform_below(den) < num`` has probability exactly num/den.
"""

from __future__ import annotations

import numpy as np

from dp_pipeline.errors import DPTypeError, DPValueError, InternalError

__all__ = [
    "INT64_MAX",
    "bernoulli_from_prefixes",
    "bernoulli_ratio",
    "fraction_prefixes",
    "uniform_below",
    "uniform_below_big",
    "uniform_below_each",
    "uniform_below_int",
]

INT64_MAX = (1 << 63) - 1
_TWO32 = 1 << 32
_TWO64 = 1 << 64
_LOW32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)


def _smear(value: int) -> int:
    return (1 << value.bit_length()) - 1


def uniform_below(stream, bound: int, size: int) -> np.ndarray:
    """``size`` exact uniform integers in [0, bound), 1 <= bound <= 2^63, as int64."""
    if not 1 <= bound <= 1 << 63:
        raise InternalError(f"uniform_below needs 1 <= bound <= 2^63, got {bound}")
    if bound == 1 or size == 0:
        return np.zeros(size, dtype=np.int64)
    if bound <= _TWO32:
        return _lemire32(stream, bound, size)
    return _masked64(stream, bound, size)


def _lemire32(stream, bound: int, size: int) -> np.ndarray:
    # Lemire (2019): for a 32-bit word x, x*bound = hi*2^32 + lo; rejecting
    # lo < 2^32 mod bound leaves each hi in [0, bound) with exactly
    # floor(2^32/bound) words, so the accepted hi is exactly uniform.
    reject_below = _TWO32 % bound
    product = stream.random_uint32(size).astype(np.uint64) * np.uint64(bound)
    values = (product >> _SHIFT32).astype(np.int64)
    if reject_below:
        rejected = np.flatnonzero((product & _LOW32) < np.uint64(reject_below))
        if rejected.size:
            values[rejected] = _lemire32(stream, bound, rejected.size)
    return values


def _masked64(stream, bound: int, size: int) -> np.ndarray:
    return _masked(stream, np.uint64(bound), np.uint64(_smear(bound - 1)), size)


def _smear_mask(values: np.ndarray) -> np.ndarray:
    """Smallest all-ones bit mask >= each value (uint64, exact integer ops)."""
    mask = values.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        mask |= mask >> np.uint64(shift)
    return mask


def _masked_each(stream, bounds: np.ndarray) -> np.ndarray:
    """Per-element bounds in [1, 2^63] (uint64 array of any shape)."""
    flat = bounds.ravel()
    return _masked(stream, flat, _smear_mask(flat - np.uint64(1)), flat.size).reshape(bounds.shape)


def _masked(stream, bounds, masks, size: int) -> np.ndarray:
    """Masked rejection on 64-bit words: each round redraws the rejected elements, in order.

    ``bounds`` / ``masks``: one uint64 each (a scalar bound) or one per element.
    """
    per_element = isinstance(bounds, np.ndarray)
    out = np.empty(size, dtype=np.uint64)
    pending = np.arange(size)
    while pending.size:
        draws = stream.random_uint64(pending.size)
        if per_element:
            draws &= masks[pending]
            accepted = draws < bounds[pending]
        else:
            draws &= masks
            accepted = draws < bounds
        out[pending[accepted]] = draws[accepted]
        pending = pending[~accepted]
    return out.astype(np.int64)


def uniform_below_int(stream, bound: int) -> int:
    """One exact uniform integer in [0, bound) for an arbitrary-precision ``bound`` >= 1
    (masked rejection on the fewest keystream bytes)."""
    if bound < 1:
        raise DPValueError(f"bound must be >= 1, got {bound}")
    bits = (bound - 1).bit_length()
    if bits == 0:
        return 0
    nbytes = (bits + 7) // 8
    excess = 8 * nbytes - bits
    while True:
        candidate = int.from_bytes(stream.random_bytes(nbytes), "little") >> excess
        if candidate < bound:
            return candidate


def uniform_below_each(stream, bounds) -> np.ndarray:
    """Exact uniform integers in [0, b) for each element b of the integer array ``bounds``.

    Bounds up to 2^63 take masked rejection on 64-bit words and return int64; an
    object array with larger Python ints returns exact ints (`uniform_below_int`
    per element). Never ``%`` or floats: each value has probability exactly 1/b.
    """
    if isinstance(bounds, bool):
        raise DPTypeError("bounds must be an integer array, got bool")
    array = np.asarray(bounds)
    if array.dtype == object:
        flat = [int(b) for b in array.ravel()]
        if any(b < 1 for b in flat):
            raise DPValueError("bounds must all be >= 1")
        if all(b <= 1 << 63 for b in flat):
            return _masked_each(stream, np.array(flat, dtype=np.uint64).reshape(array.shape))
        out = np.array([uniform_below_int(stream, b) for b in flat], dtype=object)
        return out.reshape(array.shape)
    if not np.issubdtype(array.dtype, np.integer):
        raise DPTypeError(f"bounds must be integers, got dtype {array.dtype}")
    if array.size and array.min() < 1:
        raise DPValueError(f"bounds must all be >= 1, got minimum {array.min()}")
    return _masked_each(stream, array.astype(np.uint64))


def uniform_below_big(stream, bound: int, size: int) -> np.ndarray:
    """``size`` exact uniform integers in [0, bound) for any bound >= 1, as an object array.

    Masked rejection, vectorized: each candidate is the top ``bits`` bits of
    ``ceil(bits/64)`` keystream words joined into one Python int by object-array
    shifts (no per-element Python loop); candidates >= bound are redrawn.
    """
    if bound < 1:
        raise InternalError(f"uniform_below_big needs bound >= 1, got {bound}")
    out = np.empty(size, dtype=object)
    if size == 0:
        return out
    bits = (bound - 1).bit_length()
    if bits == 0:
        out[:] = 0
        return out
    words_per_value = (bits + 63) // 64
    excess = 64 * words_per_value - bits
    pending = np.arange(size)
    while pending.size:
        words = stream.random_uint64(words_per_value * pending.size).reshape(-1, words_per_value)
        candidates = words[:, 0].astype(object)
        for column in range(1, words_per_value):
            candidates = (candidates << 64) | words[:, column].astype(object)
        if excess:
            candidates = candidates >> excess
        keep = np.asarray(candidates < bound, dtype=bool)
        out[pending[keep]] = candidates[keep]
        pending = pending[~keep]
    return out


def fraction_prefixes(numerators: np.ndarray, denominator: int, bits: int = 64) -> np.ndarray:
    """floor(2^bits * r_i / den) as uint64, exactly (Python ints), for 0 <= r_i < den.

    These are the first ``bits`` binary digits of r_i/den; `bernoulli_from_prefixes`
    compares them with keystream words.
    """
    scaled = (numerators.astype(object) << bits) // denominator
    if scaled.size and (scaled.max() >> bits or scaled.min() < 0):
        raise InternalError("fraction_prefixes needs 0 <= r_i < den")
    return scaled.astype(np.uint64)


def bernoulli_from_prefixes(
    stream, prefixes: np.ndarray, numerator_at, denominator: int, bits: int = 64
) -> np.ndarray:
    """Exact Bernoulli(r_i / den) given prefixes F_i = floor(2^bits r_i / den) (uint64).

    Reads u in [0, 1) from the keystream as binary digits: its first ``bits``
    digits W decide u < r/den whenever W != F (W < F proves it, W > F refutes
    it). On a tie (probability 2^-bits) u < r/den exactly when the remaining
    digits u' satisfy u' < 2^bits r/den - F = rem/den, an exact scalar draw
    ``uniform_below(den) < rem``. No rejection: one word per element.
    ``numerator_at(i)`` returns the exact r_i (a Python int); only ties call it.
    """
    words = stream.random_uint64(prefixes.size)
    if bits < 64:
        words >>= np.uint64(64 - bits)
    result = words < prefixes
    for index in np.flatnonzero(words == prefixes):
        remainder = (numerator_at(int(index)) << bits) - int(prefixes[index]) * denominator
        result[index] = uniform_below_int(stream, denominator) < remainder
    return result


def bernoulli_ratio(stream, numerators: np.ndarray, denominator: int) -> np.ndarray:
    """Exact Bernoulli(num_i / denominator) for each element.

    For a word x uniform on [0, 2^w) and L = floor(2^w / den), the words
    x < den*L are accepted (the rest redrawn), so h = floor(x / L) is exactly
    uniform on [0, den) and h < num  <=>  x < num*L: one multiply and two
    comparisons per element, 32-bit words when den <= 2^32, 64-bit up to 2^63.
    ``numerators`` is int64 or an object array of Python ints (any den);
    0 <= num_i <= den is the caller's invariant.
    """
    size = len(numerators)
    if numerators.dtype == object or denominator > 1 << 63:
        exact = numerators.astype(object)
        # num == den (probability 1) has prefix 2^64: clamped, its tie draw returns True.
        prefixes = np.minimum((exact << 64) // denominator, _TWO64 - 1).astype(np.uint64)
        return bernoulli_from_prefixes(stream, prefixes, lambda i: exact[i], denominator)
    if size == 0:
        return np.zeros(0, dtype=bool)
    if denominator <= _TWO32:
        per_value = _TWO32 // denominator
        words = stream.random_uint32(size)
        limits = numerators * per_value  # <= den * L <= 2^32: fits int64
    elif denominator & (denominator - 1) == 0:
        # den = 2^b: h is the top b bits of the word, no rejection (and num*L may be 2^64).
        shift = np.uint64(64 - denominator.bit_length() + 1)
        return (stream.random_uint64(size) >> shift) < numerators.astype(np.uint64)
    else:
        per_value = (1 << 64) // denominator
        words = stream.random_uint64(size)
        limits = numerators.astype(np.uint64) * np.uint64(per_value)  # < den * L < 2^64
    result = words < limits
    accept_limit = denominator * per_value
    if accept_limit < (_TWO32 if denominator <= _TWO32 else 1 << 64):
        rejected = np.flatnonzero(words >= accept_limit)
        if rejected.size:
            result[rejected] = bernoulli_ratio(stream, numerators[rejected], denominator)
    return result
