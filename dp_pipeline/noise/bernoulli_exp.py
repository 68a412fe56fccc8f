"""Exact Bernoulli(exp(-γ)) for rational γ >= 0 (Canonne–Kamath–Steinke 2020, Algorithm 1)."""

from __future__ import annotations

import numpy as np

from dp_pipeline.noise._exp_digits import bernoulli_exp_neg_integer, geometric_exp_neg_one
from dp_pipeline.noise._validate import check_size, check_stream, nonnegative_rational
from dp_pipeline.noise.uniform import (
    bernoulli_from_prefixes,
    bernoulli_ratio,
    fraction_prefixes,
)

__all__ = [
    "bernoulli_exp",
    "bernoulli_exp_fraction",
    "bernoulli_exp_fraction_prefixed",
    "bernoulli_exp_quotient",
    "bernoulli_exp_split",
    "exp_fraction_from_prefixes",
]

_SMALL_WHOLE = 1 << 62


def bernoulli_exp(gamma, size: int, stream) -> np.ndarray:
    """``size`` independent exact Bernoulli(exp(-gamma)) draws (bool array).

    ``gamma`` >= 0 is an int, ``Fraction`` or ``"p/q"`` string (floats by the
    never-lower rule of `dp_pipeline.rational`; here that can only lower the
    success probability exp(-γ)). CKS 2020 Algorithm 1: for γ = m + r/d with
    integer m and 0 <= r < d, the result is Bernoulli(e^{-1})^m AND
    Bernoulli(exp(-r/d)); the first factor is drawn in one pass as [V >= m]
    with V ~ Geometric(e^{-1}) (see `_exp_digits`).
    """
    gamma = nonnegative_rational(gamma, "gamma")
    size = check_size(size)
    check_stream(stream)
    whole, remainder = divmod(gamma.numerator, gamma.denominator)
    wholes = np.full(size, whole, dtype=np.int64 if whole <= 1 << 62 else object)
    remainders = np.full(size, remainder, dtype=np.int64 if remainder <= 1 << 62 else object)
    return bernoulli_exp_split(stream, wholes, remainders, gamma.denominator)


def bernoulli_exp_split(stream, wholes: np.ndarray, remainders: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(exp(-(m_i + r_i/den))) per element, for integers m_i >= 0, 0 <= r_i < den."""
    size = len(wholes)
    result = np.zeros(size, dtype=bool)
    if size == 0:
        return result
    alive = np.flatnonzero(_whole_part_survives(stream, wholes))
    if alive.size == size:
        return bernoulli_exp_fraction(stream, remainders, den)
    result[alive] = bernoulli_exp_fraction(stream, remainders[alive], den)
    return result


def _whole_part_survives(stream, wholes: np.ndarray) -> np.ndarray:
    """Bernoulli(e^{-m_i}) per element for integers m_i >= 0 (int64 or object array)."""
    size = len(wholes)
    if wholes.dtype == object and (size == 0 or max(wholes) <= _SMALL_WHOLE):
        wholes = wholes.astype(np.int64)  # exact: every value is proven to fit
    if wholes.dtype == object:
        geometric = geometric_exp_neg_one(stream, size).astype(object)
        return np.asarray(geometric >= wholes, dtype=bool)
    survive = np.ones(size, dtype=bool)
    # Only elements with a whole part m >= 1 need the Bernoulli(e^{-m}) factor.
    positive = np.flatnonzero(wholes)
    if positive.size:
        survive[positive] = bernoulli_exp_neg_integer(stream, wholes[positive])
    return survive


def bernoulli_exp_fraction(stream, numerators: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(exp(-r_i/den)) per element for 0 <= r_i < den (CKS Algorithm 1, γ < 1).

    K counts trials A_k ~ Bernoulli(γ/k) up to the first failure; P[K > k] =
    γ^k/k!, so P[K odd] = e^{-γ}. All pending elements share the same k in a
    pass, so each pass is one Bernoulli(r_i/(den*k)) draw with a common
    denominator; when den*k would not fit in 63 bits it is drawn as
    Bernoulli(r_i/den) AND Bernoulli(1/k), which has the same probability.
    """
    if len(numerators) == 0:
        return np.ones(0, dtype=bool)
    if numerators.dtype == object or den > 1 << 63:
        return bernoulli_exp_fraction_prefixed(stream, numerators, den)

    def trial(pending: np.ndarray, k: int) -> np.ndarray:
        numer = numerators[pending]
        if den * k <= 1 << 63:
            return bernoulli_ratio(stream, numer, den * k)
        success = bernoulli_ratio(stream, numer, den)
        ones = np.ones(int(success.sum()), dtype=np.int64)
        success[success] = bernoulli_ratio(stream, ones, k)
        return success

    return _odd_stopping_trial(bernoulli_ratio(stream, numerators, den), trial)


def _odd_stopping_trial(first: np.ndarray, trial) -> np.ndarray:
    """CKS Algorithm 1's loop, vectorized: True where the first failing trial is odd.

    ``first`` is the outcome of trial 1 per element; ``trial(pending, k)`` draws
    trial k (A_k ~ Bernoulli(γ/k)) for the elements still running. An element
    stops at its first failure K and the result is ``K`` odd: P = e^{-γ}.
    """
    result = np.ones(first.size, dtype=bool)
    pending = np.flatnonzero(first)
    k = 1
    while pending.size:
        k += 1
        success = trial(pending, k)
        result[pending[~success]] = k % 2 == 1
        pending = pending[success]
    return result


def bernoulli_exp_fraction_prefixed(
    stream, numerators: np.ndarray, den: int, *, bits: int = 64
) -> np.ndarray:
    """`bernoulli_exp_fraction` for big integers: one exact division per element, then uint64.

    Computes G_i = floor(2^bits r_i/den) once per element in Python ints and
    hands over to `exp_fraction_from_prefixes`. ``bits`` < 64 only in tests,
    to make the tie path frequent. Requires 0 <= r_i < den.
    """
    exact = numerators.astype(object)
    prefixes = fraction_prefixes(exact, den, bits)
    return exp_fraction_from_prefixes(stream, prefixes, lambda i: exact[i], den, bits)


def exp_fraction_from_prefixes(
    stream, prefixes: np.ndarray, numerator_at, den: int, bits: int = 64
) -> np.ndarray:
    """Bernoulli(exp(-r_i/den)) from G_i = floor(2^bits r_i/den) (uint64), r_i < den.

    CKS Algorithm 1 as in `bernoulli_exp_fraction`; the pass-k trial
    Bernoulli(r/(den·k)) compares keystream words with F_k = floor(G/k) =
    floor(2^bits r/(den·k)) (floor(floor(x)/k) = floor(x/k) for integers k >= 1),
    so every pass runs on uint64 arrays; only ties (probability 2^-bits per
    trial) call ``numerator_at(i)`` for the exact r_i (`bernoulli_from_prefixes`).
    """
    if prefixes.size == 0:
        return np.ones(0, dtype=bool)

    def trial(pending: np.ndarray, k: int) -> np.ndarray:
        return bernoulli_from_prefixes(
            stream,
            prefixes[pending] // np.uint64(k),
            lambda i: numerator_at(int(pending[i])),
            den * k,
            bits,
        )

    first = bernoulli_from_prefixes(stream, prefixes, numerator_at, den, bits)
    return _odd_stopping_trial(first, trial)


def bernoulli_exp_quotient(
    stream, numerators: np.ndarray, den: int, *, bits: int = 64
) -> np.ndarray:
    """Bernoulli(exp(-x_i/den)) for big non-negative integers x_i (object array).

    One exact division per element: Q = floor(2^b x/den) (b = ``bits``) gives
    the whole part m = Q >> b = floor(x/den) and the b-bit prefix Q mod 2^b =
    floor(2^b r/den) of the fraction r/den, r = x - m·den; the rest runs on
    int64/uint64 arrays (`_whole_part_survives` for e^{-m},
    `exp_fraction_from_prefixes` for e^{-r/den}). ``bits`` < 64 only in tests.
    """
    size = len(numerators)
    result = np.zeros(size, dtype=bool)
    if size == 0:
        return result
    scaled = (numerators << bits) // den
    wholes = scaled >> bits
    prefixes = (scaled & ((1 << bits) - 1)).astype(np.uint64)
    alive = np.flatnonzero(_whole_part_survives(stream, wholes))

    def remainder_at(i: int) -> int:
        index = int(alive[i])
        return numerators[index] - wholes[index] * den

    result[alive] = exp_fraction_from_prefixes(stream, prefixes[alive], remainder_at, den, bits)
    return result
