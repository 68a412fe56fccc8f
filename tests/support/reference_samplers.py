"""Scalar exact reference samplers: CKS 2020 Algorithms 1-3 written literally with Fractions.

Used only by the tests, as an independent implementation to compare the vectorized
samplers against. Randomness comes from the same `SecureStream` (exact uniform
integers via `uniform_below_int`), so Bernoulli(n/d) is ``uniform_below(d) < n``.
"""

from __future__ import annotations

from fractions import Fraction
from math import floor, isqrt

from dp_pipeline.noise.uniform import uniform_below_int


def bernoulli(stream, p: Fraction) -> int:
    return int(uniform_below_int(stream, p.denominator) < p.numerator)


def bernoulli_exp(stream, gamma: Fraction) -> int:
    """CKS Algorithm 1: Bernoulli(exp(-gamma)) for rational gamma >= 0."""
    if gamma <= 1:
        k = 1
        while bernoulli(stream, gamma / k):
            k += 1
        return k % 2
    for _ in range(floor(gamma)):
        if not bernoulli_exp(stream, Fraction(1)):
            return 0
    return bernoulli_exp(stream, gamma - floor(gamma))


def discrete_laplace(stream, scale: Fraction) -> int:
    """CKS Algorithm 2: P[Z = z] ∝ exp(-|z|/scale), scale = t/s."""
    t, s = scale.numerator, scale.denominator
    while True:
        u = uniform_below_int(stream, t)
        if not bernoulli_exp(stream, Fraction(u, t)):
            continue
        v = 0
        while bernoulli_exp(stream, Fraction(1)):
            v += 1
        y = (u + t * v) // s
        sign = bernoulli(stream, Fraction(1, 2))
        if sign == 1 and y == 0:
            continue
        return (1 - 2 * sign) * y


def discrete_gaussian(stream, sigma2: Fraction) -> int:
    """CKS Algorithm 3: P[X = x] ∝ exp(-x²/(2σ²))."""
    t = isqrt(sigma2.numerator * sigma2.denominator) // sigma2.denominator + 1
    while True:
        y = discrete_laplace(stream, Fraction(t))
        if bernoulli_exp(stream, (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)):
            return y
