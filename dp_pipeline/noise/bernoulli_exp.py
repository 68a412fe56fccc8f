"""Exact Bernoulli(exp(-γ)) for rational γ >= 0 (Canonne–Kamath–Steinke 2020, Algorithm 1)."""

from __future__ import annotations

import numpy as np

from dp_pipeline.noise._exp_digits import bernoulli_exp_neg_integer, geometric_exp_neg_one
from dp_pipeline.noise._uniform import bernoulli_ratio
from dp_pipeline.noise._validate import check_size, check_stream, nonnegative_rational

__all__ = ["bernoulli_exp", "bernoulli_exp_fraction", "bernoulli_exp_split"]


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
    if wholes.dtype == object:
        geometric = geometric_exp_neg_one(stream, size).astype(object)
        survive = np.asarray(geometric >= wholes, dtype=bool)
        alive = np.flatnonzero(survive)
    else:
        # Only elements with a whole part m >= 1 need the Bernoulli(e^{-m}) factor.
        positive = np.flatnonzero(wholes)
        if positive.size == 0:
            return bernoulli_exp_fraction(stream, remainders, den)
        survive = np.ones(size, dtype=bool)
        survive[positive] = bernoulli_exp_neg_integer(stream, wholes[positive])
        alive = np.flatnonzero(survive)
    result[alive] = bernoulli_exp_fraction(stream, remainders[alive], den)
    return result


def bernoulli_exp_fraction(stream, numerators: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(exp(-r_i/den)) per element for 0 <= r_i <= den (CKS Algorithm 1, γ <= 1).

    K counts trials A_k ~ Bernoulli(γ/k) up to the first failure; P[K > k] =
    γ^k/k!, so P[K odd] = e^{-γ}. All pending elements share the same k in a
    pass, so each pass is one Bernoulli(r_i/(den*k)) draw with a common
    denominator; when den*k would not fit in 63 bits it is drawn as
    Bernoulli(r_i/den) AND Bernoulli(1/k), which has the same probability.
    """
    size = len(numerators)
    result = np.ones(size, dtype=bool)
    if size == 0:
        return result
    pending = np.flatnonzero(bernoulli_ratio(stream, numerators, den))
    k = 1
    while pending.size:
        k += 1
        numer = numerators[pending]
        if numer.dtype != object and den * k <= 1 << 63:
            success = bernoulli_ratio(stream, numer, den * k)
        else:
            success = bernoulli_ratio(stream, numer, den)
            ones = np.ones(int(success.sum()), dtype=np.int64)
            success[success] = bernoulli_ratio(stream, ones, k)
        stopped = pending[~success]
        result[stopped] = k % 2 == 1
        pending = pending[success]
    return result
