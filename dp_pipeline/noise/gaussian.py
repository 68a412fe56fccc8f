"""Exact discrete Gaussian sampler (Canonne–Kamath–Steinke 2020, Algorithm 3), vectorized."""

from __future__ import annotations

from math import isqrt

import numpy as np

from dp_pipeline.noise._validate import check_size, check_stream, positive_rational
from dp_pipeline.noise.bernoulli_exp import bernoulli_exp_quotient, bernoulli_exp_split
from dp_pipeline.noise.laplace import FAST_MAX_T, apply_sign, fill_in_batches, laplace_magnitudes
from dp_pipeline.noise.uniform import INT64_MAX

__all__ = ["discrete_gaussian", "gaussian_accept"]

# Outputs are int64 when σ² <= 2^100 (σ <= 2^50): P[|X| >= 2^63] < exp(-2^25).
INT64_OUTPUT_MAX_SIGMA2 = 1 << 100
_SQRT_INT64_MAX = isqrt(INT64_MAX)


def discrete_gaussian(sigma2, size: int, stream, *, force_big: bool = False) -> np.ndarray:
    """``size`` exact draws from N_Z(0, σ²): P[X = x] ∝ exp(-x²/(2σ²)) on the integers.

    ``sigma2`` > 0 is an int, ``Fraction`` or ``"p/q"`` string (floats by the
    never-lower rule of `dp_pipeline.rational`). CKS 2020 Algorithm 3: with
    σ² = p/q and t = floor(σ) + 1, draw Y ~ Lap_Z(t) and keep it with
    probability exp(-(|Y|·t·q - p)² / (2·p·q·t²)); integer arithmetic only.

    Arithmetic runs on int64 where bounds proven before each step allow
    (per batch and per element) and on exact Python ints otherwise; both give
    the same distribution (``force_big`` runs everything on Python ints; tests
    use it to compare the two). Returns int64 when σ² <= 2^100 (a value
    outside int64 then has probability below exp(-2^25) and would raise
    `InternalError`, never wrap), otherwise an object array of Python ints.
    """
    sigma2 = positive_rational(sigma2, "sigma2")
    size = check_size(size)
    check_stream(stream)
    p, q = sigma2.numerator, sigma2.denominator
    t = isqrt(p * q) // q + 1
    big_output = sigma2 > INT64_OUTPUT_MAX_SIGMA2
    big_compute = force_big or t > FAST_MAX_T

    def propose(count: int) -> np.ndarray:
        magnitudes, negative = laplace_magnitudes(stream, t, 1, count, force_big=force_big)
        keep = gaussian_accept(stream, magnitudes, p, q, t)
        return apply_sign(magnitudes[keep], negative[keep])

    return fill_in_batches(propose, size, big_output, big_compute)


def gaussian_accept(stream, magnitudes: np.ndarray, p: int, q: int, t: int) -> np.ndarray:
    """Bernoulli(exp(-(|y|·t·q - p)² / (2·p·q·t²))) per element |y| of ``magnitudes``.

    The exponent a²/D is split as m + r/D (m = a² // D) and drawn by
    `bernoulli_exp_split`. Elements whose a = |y|·t·q - p is proven to satisfy
    |a| <= sqrt(2^63 - 1), with D <= 2^63 - 1, use int64; the rest use Python ints.
    """
    scaled_t = q * t
    den = 2 * p * q * t * t
    result = np.zeros(magnitudes.size, dtype=bool)
    if magnitudes.size == 0:
        return result
    if magnitudes.dtype != object and den <= INT64_MAX:
        highest = (p + _SQRT_INT64_MAX) // scaled_t
        lowest = max(0, -((_SQRT_INT64_MAX - p) // scaled_t))
        fits = magnitudes <= highest
        if lowest:
            fits &= magnitudes >= lowest
        fast = np.flatnonzero(fits)
        slow = np.flatnonzero(~fits)
        if slow.size == 0:
            result[:] = _accept_int64(stream, magnitudes, p, scaled_t, den)
        else:
            result[fast] = _accept_int64(stream, magnitudes[fast], p, scaled_t, den)
            result[slow] = _accept_exact(stream, magnitudes[slow], p, scaled_t, den)
        return result
    return _accept_exact(stream, magnitudes, p, scaled_t, den)


def _accept_int64(stream, magnitudes, p, scaled_t, den):
    offsets = magnitudes * scaled_t - p
    squares = offsets * offsets
    wholes = squares // den
    return bernoulli_exp_split(stream, wholes, squares - wholes * den, den)


def _accept_exact(stream, magnitudes, p, scaled_t, den):
    offsets = magnitudes.astype(object) * scaled_t - p
    return bernoulli_exp_quotient(stream, offsets * offsets, den)
