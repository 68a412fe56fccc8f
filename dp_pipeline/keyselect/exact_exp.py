"""Certified rational bounds of exp(x) for rational x: the arithmetic of the thresholds.

Every bound is a pair of `Fraction`s ``lo <= exp(x) <= hi`` proven by integer arithmetic
only (no float touches a privacy figure). The relative width is about ``2^-bits``
times the size of the exponent's integer part (plus one ulp ``2^-bits`` absolute for
results far below ``2^-bits``: a lower bound may then be 0, an upper bound never is).

Method, for x = a/d >= 0 (negative x by 1/exp(-x), swapping the bounds):

- exp(-x) = exp(-1)^n · exp(-f) with n = floor(x) and f = x - n in [0, 1).
- exp(-f) for 0 <= f <= 1 is the alternating series Σ (-f)^i / i! whose terms decrease
  in absolute value, so consecutive partial sums bracket it (Leibniz); the series is
  summed exactly as one integer over ``d^N · N!`` and rounded outward to ``2^-bits``.
- exp(-1)^n by binary powering of the bracket of exp(-1), each product rounded
  outward (down for the lower bound, up for the upper), so the pair stays a bracket.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from dp_pipeline.errors import DPValueError

__all__ = ["DEFAULT_BITS", "exp_bounds", "exp_neg_bounds", "exp_neg_multiples"]

DEFAULT_BITS = 256
# Guard bits carried through the powering so that outward rounding of each product
# costs far less than the ulp of the returned bound.
_GUARD = 32


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _series_bracket(a: int, d: int, bits: int) -> tuple[int, int]:
    """Integers (lo, hi) with lo/2^bits <= exp(-a/d) <= hi/2^bits, for 0 <= a <= d, d >= 1.

    Partial sums S_N of the alternating series with N even and N + 1 bracket the value
    once the terms decrease, which they do from i = 0 since f = a/d <= 1.
    """
    # Terms f^i/i! fall below 2^-(bits+2) once i! > 2^(bits+2) (f <= 1).
    terms, factorial = 1, 1
    while factorial.bit_length() <= bits + 3:
        terms += 1
        factorial *= terms
    if terms % 2:
        terms += 1  # S_terms (even count) is an upper bound, S_{terms+1} a lower one
    # N!·d^N·S_N = Σ_i (-1)^i a^i d^(N-i) N!/i!, accumulated from i = N down to 0.
    n_top = terms + 1
    numerator, ratio = 0, 1  # ratio = N!/i! for the current i, starting at i = N
    for i in range(n_top, -1, -1):
        term = a**i * d ** (n_top - i) * ratio
        numerator += -term if i % 2 else term
        ratio *= i if i else 1
    denominator = ratio * d**n_top  # = N!·d^N with N = n_top
    lower = (numerator << bits) // denominator  # S_{N} with N odd: a lower bound
    last = a**n_top * (1 << bits)  # |last term| · N!·d^N·2^bits
    upper = _ceil_div((numerator << bits) + last, denominator)
    return max(lower, 0), upper


@lru_cache(maxsize=64)
def _exp_neg_one(bits: int) -> tuple[int, int]:
    return _series_bracket(1, 1, bits)


def _power_bracket(lo: int, hi: int, n: int, bits: int) -> tuple[int, int]:
    """Bounds of (lo/2^bits)^n and (hi/2^bits)^n, each product rounded outward."""
    out_lo, out_hi = 1 << bits, 1 << bits
    base_lo, base_hi = lo, hi
    while n:
        if n & 1:
            out_lo = (out_lo * base_lo) >> bits
            out_hi = _ceil_div(out_hi * base_hi, 1 << bits)
        n >>= 1
        if n:
            base_lo = (base_lo * base_lo) >> bits
            base_hi = _ceil_div(base_hi * base_hi, 1 << bits)
    return out_lo, out_hi


def _exp_neg_ints(x: Fraction, work: int) -> tuple[int, int]:
    """(lo, hi) integers bracketing 2^work · exp(-x) for a rational x >= 0."""
    n, rest = divmod(x.numerator, x.denominator)
    f_lo, f_hi = _series_bracket(rest, x.denominator, work)
    if n:
        e_lo, e_hi = _exp_neg_one(work)
        p_lo, p_hi = _power_bracket(e_lo, e_hi, n, work)
        f_lo = (f_lo * p_lo) >> work
        f_hi = _ceil_div(f_hi * p_hi, 1 << work)
    return f_lo, f_hi


def _dyadic(lo: int, hi: int, bits: int) -> tuple[Fraction, Fraction]:
    """Round a bracket at ``bits + _GUARD`` bits outward to ``bits`` bits (hi stays > 0)."""
    lo_out = lo >> _GUARD
    hi_out = max(_ceil_div(hi, 1 << _GUARD), 1)
    return Fraction(lo_out, 1 << bits), Fraction(hi_out, 1 << bits)


def exp_neg_bounds(x: Fraction, bits: int = DEFAULT_BITS) -> tuple[Fraction, Fraction]:
    """Certified ``(lo, hi)`` with ``lo <= exp(-x) <= hi``, for a rational ``x >= 0``.

    Both are dyadic rationals with denominator ``2^bits``; ``hi >= 2^-bits > 0``.
    """
    x = Fraction(x)
    if x < 0:
        raise DPValueError(f"exp_neg_bounds needs x >= 0, got {x}")
    return _dyadic(*_exp_neg_ints(x, bits + _GUARD), bits)


def exp_neg_multiples(
    x: Fraction, multiples: list[int], bits: int = DEFAULT_BITS
) -> list[tuple[int, int]]:
    """Integer brackets ``(lo, hi)`` of ``2^bits · exp(-k·x)`` for each k in ``multiples``.

    ``x >= 0`` rational, each k >= 0 an integer. One bracket of exp(-x), raised to each
    k by binary powering with outward rounding: cheaper than `exp_neg_bounds` per term
    when many multiples of one x are needed (the discrete Gaussian's weights
    exp(-y²/(2σ²)) are the multiples y² of 1/(2σ²)). Integers over the common
    denominator ``2^bits`` so that sums of many weights stay exact and fast.
    """
    x = Fraction(x)
    if x < 0 or any(k < 0 for k in multiples):
        raise DPValueError("exp_neg_multiples needs x >= 0 and multiples >= 0")
    work = bits + _GUARD
    base_lo, base_hi = _exp_neg_ints(x, work)
    out = []
    for k in multiples:
        lo, hi = _power_bracket(base_lo, base_hi, k, work)
        out.append((lo >> _GUARD, max(_ceil_div(hi, 1 << _GUARD), 1)))
    return out


def exp_bounds(x: Fraction, bits: int = DEFAULT_BITS) -> tuple[Fraction, Fraction]:
    """Certified ``(lo, hi)`` with ``lo <= exp(x) <= hi`` for any rational ``x``.

    For x > 0 the bounds are the reciprocals of `exp_neg_bounds`'s (an upper bound of
    exp(x) from a lower bound of exp(-x)); a lower bound of 0 for exp(-x) would give no
    upper bound, so ``x`` above ``bits/2`` (where exp(-x) nears the ulp) is refused.
    """
    x = Fraction(x)
    if x <= 0:
        return exp_neg_bounds(-x, bits)
    if x > bits // 2:
        raise DPValueError(
            f"exp_bounds: exponent {float(x):.6g} is above {bits // 2} (bits/2); "
            f"pass more bits for exp of a larger exponent"
        )
    lo, hi = exp_neg_bounds(x, bits)
    return 1 / hi, 1 / lo
