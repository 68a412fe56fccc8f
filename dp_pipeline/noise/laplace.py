"""Exact discrete Laplace sampler (Canonne–Kamath–Steinke 2020, Algorithm 2), vectorized."""

from __future__ import annotations

import numpy as np

from dp_pipeline.errors import InternalError
from dp_pipeline.noise._exp_digits import geometric_exp_neg_one
from dp_pipeline.noise._validate import check_size, check_stream, positive_rational
from dp_pipeline.noise.bernoulli_exp import bernoulli_exp_fraction
from dp_pipeline.noise.uniform import INT64_MAX, uniform_below, uniform_below_big

__all__ = ["discrete_laplace", "fill_in_batches", "laplace_magnitudes"]

# Bounds for the int64 path, proven before any arithmetic: uniform draws and
# U + t*V need t <= 2^62 (V is checked per batch); outputs are int64 when the
# scale is at most 2^50, where P[|Z| >= 2^63] < exp(-2^13) per sample.
FAST_MAX_T = 1 << 62
INT64_OUTPUT_MAX_SCALE = 1 << 50
FAST_CHUNK = 1 << 16
BIG_CHUNK = 1 << 15


def discrete_laplace(scale, size: int, stream, *, force_big: bool = False) -> np.ndarray:
    """``size`` exact draws from Lap_Z(scale): P[Z = z] ∝ exp(-|z|/scale) on the integers.

    ``scale`` > 0 is an int, ``Fraction`` or ``"p/q"`` string (floats by the
    never-lower rule of `dp_pipeline.rational`). Exact: CKS 2020 Algorithm 2
    with only integer arithmetic on uniform draws from ``stream``; V, the
    geometric count of Bernoulli(e^{-1}) successes, is drawn in one pass by
    exact comparison with the binary digits of e^{-k} (`_exp_digits`).

    ``force_big`` runs the arithmetic on Python ints (tests compare the paths).
    Returns int64 when scale <= 2^50 (a value outside int64 then has
    probability below exp(-8192); it would raise `InternalError`, never wrap),
    otherwise an object array of exact Python ints.
    """
    scale = positive_rational(scale, "scale")
    size = check_size(size)
    check_stream(stream)
    t, s = scale.numerator, scale.denominator
    big_output = scale > INT64_OUTPUT_MAX_SCALE

    def propose(count: int) -> np.ndarray:
        magnitudes, negative = laplace_magnitudes(stream, t, s, count, force_big=force_big)
        return apply_sign(magnitudes, negative)

    return fill_in_batches(propose, size, big_output, force_big or t > FAST_MAX_T)


def apply_sign(magnitudes: np.ndarray, negative: np.ndarray) -> np.ndarray:
    if magnitudes.dtype == object:
        out = magnitudes.copy()
        out[negative] = -magnitudes[negative]
        return out
    return np.where(negative, -magnitudes, magnitudes)


def random_signs(stream, size: int) -> np.ndarray:
    """``size`` fair coin flips (bool), eight per keystream byte."""
    raw = np.frombuffer(stream.random_bytes((size + 7) // 8), dtype=np.uint8)
    return np.unpackbits(raw, count=size).astype(bool)


def laplace_magnitudes(
    stream, t: int, s: int, count: int, *, force_big: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """From ``count`` proposals of CKS Algorithm 2 (scale t/s), the accepted |Z| and signs.

    U ~ uniform[0, t) kept with probability exp(-U/t); X = U + t*V with
    V ~ Geometric(e^{-1}) is then Geometric with ratio e^{-1/t}; Y = floor(X/s),
    and a sign B, rejecting (B = 1, Y = 0) so that 0 is not counted twice.
    """
    big = force_big or t > FAST_MAX_T
    uniforms = uniform_below_big(stream, t, count) if big else uniform_below(stream, t, count)
    uniforms = uniforms[bernoulli_exp_fraction(stream, uniforms, t)]
    geometric = geometric_exp_neg_one(stream, uniforms.size)
    if not big and geometric.size and t * (int(geometric.max()) + 1) > INT64_MAX:
        big = True  # proven overflow risk for this batch: compute it exactly in Python ints
        uniforms = uniforms.astype(object)
    magnitudes = uniforms + (geometric.astype(object) if big else geometric) * t
    if s != 1:
        magnitudes = magnitudes // s
    negative = random_signs(stream, magnitudes.size)
    keep = ~(negative & (magnitudes == 0))
    return magnitudes[keep], negative[keep]


def fill_in_batches(propose, size: int, big_output: bool, big_compute: bool) -> np.ndarray:
    """Fill ``size`` outputs from i.i.d. accepted proposals, in order, batch by batch.

    Each batch's size is set from the acceptance seen so far (integer
    arithmetic; it affects speed only, never the distribution: every accepted
    value is an independent exact draw and the first ``size`` are kept).
    """
    out = np.empty(size, dtype=object if big_output else np.int64)
    chunk = BIG_CHUNK if big_compute or big_output else FAST_CHUNK
    filled = proposed = accepted = 0
    while filled < size:
        need = size - filled
        count = min(chunk, (need * (proposed + 1) * 9) // (8 * (accepted + 1)) + 16)
        values = propose(count)
        proposed += count
        accepted += values.size
        take = min(values.size, need)
        chunk_values = values[:take]
        if not big_output and chunk_values.dtype == object:
            if take and max(abs(int(v)) for v in chunk_values) > INT64_MAX:
                raise InternalError("a sample outside int64 for a parameter proven to stay inside")
            chunk_values = chunk_values.astype(np.int64)
        out[filled : filled + take] = chunk_values
        filled += take
    return out
