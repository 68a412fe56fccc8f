"""An exact mpmath reference δ(ε) for one wide discrete Gaussian beside randomized responses.

Written apart from the accountant (it imports nothing of `dp_pipeline.accounting`): the
plan is N_Z(0, σ²) with shift 1 composed with randomized responses RR(ε_j) (pure ε_j-DP's
dominating pair; a discrete Laplace of scale b with shift 1 is RR(1/b): its loss is +1/b
on y <= 0, of mass e^{1/b}/(1 + e^{1/b}), and -1/b elsewhere).

The randomized responses compose to finitely many atoms r with exact rational losses; the
Gaussian's loss is a + b·y (a = 1/(2σ²), b = 1/σ²), and since P(y)·e^{-a-by} = P(y + 1),

    δ(ε) = Σ_r m_r·(S(y_r) - e^{ε - r}·S(y_r + 1)),   y_r the first y with a + b·y > ε - r,

with S(y) = P[Y >= y]. For y <= σ²/2, S is summed by Euler–Maclaurin on
f(x) = e^{-x²/(2σ²)}: Σ_{k >= y} f(k) = ∫_y^∞ f + f(y)/2 - f'(y)/12 + f'''(y)/720 -
f^{(5)}(y)/30240 + R, |R| <= 2ζ(6)/(2π)^6·∫_y^∞ |f^{(6)}| (bounded in closed form by
incomplete gamma functions); beyond, directly (each term below e^{-1/2} of the one
before). The normaliser Σ_k f(k) = sqrt(2π)σ·(1 + 2Σ_{k>=1} e^{-2π²σ²k²}) by Poisson
summation (the terms past k = 3 are below e^{-18π²σ²}). Everything at the calling module's
mpmath precision; `wide_gaussian_delta` returns an interval around the exact δ that
carries the remainder bounds: for σ² = 10^12 about 1e-16 of δ wide, far finer than a
float's ulp at any magnitude, subnormals included.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import mpmath as mp


def _mpf(value: Fraction | int) -> mp.mpf:
    value = Fraction(value)
    return mp.mpf(value.numerator) / value.denominator


def _tail(sigma2: mp.mpf, y: int) -> tuple[mp.mpf, mp.mpf]:
    """Σ_{k >= y} e^{-k²/(2σ²)} for y >= 0 and a bound on its error (module docstring)."""
    x = mp.mpf(y)
    s = sigma2
    if x > s / 2:  # each term below e^{-1/2} of the one before: sum until negligible
        total, k, term = mp.mpf(0), 0, mp.mpf(1)
        while k < 10 or term > total * mp.mpf(10) ** (-mp.mp.dps):
            term = mp.exp(-((x + k) ** 2) / (2 * s))
            total += term
            k += 1
        return total, 2 * term  # the rest is below term·e^{-1/2}/(1 - e^{-1/2})
    f = mp.exp(-(x * x) / (2 * s))
    d1 = -x / s * f  # the odd derivatives of f are polynomials in x and 1/s times f
    d3 = (3 * x / s**2 - x**3 / s**3) * f
    d5 = (-15 * x / s**3 + 10 * x**3 / s**4 - x**5 / s**5) * f
    integral = mp.sqrt(mp.pi * s / 2) * mp.erfc(x / mp.sqrt(2 * s))
    # f^{(6)} = σ^{-6}·He_6(x/σ)·f with |He_6(w)| <= w^6 + 15w^4 + 45w^2 + 15, and
    # ∫_y^∞ x^n f = (2s)^{(n+1)/2}/2·Γ((n+1)/2, y²/(2s))
    sixth = mp.mpf(0)
    for n, coefficient in ((6, 1), (4, 15), (2, 45), (0, 15)):
        half = mp.mpf(n + 1) / 2
        moment = (2 * s) ** half / 2 * mp.gammainc(half, x * x / (2 * s))
        sixth += coefficient * moment / s ** (3 + mp.mpf(n) / 2)
    error = 2 * mp.zeta(6) / (2 * mp.pi) ** 6 * sixth
    return integral + f / 2 - d1 / 12 + d3 / 720 - d5 / 30240, error


def _survival(sigma2: mp.mpf, y: int, normaliser: mp.mpf) -> tuple[mp.mpf, mp.mpf]:
    """S(y) = P[Y >= y] for Y ~ N_Z(0, σ²), and a bound on its error."""
    if y >= 0:
        value, error = _tail(sigma2, y)
        return value / normaliser, error / normaliser
    value, error = _tail(sigma2, -y + 1)  # symmetry: P[Y >= y] = 1 - P[Y >= 1 - y]
    return 1 - value / normaliser, error / normaliser


def rr_atoms(epsilons: list[Fraction]) -> list[tuple[Fraction, mp.mpf]]:
    """The composed randomized responses RR(ε_j): (exact loss, mass) atoms."""
    atoms: dict[Fraction, mp.mpf] = {}
    for signs in itertools.product((1, -1), repeat=len(epsilons)):
        loss = sum((sign * e for sign, e in zip(signs, epsilons, strict=True)), Fraction(0))
        mass = mp.mpf(1)
        for sign, e in zip(signs, epsilons, strict=True):
            mass *= 1 / (1 + mp.exp(-sign * _mpf(e)))  # e^{±ε}/(1 + e^{±ε})
        atoms[loss] = atoms.get(loss, mp.mpf(0)) + mass
    return sorted(atoms.items())


def wide_gaussian_delta(
    sigma2: int | Fraction, epsilons: list[Fraction], eps: float
) -> tuple[mp.mpf, mp.mpf]:
    """(lower, upper) around the exact δ(ε) of N_Z(0, σ²) (shift 1) composed with RR(ε_j)
    for each ε_j: the remainder bounds plus 10^{5-dps} relative for mpmath's rounding."""
    sigma2 = Fraction(sigma2)
    s = _mpf(sigma2)
    normaliser = mp.sqrt(2 * mp.pi * s) * (
        1 + 2 * mp.fsum(mp.exp(-2 * mp.pi**2 * s * k * k) for k in range(1, 4))
    )
    a, b = 1 / (2 * sigma2), 1 / sigma2
    epsilon = Fraction(eps)
    total, error = mp.mpf(0), mp.mpf(0)
    for loss, mass in rr_atoms(epsilons):
        t = epsilon - loss
        first = math.floor((t - a) / b) + 1  # the first y with a + b·y > t
        upper_tail, upper_error = _survival(s, first, normaliser)
        shifted, shifted_error = _survival(s, first + 1, normaliser)
        weight = mp.exp(_mpf(t))
        total += mass * (upper_tail - weight * shifted)
        error += mass * (upper_error + weight * shifted_error)
    error += abs(total) * mp.mpf(10) ** (5 - mp.mp.dps)
    return max(total - error, mp.mpf(0)), total + error
