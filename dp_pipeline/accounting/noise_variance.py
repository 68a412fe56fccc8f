"""Exact variances of the discrete Gaussian and discrete Laplace noise (pure functions).

The variance of N_Z(0, σ²) is not σ²: it is at most σ² (Canonne, Kamath and
Steinke 2020, Proposition 5 and Corollary 9), equal to it within a relative
e^{-2π²σ²}·4π²σ² for σ² >= 1 and far below it for σ² < 1 (about 0.0134 at
σ² = 1/10). Post-processing weights tables by the variance of the noise actually
drawn, so it takes these values, not the parameters.

Both are computed in binary floating point of `PRECISION` bits (gmpy2 / MPFR,
whose exponent range holds e^{-10^8}) and returned as exact `Fraction` values
of that result rounded to 53 significant bits: the relative error is at most
2^-52 (the final rounding) plus a few hundred units of 2^-PRECISION (the
summation and truncation), so the returned value is the variance correctly
rounded or one unit of the 53rd bit away from it.
"""

from __future__ import annotations

from fractions import Fraction

import gmpy2

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

__all__ = [
    "PRECISION",
    "discrete_gaussian_variance",
    "discrete_laplace_variance",
    "noise_variance",
]

PRECISION = 128  # bits of the working precision
# Terms of relative size below 2^-(PRECISION + 16) are left out of a sum.
_TAIL_BITS = PRECISION + 16


def _exact(value, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, Fraction | int):
        raise DPTypeError(f"{name} must be an exact rational (Fraction or int), got {value!r}")
    value = Fraction(value)
    if value <= 0:
        raise DPValueError(f"{name} must be > 0, got {value}")
    return value


def _rounded(value) -> Fraction:
    """``value`` (an mpfr) rounded to 53 significant bits, as an exact Fraction."""
    return Fraction(*gmpy2.round2(value, 53).as_integer_ratio())


def discrete_gaussian_variance(sigma2: Fraction | int) -> Fraction:
    """Var[Y] for Y ~ N_Z(0, σ²): Σ_x x² e^{-x²/(2σ²)} / Σ_x e^{-x²/(2σ²)} (unit: count²).

    Method (the error is stated in the module docstring):

    - σ² <= 1, direct sums: Var = 2 e^{-1/(2σ²)} N / D with
      N = Σ_{x>=1} x² e^{-(x²-1)/(2σ²)} and D = 1 + 2 Σ_{x>=1} e^{-x²/(2σ²)}, the
      factor e^{-1/(2σ²)} taken out so that no term underflows before the product.
      For x >= 2 consecutive terms shrink by a factor <= 4e^{-5/2} < 1/3, so the
      sums stop once a term is below 2^-(PRECISION+16) of the first and the
      left-out tail is at most 3/2 of that term.
    - σ² > 1, Poisson summation (the Fourier transforms of e^{-x²/(2σ²)} and
      x² e^{-x²/(2σ²)}): with a = 2π²σ², Var = σ² (1 - 2a B / A), where
      A = 1 + 2 Σ_{k>=1} e^{-a k²} and B = 2 Σ_{k>=1} k² e^{-a k²}; a > 19.7 makes
      consecutive terms shrink by e^{-59} or more, so the same cut-off applies.

    Never above σ² (the true value is below it: CKS 2020, Proposition 5 / Corollary 9).
    """
    s = _exact(sigma2, "sigma2")
    with gmpy2.context(precision=PRECISION):
        s_mp = gmpy2.mpfr(gmpy2.mpq(s.numerator, s.denominator))
        cutoff = gmpy2.mpfr(2) ** -_TAIL_BITS
        if s <= 1:
            numerator, denominator = gmpy2.mpfr(1), gmpy2.mpfr(1)
            first = gmpy2.exp(-1 / (2 * s_mp))
            x = 1
            while True:
                x += 1
                shrink = gmpy2.exp(-(x * x - 1) / (2 * s_mp))  # e^{-x²/2σ²} / e^{-1/2σ²}
                term = x * x * shrink
                numerator += term
                if term < cutoff:
                    break
            # D = 1 + 2 e^{-1/2σ²} (1 + Σ_{x>=2} shrink_x), the same terms without x².
            tail = gmpy2.mpfr(1)
            for y in range(2, x + 1):
                tail += gmpy2.exp(-(y * y - 1) / (2 * s_mp))
            denominator += 2 * first * tail
            return _rounded(2 * first * numerator / denominator)
        a = 2 * gmpy2.const_pi() ** 2 * s_mp
        a_sum, b_sum = gmpy2.mpfr(1), gmpy2.mpfr(0)
        k = 0
        while True:
            k += 1
            weight = gmpy2.exp(-a * k * k)
            a_sum += 2 * weight
            b_sum += 2 * k * k * weight
            if k * k * weight < cutoff:
                break
        # Rounding may pass σ² by less than an ulp where the true value is below it.
        return min(_rounded(s_mp * (1 - 2 * a * b_sum / a_sum)), s)


def discrete_laplace_variance(scale: Fraction | int) -> Fraction:
    """Var[Y] for the discrete Laplace of scale t, P[Y = y] ∝ e^{-|y|/t} (unit: count²).

    The closed form 2 e^{-1/t} / (1 - e^{-1/t})² (CKS 2020, Section 2.2), with
    1 - e^{-1/t} computed as -expm1(-1/t), so a large t loses no digits to
    cancellation; error as stated in the module docstring.
    """
    t = _exact(scale, "scale")
    with gmpy2.context(precision=PRECISION):
        inverse = gmpy2.mpfr(gmpy2.mpq(t.denominator, t.numerator))
        q = gmpy2.exp(-inverse)
        gap = -gmpy2.expm1(-inverse)
        return _rounded(2 * q / (gap * gap))


def noise_variance(mechanism: DiscreteGaussian | DiscreteLaplace) -> Fraction:
    """The exact per-cell variance of the noise ``mechanism`` draws (unit: the noised value²)."""
    if isinstance(mechanism, DiscreteGaussian):
        return discrete_gaussian_variance(mechanism.sigma2)
    if isinstance(mechanism, DiscreteLaplace):
        return discrete_laplace_variance(mechanism.scale)
    raise DPTypeError(
        f"mechanism must be a DiscreteGaussian or DiscreteLaplace, got {type(mechanism).__name__}"
    )
