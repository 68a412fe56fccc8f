"""Bounded-range (DDR 2020) references in mpmath, shared by the selection tests.

Nothing here goes through the accountant: the closed-form two-point pair B_t of one
ε-bounded-range mechanism and the non-adaptive composition of such pairs. mpmath's
working precision is the calling test module's (`mp.mp.dps`).
"""

from __future__ import annotations

from fractions import Fraction

import mpmath as mp


def mpf_of(value):
    """``value`` (a Fraction, an int, a float or an mpf) as an mpf."""
    if isinstance(value, Fraction):
        return mp.mpf(value.numerator) / value.denominator
    return mp.mpf(value)


def p_of(eps, t):
    """P-mass of the loss ε - t in B_t (the other loss is -t)."""
    return (mp.e**eps - mp.e ** (eps - t)) / mp.expm1(eps)


def delta_one(eps, x):
    """δ(x) of one ε-bounded-range mechanism at its worst t (DDR's closed form)."""
    if x >= eps:
        return mp.mpf(0)
    if x <= -eps:
        return -mp.expm1(x)
    return (mp.e ** (eps / 2) - mp.e ** (x / 2)) ** 2 / mp.expm1(eps)


def non_adaptive_two(groups, x, grid: int):
    """max over a grid of (t_1, t_2) of δ(B_{t_1}^{⊗k_1} ⊗ B_{t_2}^{⊗k_2})(x): selections
    at two ε, each group with one fixed t (non-adaptive BR mechanisms: a lower bound of
    the adaptive optimum)."""
    (e1, k1), (e2, k2) = ((mpf_of(e), k) for e, k in groups)
    x = mpf_of(x)
    best = mp.mpf(0)
    for a in range(grid + 1):
        t1 = e1 * a / grid
        p1 = p_of(e1, t1)
        for b in range(grid + 1):
            t2 = e2 * b / grid
            p2 = p_of(e2, t2)
            total = mp.mpf(0)
            for i in range(k1 + 1):
                for j in range(k2 + 1):
                    loss = (k1 - i) * e1 - k1 * t1 + (k2 - j) * e2 - k2 * t2
                    if loss > x:
                        mass = mp.binomial(k1, i) * p1 ** (k1 - i) * (1 - p1) ** i
                        mass *= mp.binomial(k2, j) * p2 ** (k2 - j) * (1 - p2) ** j
                        total += mass * (1 - mp.e ** (x - loss))
            best = max(best, total)
    return best
