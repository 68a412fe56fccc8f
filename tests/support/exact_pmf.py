"""Exact (high-precision) pmf masses for the sampler tests, via mpmath.

Discrete Gaussian: S(a, b) = sum_{x=a}^{b} exp(-x²/(2σ²)) is summed term by term
when the range is short and otherwise by Euler-Maclaurin (integral via erf plus
endpoint corrections up to the third derivative; the next term is of relative
size σ^-5, below 1e-15 for σ >= 1000, where it is used). The normaliser uses
Poisson summation: Z = sqrt(2πσ²) (1 + 2 Σ_k exp(-2π²σ²k²)).
Discrete Laplace masses are closed-form geometric sums. The working precision is the
calling test's (tests/conftest.py: 40 digits unless its module sets ``MPMATH_DPS``).
"""

from __future__ import annotations

from fractions import Fraction

import mpmath

INF = None


def _mp(value: Fraction):
    return mpmath.mpf(value.numerator) / value.denominator


class GaussianMass:
    def __init__(self, sigma2: Fraction) -> None:
        self.s2 = _mp(Fraction(sigma2))
        self.sigma = mpmath.sqrt(self.s2)
        k = mpmath.mpf(1)
        theta = 1 + 2 * mpmath.nsum(
            lambda j: mpmath.exp(-2 * mpmath.pi**2 * self.s2 * j**2), [k, mpmath.inf]
        )
        self.z = mpmath.sqrt(2 * mpmath.pi * self.s2) * theta

    def _f(self, x):
        return mpmath.exp(-(mpmath.mpf(x) ** 2) / (2 * self.s2))

    def _direct(self, a: int, b: int):
        return mpmath.fsum(self._f(x) for x in range(a, b + 1))

    def _half_line(self, a: int):
        """sum_{x >= a} f(x)."""
        if self.sigma < 30:
            return self._direct(a, a + int(60 * self.sigma) + 60)
        return self._euler_maclaurin(a, mpmath.inf)

    def _euler_maclaurin(self, a, b):
        s2, sigma = self.s2, self.sigma

        def d1(x):
            return -x / s2 * self._f(x) if x != mpmath.inf else 0

        def d3(x):
            return (3 * x / s2**2 - x**3 / s2**3) * self._f(x) if x != mpmath.inf else 0

        c = sigma * mpmath.sqrt(2)
        integral = (
            sigma
            * mpmath.sqrt(mpmath.pi / 2)
            * (
                mpmath.erfc(mpmath.mpf(a) / c)
                - (mpmath.erfc(mpmath.mpf(b) / c) if b != mpmath.inf else 0)
            )
        )
        fa = self._f(a)
        fb = self._f(b) if b != mpmath.inf else 0
        return integral + (fa + fb) / 2 + (d1(b) - d1(a)) / 12 - (d3(b) - d3(a)) / 720

    def unnormalised(self, a, b):
        """sum_{x=a}^{b} f(x) for integers a <= b (a None is -inf, b None is +inf)."""
        if a is None and b is None:
            return self.z
        if a is None:
            return self.unnormalised(-b, None)
        if b is None:
            if a <= 0:
                return (
                    self.z - self.unnormalised(-a + 1, None)
                    if a < 0
                    else self.z / 2 + self._f(0) / 2
                )
            return self._half_line(a)
        if b - a <= 400 or self.sigma < 30:
            return self._direct(a, b)
        return self._euler_maclaurin(a, b)

    def mass(self, a, b) -> float:
        return float(self.unnormalised(a, b) / self.z)


class LaplaceMass:
    def __init__(self, scale: Fraction) -> None:
        self.r = mpmath.exp(-1 / _mp(Fraction(scale)))
        self.c = (1 - self.r) / (1 + self.r)

    def _nonneg(self, a: int, b):
        # sum_{z=a}^{b} C r^z for 0 <= a <= b (b None: infinity)
        top = 0 if b is None else self.r ** (b - a + 1)
        return self.c * self.r**a * (1 - top) / (1 - self.r)

    def unnormalised(self, a, b):
        if a is None and b is None:
            return mpmath.mpf(1)
        if a is None:
            return self.unnormalised(-b, None)
        if b is None:
            if a >= 0:
                return self._nonneg(a, None)
            return 1 - self._nonneg(-a + 1, None)
        if a >= 0:
            return self._nonneg(a, b)
        if b <= 0:
            return self._nonneg(-b, -a)
        return self._nonneg(0, -a) + self._nonneg(1, b)

    def mass(self, a, b) -> float:
        return float(self.unnormalised(a, b))
