"""Certified tail probabilities of the discrete Laplace and discrete Gaussian noise.

Each function returns ``(lo, hi)`` `Fraction`s with ``lo <= P <= hi``, from the
certified exponentials of `dp_pipeline.keyselect.exact_exp` and interval arithmetic
whose every step rounds outward. The selection's δ uses the upper ends.

Notation: ``Lap_Z(b)`` has P[Z = z] = (1-α)/(1+α)·α^|z| with α = e^{-1/b};
``N_Z(0, σ²)`` has P[Z = z] = w_z / N with w_z = e^{-z²/(2σ²)}, N = Σ_z w_z.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import ceil, isqrt

from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect.exact_exp import DEFAULT_BITS, exp_neg_bounds, exp_neg_multiples

__all__ = [
    "GAUSSIAN_BITS",
    "GaussianTails",
    "laplace_tail",
    "truncated_laplace_tail",
    "truncated_laplace_top_mass",
]

Bracket = tuple[Fraction, Fraction]

# The Gaussian's weights are summed at this precision: ulp 2^-192 sits far below any
# δ the plans accept (>= 2^-100), so the bound's relative slack stays below 2^-90.
GAUSSIAN_BITS = 192
# sqrt(2π) >= 2.5066282746310002 (the constant is 2.50662827463100050241...).
_SQRT_TWO_PI_LOWER = Fraction(25066282746310002, 10**16)


@lru_cache(maxsize=64)
def _alpha(scale: Fraction, bits: int) -> Bracket:
    return exp_neg_bounds(1 / scale, bits)


def laplace_tail(scale: Fraction, k: int, bits: int = DEFAULT_BITS) -> Bracket:
    """Bracket of P[Z >= k] for Z ~ Lap_Z(scale), any integer k.

    P[Z >= k] = α^k/(1+α) for k >= 1 (a geometric sum), and 1 - α^(1-k)/(1+α) for
    k <= 0 (by symmetry); each end uses the bracket of α^j = e^{-j/scale} and of α
    on the side that makes the quotient larger (resp. smaller).
    """
    a_lo, a_hi = _alpha(Fraction(scale), bits)
    j = k if k >= 1 else 1 - k
    p_lo, p_hi = exp_neg_bounds(Fraction(j) / Fraction(scale), bits)
    upper_lo, upper_hi = p_lo / (1 + a_hi), p_hi / (1 + a_lo)
    if k >= 1:
        return upper_lo, upper_hi
    return 1 - upper_hi, 1 - upper_lo


def truncated_laplace_top_mass(scale: Fraction, bound: int) -> Bracket:
    """Bracket of P[Z = K] for Z ~ Lap_Z(scale) conditioned on |Z| <= K (K = ``bound``).

    P = α^K(1-α)/(1+α) / (1 - 2α^{K+1}/(1+α)) = α^K(1-α) / (1 + α - 2α^{K+1});
    numerator and denominator are bounded separately (each term on its own side).
    """
    inverse = 1 / Fraction(scale)
    a_lo, a_hi = exp_neg_bounds(inverse)
    k_lo, k_hi = exp_neg_bounds(bound * inverse)
    k1_lo, k1_hi = exp_neg_bounds((bound + 1) * inverse)
    hi = k_hi * (1 - a_lo) / (1 + a_lo - 2 * k1_hi)
    lo = k_lo * (1 - a_hi) / (1 + a_hi - 2 * k1_lo)
    return lo, hi


def truncated_laplace_tail(
    scale: Fraction, bound: int, k: int, bits: int = DEFAULT_BITS
) -> Bracket:
    """Bracket of P[Z >= k] for Z ~ Lap_Z(scale) conditioned on |Z| <= K (K = ``bound``).

    For 1 <= k <= K: (α^k - α^{K+1}) / (1 + α - 2α^{K+1}) (a finite geometric sum over
    the normaliser); 0 above K; by symmetry 1 - P[Z >= 1 - k] for k <= 0.
    """
    if k > bound:
        return Fraction(0), Fraction(0)
    if k <= 0:
        lo, hi = truncated_laplace_tail(scale, bound, 1 - k, bits)
        return 1 - hi, 1 - lo
    inverse = 1 / Fraction(scale)
    a_lo, a_hi = _alpha(Fraction(scale), bits)
    k_lo, k_hi = exp_neg_bounds(k * inverse, bits)
    t_lo, t_hi = exp_neg_bounds((bound + 1) * inverse, bits)
    lo = max(Fraction(0), k_lo - t_hi) / (1 + a_hi - 2 * t_lo)
    hi = (k_hi - t_lo) / (1 + a_lo - 2 * t_hi)
    return lo, min(hi, Fraction(1))


class GaussianTails:
    """Brackets of P[Z >= k] for Z ~ N_Z(0, σ²), from one table of certified weights.

    The weights w_y for 0 <= y <= Y are bracketed once (Y about σ·sqrt(2·192·ln 2),
    where w_Y is below 2^-192); then, with integer sums over the common denominator:

    - Σ_{y >= k} w_y <= Σ_{y=k}^{Y-1} w_y + w_Y·(1 + σ²/Y): the tail past Y is at most
      w_Y + ∫_Y^∞ e^{-x²/(2σ²)} dx <= w_Y + w_Y·σ²/Y (w decreasing on [Y, ∞); Mills'
      ratio bound); the lower end keeps the finite sum only;
    - N = 1 + 2·Σ_{y >= 1} w_y, bracketed the same way, and N >= sqrt(2π)·σ
      (Poisson summation: N = sqrt(2π)σ·(1 + 2Σ_{j>=1} e^{-2π²σ²j²})).
    """

    def __init__(self, sigma2: Fraction, bits: int = GAUSSIAN_BITS) -> None:
        sigma2 = Fraction(sigma2)
        if sigma2 <= 0:
            raise DPValueError(f"sigma2 must be > 0, got {sigma2}")
        self.sigma2 = sigma2
        self.bits = bits
        # Y >= σ·sqrt(2·bits·ln 2): w_Y <= 2^-bits. ln 2 < 0.7 keeps it an upper end.
        sigma_up = Fraction(isqrt(ceil(sigma2)) + 1)
        self.top = ceil(sigma_up * Fraction(isqrt(2 * bits * 7 // 10 * 100) + 1, 10)) + 2
        weights = exp_neg_multiples(1 / (2 * sigma2), [y * y for y in range(self.top + 1)], bits)
        self._lo = [w[0] for w in weights]
        self._hi = [w[1] for w in weights]
        # Suffix sums over y in [k, top-1] (the last weight enters through the Mills bound).
        self._suffix_lo = [0] * (self.top + 1)
        self._suffix_hi = [0] * (self.top + 1)
        for y in range(self.top - 1, -1, -1):
            self._suffix_lo[y] = self._suffix_lo[y + 1] + self._lo[y]
            self._suffix_hi[y] = self._suffix_hi[y + 1] + self._hi[y]
        scale = 1 << bits
        last_hi = Fraction(self._hi[self.top]) * (1 + sigma2 / self.top)
        self._beyond_hi = last_hi  # bound of Σ_{y >= top} w_y, times 2^bits
        sum_lo = Fraction(1) + Fraction(2 * (self._suffix_lo[1] + self._lo[self.top]), scale)
        sum_hi = Fraction(1) + 2 * (self._suffix_hi[1] + last_hi) / scale
        sigma_lo = Fraction(isqrt(sigma2.numerator * sigma2.denominator * 10**40), 10**20)
        sigma_lo /= sigma2.denominator
        self.normaliser = (max(sum_lo, _SQRT_TWO_PI_LOWER * sigma_lo), sum_hi)

    def tail(self, k: int) -> Bracket:
        """Bracket of P[Z >= k] (k any integer; k <= 0 by symmetry)."""
        if k <= 0:
            lo, hi = self.tail(1 - k)
            return 1 - hi, 1 - lo
        n_lo, n_hi = self.normaliser
        scale = 1 << self.bits
        if k >= self.top:
            # Σ_{y >= k} w_y <= w_k(1 + σ²/k) <= w_top(1 + σ²/top) (k >= top).
            return Fraction(0), self._beyond_hi / scale / n_lo
        mass_lo = Fraction(self._suffix_lo[k] + self._lo[self.top], scale)
        mass_hi = (self._suffix_hi[k] + self._beyond_hi) / scale
        return mass_lo / n_hi, min(mass_hi / n_lo, Fraction(1))
