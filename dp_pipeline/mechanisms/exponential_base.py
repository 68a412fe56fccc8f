"""Exact choice of the base ``2**-η = (x/2**y)**z`` of the base-2 exponential mechanism.

Rigorous rational bounds on ``ln r`` (an atanh series with directed rounding,
integers only) decide ``z·ln(2**y/x) <= target`` exactly, so η is rounded DOWN
and the guarantee ε is never exceeded; ``ln 2`` is never rounded.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

from dp_pipeline.errors import DPValueError, InternalError

__all__ = ["MAX_BASE_BITS", "choose_base", "ln_bounds", "log_not_above"]

MAX_BASE_BITS = 62


@functools.lru_cache(maxsize=4096)
def ln_bounds(r: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rational ``(lower, upper)`` with ``lower <= ln(r) <= upper`` and width ``<= 2**-bits``.

    For ``1 <= r <= 2``: ``ln r = 2·atanh(t) = 2·Σ t**(2k+1)/(2k+1)`` with
    ``t = (r-1)/(r+1) <= 1/3``. Partial sums are lower bounds; the tail after
    ``K`` terms is at most ``2·t**(2K+1) / ((2K+1)(1-t²))``. Larger ``r`` is
    reduced by powers of two using the same bounds for ``ln 2``.
    """
    if r < 1:
        raise InternalError(f"ln_bounds expects r >= 1, got {r}")
    halvings = 0
    while r > 2:
        r /= 2
        halvings += 1
    low, high = _atanh_series(r, bits + 4 + halvings.bit_length())
    if halvings:
        ln2_low, ln2_high = _atanh_series(Fraction(2), bits + 4 + halvings.bit_length())
        low += halvings * ln2_low
        high += halvings * ln2_high
    return low, high


def _atanh_series(r: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    # Fixed point with directed rounding: every term is floored into `lower`
    # and ceiled into `upper`, so the bounds stay bounds; integers only.
    num, den = r.numerator - r.denominator, r.numerator + r.denominator  # t = num/den
    if num == 0:
        return Fraction(0), Fraction(0)
    precision = bits + 8
    scale = 1 << precision
    lower = upper = 0
    power_num, power_den = num, den  # t**(2k+1)
    num2, den2 = num * num, den * den
    k = 0
    while True:
        numerator = 2 * power_num * scale
        denominator = power_den * (2 * k + 1)
        lower += numerator // denominator
        upper += -(-numerator // denominator)
        power_num *= num2
        power_den *= den2
        k += 1
        # tail <= 2·t**(2k+1) / ((2k+1)(1 - t²)), rounded up
        tail_num = 2 * power_num * den2 * scale
        tail_den = power_den * (2 * k + 1) * (den2 - num2)
        tail = -(-tail_num // tail_den)
        if tail * (1 << bits) <= scale:
            return Fraction(lower, scale), Fraction(upper + tail, scale)


def log_not_above(r: Fraction, z: int, target: Fraction) -> bool:
    """Decide ``z·ln(r) <= target`` exactly (``r > 1`` rational, so ``ln r`` is irrational)."""
    for bits in (64, 128, 256, 512, 1024, 2048, 4096):
        low, high = ln_bounds(r, bits)
        if z * high <= target:
            return True
        if z * low > target:
            return False
    raise InternalError(f"could not compare {z}·ln({r}) with {target} to 4096 bits")


def choose_base(target: Fraction, base_bits: int) -> tuple[int, int, int]:
    """``(x, y, z)`` with ``η·ln2 = z·ln(2**y/x) <= target``, the largest for that ``y`` and ``z``.

    ``target`` is ``ε/(c·Δu)``. ``z`` is the smallest integer making
    ``target/z <= ln 2``; ``y`` is ``base_bits`` plus ``ceil(log2(z/target)) - 1``
    when that is positive (and grows further only if ``x`` would reach ``2**y``). The fraction
    ``x/2**y`` is returned in lowest terms.
    """
    ln2_low, _ = ln_bounds(Fraction(2), 64)
    z = max(1, math.ceil(target / ln2_low))
    per_factor = target / z
    # Small targets need more bits: x ≈ 2**y·(1 - per_factor) must resolve
    # per_factor to about 2**-base_bits relative precision.
    y = base_bits + max(0, math.ceil(math.log2(1 / float(per_factor))) - 1)
    while y <= MAX_BASE_BITS:
        denominator = 1 << y
        # Float start, then exact correction: x is the smallest integer with
        # ln(2**y / x) <= per_factor.
        x = max(1, min(denominator, math.ceil(denominator * math.exp(-float(per_factor)))))
        while x < denominator and not log_not_above(Fraction(denominator, x), 1, per_factor):
            x += 1
        while x > 1 and log_not_above(Fraction(denominator, x - 1), 1, per_factor):
            x -= 1
        if x < denominator:
            while x % 2 == 0 and y > 1:
                x //= 2
                y -= 1
            return x, y, z
        y += 1
    raise DPValueError(
        f"epsilon is too small to be represented: ε/(c·Δu) = {float(target):.3g} needs more than "
        f"{MAX_BASE_BITS} bits for the base 2**-η; raise epsilon"
    )
