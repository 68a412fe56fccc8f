"""An exact reference δ(ε) for compositions of discrete Gaussians, discrete Laplaces and
pure-DP events, written apart from the accountant (it imports nothing of
`dp_pipeline.accounting`), and a seeded generator of random mixtures.

Every privacy loss is an exact rational: a discrete Gaussian N_Z(0, σ²) with shift μ has
the loss μ²/(2σ²) + (μ/σ²)·y; a discrete Laplace of scale b with shift Δ has
(|y - Δ| - |y|)/b, i.e. -Δ/b + (2/b)·k for k = 0..Δ (k = 0 for y >= Δ, k = Δ for y <= 0);
pure ε₀-DP has its dominating randomized response, ±ε₀. All three are symmetric, so one
neighbouring direction gives δ. The composed loss is C + γ·w with C the sum of the
offsets, γ the rational gcd of every step and w an integer.

Masses come from mpmath at 50 digits (the discrete Gaussian's normaliser by Poisson
summation, the discrete Laplace's in closed form), rounded to float64. Compositions are
direct (never FFT): outer products of non-negative masses, merged by exact integer
position, so every mass keeps a relative error bound R (one unit roundoff u per product,
(k - 1)·u for a sum of k terms) plus an absolute bound A for underflow. Discrete Gaussian
tails beyond the kept support and masses pruned below ``floor`` are a dropped mass τ
(each bounded explicitly), charged to the upper end only: the kept part is a
sub-probability measure whose δ-contribution is at most the true one.

δ(ε) = Σ_{L > ε} m_L·(1 - e^{ε - L}) is summed with L - ε computed from the exact
rationals, so the terms near the top of the support keep their relative precision.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np

from dp_pipeline.accounting.events import PureDP
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

UNIT = 2.0**-53
TINY = 2.0**-1074
_DPS = 50


def _mpf(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


def _gcd(values) -> Fraction:
    result = Fraction(0)
    for value in values:
        if result == 0:
            result = value
            continue
        result = Fraction(
            math.gcd(result.numerator * value.denominator, value.numerator * result.denominator),
            result.denominator * value.denominator,
        )
    return result


@dataclass
class _Pmf:
    """Masses at integer positions (in units of γ), relative/absolute error, dropped mass."""

    positions: np.ndarray  # int64 or object (Python ints)
    masses: np.ndarray
    relative: float
    absolute: float
    dropped: float


@dataclass(frozen=True)
class _Component:
    offset: Fraction
    step: Fraction
    ks: list  # integers
    masses: list  # mpf
    dropped: mpmath.mpf  # tail mass not in ``masses`` (an upper bound on it)


def _gaussian_component(sigma2: Fraction, shift: int, floor: float) -> _Component:
    with mpmath.workdps(_DPS):
        s2 = _mpf(sigma2)
        if sigma2 >= 1:  # Poisson summation: Σ_y e^{-y²/2σ²} = √(2πσ²)·Σ_k e^{-2π²σ²k²}
            terms = [mpmath.exp(-2 * mpmath.pi**2 * s2 * k * k) for k in range(1, 8)]
            normaliser = mpmath.sqrt(2 * mpmath.pi * s2) * (1 + 2 * mpmath.fsum(terms))
        else:
            normaliser = 1 + 2 * mpmath.fsum(
                mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) for y in range(1, 60)
            )
        # keep |y| <= T with e^{-T²/2σ²}/Z >= floor·1e-3
        reach = -math.log(floor) + math.log(1e3) + float(mpmath.log(normaliser))
        limit = int(math.sqrt(2 * float(sigma2) * max(reach, 1.0))) + 1
        ks = list(range(-limit, limit + 1))
        masses = [mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) / normaliser for y in ks]
        # P[|Y| > T] <= 2·P[Y = T+1]/(1 - e^{-(2T+3)/(2σ²)}) (ratio of consecutive terms)
        nxt = mpmath.exp(-mpmath.mpf((limit + 1) ** 2) / (2 * s2)) / normaliser
        dropped = 2 * nxt / (1 - mpmath.exp(-mpmath.mpf(2 * limit + 3) / (2 * s2)))
    return _Component(
        Fraction(shift * shift) / (2 * sigma2), Fraction(shift) / sigma2, ks, masses, dropped
    )


def _laplace_component(scale: Fraction, shift: int) -> _Component:
    with mpmath.workdps(_DPS):
        q = mpmath.exp(-1 / _mpf(scale))
        c = (1 - q) / (1 + q)
        masses = []
        for k in range(shift + 1):
            y = shift - k
            if k == 0:
                masses.append(q**shift / (1 + q))  # P[Y >= Δ]
            elif k == shift:
                masses.append(1 / (1 + q))  # P[Y <= 0]
            else:
                masses.append(c * q**y)
    return _Component(
        -Fraction(shift) / scale, 2 / scale, list(range(shift + 1)), masses, mpmath.mpf(0)
    )


def _pure_component(epsilon0: Fraction) -> _Component:
    with mpmath.workdps(_DPS):
        e = mpmath.exp(_mpf(epsilon0))
        masses = [1 / (1 + e), e / (1 + e)]
    return _Component(-epsilon0, 2 * epsilon0, [0, 1], masses, mpmath.mpf(0))


def components_of(plan, floor: float = 1e-320) -> list[tuple[_Component, int]]:
    """(component, count) for a plan given as (mechanism, shifts tuple, count) triples."""
    result = []
    for mechanism, shifts, count in plan:
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        for shift in shifts:
            if shift == 0:
                continue
            if isinstance(mechanism, DiscreteGaussian):
                result.append((_gaussian_component(mechanism.sigma2, shift, floor), count))
            elif isinstance(mechanism, DiscreteLaplace):
                result.append((_laplace_component(mechanism.scale, shift), count))
            elif isinstance(mechanism, PureDP):
                if mechanism.pure_epsilon > 0:
                    result.append((_pure_component(Fraction(mechanism.pure_epsilon)), count))
            else:
                raise TypeError(type(mechanism).__name__)
    return result


def _as_pmf(component: _Component, unit: Fraction, floor: float) -> _Pmf:
    multiplier = component.step / unit
    assert multiplier.denominator == 1
    n = multiplier.numerator
    floats = np.array([float(m) for m in component.masses])
    keep = floats >= floor
    # masses below the floor (or underflowing to 0 or subnormal) join the dropped mass
    dropped = float(component.dropped) + float(math.fsum(floats[~keep])) + TINY * len(floats)
    positions = [k * n for i, k in enumerate(component.ks) if keep[i]]
    wide = max((abs(p) for p in positions), default=0) >= 2**40
    positions = np.array(positions, dtype=object if wide else np.int64)
    return _Pmf(positions, floats[keep], UNIT, 0.0, dropped)


def _convolve(a: _Pmf, b: _Pmf, floor: float) -> _Pmf:
    positions = np.add.outer(a.positions, b.positions).ravel()
    masses = np.multiply.outer(a.masses, b.masses).ravel()
    if positions.dtype == object:
        order = sorted(range(len(positions)), key=positions.__getitem__)
        positions = positions[order]
        masses = masses[order]
        starts = [0] + [i for i in range(1, len(positions)) if positions[i] != positions[i - 1]]
        unique = positions[starts]
        counts = np.diff([*starts, len(positions)])
        summed = np.add.reduceat(masses, starts)
    else:
        unique, inverse, counts = np.unique(positions, return_inverse=True, return_counts=True)
        if unique.size and max(abs(int(unique[0])), abs(int(unique[-1]))) >= 2**60:
            return _convolve(
                _Pmf(a.positions.astype(object), a.masses, a.relative, a.absolute, a.dropped),
                b,
                floor,
            )
        summed = np.bincount(inverse.ravel(), weights=masses)
    merge = int(np.max(counts)) if len(counts) else 1
    # (1+R_a)(1+R_b)(1+u)(1+(k-1)u) - 1, rounded up generously
    relative = (a.relative + b.relative + merge * UNIT) * (1 + 1e-6) + a.relative * b.relative
    absolute = (a.absolute + b.absolute) * (1 + relative) + TINY * len(masses)
    keep = summed >= floor
    dropped = a.dropped + b.dropped + float(math.fsum(summed[~keep])) * (1 + relative)
    return _Pmf(unique[keep], summed[keep], relative, absolute, dropped)


class ReferenceComposition:
    """The exact composed loss of a plan; `delta` gives a rigorous (lower, upper) bracket.

    A discrete Gaussian coordinate with more than ``wide_points`` support points (the
    widest such σ², one copy) is not convolved: `_WideTail` sums it exactly for every
    atom of the rest's composition (Theorem 7 of Canonne, Kamath & Steinke in mpmath)."""

    def __init__(self, plan, floor: float = 1e-320, wide_points: int = 4096):
        plan, wide = _split_wide(plan, floor, wide_points)
        self.wide = None if wide is None else _WideTail(*wide, floor)
        parts = components_of(plan, floor)
        if not parts:
            if self.wide is None:
                raise ValueError("plan has no privacy loss")
            # the rest is the point mass at loss 0
            self.unit, self.offset = Fraction(1), Fraction(0)
            self.pmf = _Pmf(np.zeros(1, dtype=np.int64), np.ones(1), 0.0, 0.0, 0.0)
            return
        self.unit = _gcd([c.step for c, _ in parts])
        self.offset = sum((count * c.offset for c, count in parts), Fraction(0))
        pmf = None
        for component, count in parts:
            one = _as_pmf(component, self.unit, floor)
            for _ in range(count):
                pmf = one if pmf is None else _convolve(pmf, one, floor)
        order = np.argsort(pmf.positions.astype(float)) if pmf.positions.dtype != object else None
        if order is not None:
            pmf = _Pmf(
                pmf.positions[order], pmf.masses[order], pmf.relative, pmf.absolute, pmf.dropped
            )
        self.pmf = pmf

    def delta(self, epsilon: float) -> tuple[float, float]:
        """(lower, upper) on the exact δ(ε) of the composition."""
        if self.wide is not None:
            return self.wide.delta(Fraction(epsilon), self.offset, self.unit, self.pmf)
        eps = Fraction(epsilon)
        threshold = (eps - self.offset) / self.unit  # w* : L > ε iff w > w*
        first = math.floor(threshold) + 1
        fraction = Fraction(first) - threshold  # in (0, 1]
        positions = self.pmf.positions
        if positions.dtype == object:
            above = np.array([int(p) >= first for p in positions], dtype=bool)
        elif abs(first) >= 2**62:
            above = np.full(len(positions), first < 0)
        else:
            above = positions >= first  # w > w* iff w >= first (w an integer)
        masses = self.pmf.masses[above]
        if positions.dtype == object or abs(first) >= 2**60:
            distances = np.array([int(w) - first for w in positions[above]], dtype=np.float64)
        else:
            distances = (positions[above] - first).astype(np.float64)
        # far from ε (4 or more lattice steps above) the float gap γ·(f + j) is within 3u
        t = float(self.unit) * (float(fraction) + distances)
        terms = masses * -np.expm1(-t)  # m·(1 - e^{-t})
        rests = masses * np.exp(-t)  # m·e^{-t}
        with mpmath.workdps(30):  # near ε: t in mpmath from the exact rationals
            gamma = _mpf(self.unit)
            for index in np.flatnonzero(distances < 4):
                exact_t = gamma * (_mpf(fraction) + int(distances[index]))
                terms[index] = masses[index] * float(-mpmath.expm1(-exact_t))
                rests[index] = masses[index] * float(mpmath.exp(-exact_t))
        total = float(np.sum(terms))
        # numpy's pairwise sum of n non-negative terms: within (log2 n + 20)·u; terms 6u
        relative = self.pmf.relative + (2 * math.log2(max(2, len(terms))) + 48) * UNIT
        lower = max(0.0, total * (1 - relative) - self.pmf.absolute)
        upper = min(1.0, total * (1 + relative) + self.pmf.absolute + self.pmf.dropped)
        # near δ = 1 the complement 1 - δ = E[min(1, e^{ε-L})] is the precise quantity
        # (the dropped mass counted as min = 1)
        complement = float(np.sum(self.pmf.masses[~above])) + float(np.sum(rests))
        complement = complement * (1 + relative) + self.pmf.absolute + self.pmf.dropped
        lower = max(lower, math.nextafter(1.0 - complement, 0.0))
        return lower, upper

    def epsilon(self, delta: float, high: float = 1e4, rtol: float = 1e-13) -> tuple[float, float]:
        """(lower, upper) on the smallest ε with δ(ε) <= ``delta`` (bisection to ``rtol``)."""
        low_eps, high_eps = 0.0, high
        if self.delta(0.0)[1] <= delta:
            return 0.0, 0.0
        for _ in range(200):  # lower end: δ_lower(ε) > delta certifies ε_true > ε
            mid = 0.5 * (low_eps + high_eps)
            if self.delta(mid)[0] > delta:
                low_eps = mid
            else:
                high_eps = mid
            if high_eps - low_eps <= rtol * max(1.0, high_eps):
                break
        lower = low_eps
        low_eps, high_eps = lower, high
        for _ in range(200):  # upper end: δ_upper(ε) <= delta certifies ε_true <= ε
            mid = 0.5 * (low_eps + high_eps)
            if self.delta(mid)[1] <= delta:
                high_eps = mid
            else:
                low_eps = mid
            if high_eps - low_eps <= rtol * max(1.0, high_eps):
                break
        return lower, high_eps


def _split_wide(plan, floor: float, wide_points: int):
    """(the plan without one copy of its widest discrete Gaussian coordinate, that
    coordinate's (σ², shift)), or (plan, None) when no coordinate has over ``wide_points``
    support points."""
    widest = None
    for index, (mechanism, shifts, _count) in enumerate(plan):
        if not isinstance(mechanism, DiscreteGaussian):
            continue
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        for shift in shifts:
            points = 2 * math.sqrt(2 * float(mechanism.sigma2) * 800) + 3
            if shift and points > wide_points:
                key = (mechanism.sigma2, shift)
                if widest is None or key > widest[0]:
                    widest = (key, index)
    if widest is None:
        return plan, None
    (sigma2, shift), index = widest
    mechanism, shifts, count = plan[index]
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    rest = [entry for i, entry in enumerate(plan) if i != index]
    if count > 1:
        rest.append((mechanism, shifts, count - 1))
    others = list(shifts)
    others.remove(shift)
    if any(others):
        rest.append((mechanism, tuple(others), 1))
    return rest, (sigma2, shift)


class _WideTail:
    """One discrete Gaussian coordinate N_Z(0, σ²), shift μ, loss a + b·y (a = μ²/(2σ²),
    b = μ/σ²), beside a rest whose loss is C + γ·w with masses m_w. For each w, with
    t = ε - C - γ·w and y* the first y with a + b·y > t (exact rationals),

        E[(1 - e^{t - a - bY})₊] = S(y*) - S(R + 1) - e^{t}·(S(y* + μ) - S(R + μ + 1)),

    since P(y)·e^{-a-by} = P(y + μ); S(y) = Σ_{y' >= y} P(y') over the kept |y| <= R
    (and up to R + μ). Everything in mpmath at 60 digits (the subtraction keeps 40 or
    more of them wherever δ_w >= 1e-20·S(y*)); each term's error is charged at 1e-40·S(y*),
    the Gaussian's tails beyond R are at most its dropped mass D_G per unit of rest mass."""

    def __init__(self, sigma2: Fraction, shift: int, floor: float):
        component = _gaussian_component(sigma2, shift, floor)
        self.a, self.b, self.shift = component.offset, component.step, shift
        self.low = component.ks[0]
        self.limit = component.ks[-1]
        with mpmath.workdps(60):
            s2 = _mpf(sigma2)
            normaliser = component.masses[0] / mpmath.exp(-mpmath.mpf(self.low**2) / (2 * s2))
            extra = [
                mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) / normaliser
                for y in range(self.limit + 1, self.limit + shift + 1)
            ]
            masses = list(component.masses) + extra
            tails = [mpmath.mpf(0)] * (len(masses) + 1)
            for i in range(len(masses) - 1, -1, -1):
                tails[i] = tails[i + 1] + masses[i]
        self.tails = tails  # tails[i] = S(low + i), S beyond the masses 0
        self.dropped = float(component.dropped) * (1 + 1e-10)

    def _s(self, y: int):
        index = min(max(y - self.low, 0), len(self.tails) - 1)
        return self.tails[index]

    def delta(self, eps: Fraction, offset: Fraction, unit: Fraction, pmf: _Pmf):
        total = mpmath.mpf(0)
        error = mpmath.mpf(0)
        top = self._s(self.limit + 1)
        top_shifted = self._s(self.limit + self.shift + 1)
        start = (eps - offset - self.a) / self.b  # y* = floor(start - (γ/b)·w) + 1
        ratio = unit / self.b
        with mpmath.workdps(60):
            base = _mpf(eps - offset)
            gamma = _mpf(unit)
            for w, mass in zip(pmf.positions, pmf.masses, strict=True):
                w = int(w)
                first = max(math.floor(start - ratio * w) + 1, self.low)
                if first > self.limit:
                    continue
                t = base - gamma * w
                upper_tail = self._s(first) - top
                term = upper_tail - mpmath.exp(t) * (self._s(first + self.shift) - top_shifted)
                total += mpmath.mpf(float(mass)) * max(term, mpmath.mpf(0))
                error += mpmath.mpf(float(mass)) * upper_tail
        error = float(error) * 1e-40
        value = float(total)  # within one rounding of the exact sum over the kept masses
        relative = pmf.relative + 4 * UNIT
        lower = max(0.0, value * (1 - relative) - pmf.absolute - error)
        upper = value * (1 + relative) + pmf.absolute + pmf.dropped + self.dropped + error
        upper = min(1.0, math.nextafter(upper, 2.0))
        return min(lower, upper), upper


def _rational(rng: random.Random, low: float, high: float) -> Fraction:
    denominator = rng.choice([1, 2, 3, 4, 5, 7, 10, 16, 50, 64, 100])
    value = math.exp(rng.uniform(math.log(low), math.log(high)))
    return max(Fraction(1, denominator), Fraction(round(value * denominator), denominator))


def _support_size(mechanism, shifts) -> float:
    size = 1.0
    for shift in shifts:
        if isinstance(mechanism, DiscreteGaussian):
            size *= 2 * math.sqrt(2 * float(mechanism.sigma2) * 800) + 3
        elif isinstance(mechanism, DiscreteLaplace):
            size *= shift + 1
        else:
            size *= 2
    return size


def random_plan(seed: int, max_cost: float = 3e6, wide: bool = False):
    """A seeded mixture: 1-5 events of discrete Gaussians, discrete Laplaces and pure-DP
    events with rational parameters, shifts up to 20, at most 20 mechanisms in all,
    drawn again (same seed stream) until the reference's direct composition is cheap.

    ``wide``: the discrete Gaussians' σ² go up to 1e6 and the first draw with at most 20
    mechanisms is kept, whatever its cost (the "wide" family; the reference sums one
    copy of the widest Gaussian by its tails, `_WideTail`, and convolves the rest)."""
    rng = random.Random(seed)
    while True:
        plan, total, sizes = [], 0, []
        for _ in range(rng.randint(1, 5)):
            kind = rng.choice(["dg", "dl", "pure"])
            count = rng.choice([1, 1, 1, 2, 3, 4])
            if kind == "pure":
                mechanism = PureDP(_rational(rng, 1 / 64, 60))
                shifts = (1,)
            else:
                width = rng.choice([1, 1, 1, 2])
                shifts = tuple(rng.randint(1, 20) for _ in range(width))
                if kind == "dg":
                    mechanism = DiscreteGaussian(_rational(rng, 0.1, 1e6 if wide else 400))
                else:
                    mechanism = DiscreteLaplace(_rational(rng, 0.5, 300))
            total += count * len(shifts)
            plan.append((mechanism, shifts, count))
            sizes.append(_support_size(mechanism, shifts) ** count)
        cost = 1.0
        for size in sorted(sizes):
            cost *= size
        if total <= 20 and (wide or cost <= max_cost):
            return plan


def describe(plan) -> str:
    parts = []
    for mechanism, shifts, count in plan:
        if isinstance(mechanism, DiscreteGaussian):
            name = f"DG({mechanism.sigma2})"
        elif isinstance(mechanism, DiscreteLaplace):
            name = f"DL({mechanism.scale})"
        else:
            name = f"PureDP({mechanism.pure_epsilon})"
        parts.append(f"{count}x{name}@{shifts}")
    return " + ".join(parts)
