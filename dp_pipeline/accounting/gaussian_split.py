"""Exact δ(ε) of one wide discrete Gaussian beside finite supports, by tail sums
("support_exact + gaussian_tails").

A discrete Gaussian with a large σ² has a support (~78σ points) too wide to convolve
with the others, and beside small-σ² Gaussians, Laplaces, selections or pure-DP events
(whose losses sit far apart next to its narrow, fine-lattice loss) the MGF inversion's
integrand keeps returning at the multiples of its period: its bound on those returns can
exceed 20% of δ.
This path composes everything but that Gaussian exactly (`support_composition`: the
rest's loss C + γ·w with masses m_w) and sums the Gaussian's loss exactly for each w.

For n copies of N_Z(0, σ²) with shift μ the Gaussian part's loss is n·a + b·k, a =
μ²/(2σ²), b = μ/σ², k the sum of the n draws (masses P_k, the n-fold direct convolution
of the one-draw masses). Where that σ² has several shifts, every coordinate of it is
tried as the part first: its exact composition (`support_composition`,
on the lattice step b = gcd of the shifts/σ²) laid out densely, zeros included; the sums
below hold for any masses on a lattice. With t_w = ε - L_w and k*_w the first k with
n·a + b·k > t_w, at the gap g_w = (n·a + b·k*_w - t_w)/b in (0, 1],

    δ(ε) = Σ_w m_w·[(1 - e^{-b·g_w})·T(k*_w) + e^{-b·g_w}·V(k*_w)],
    T(i) = Σ_{k >= i} P_k,    V(i) = Σ_{k >= i} P_k·(1 - e^{-b(k - i)}),

and V(i) = (1 - e^{-b})·T(i+1) + e^{-b}·V(i+1): every sum has non-negative terms only, so
δ keeps its relative precision at any size (no subtraction of nearly equal tails).

Error budget (each term a bound, charged in `GaussianSplit.delta_bound`):

- the masses: m_w within R_w relative plus A_w in total (`support_composition`, as are
  the masses of a part composed there); the one-draw masses within R_1 relative
  (`support_composition.gaussian_masses`) plus
  2^-1073 absolute each (masses are kept down to `_PRUNE`, below the normal range), the
  n-fold convolution within R_1·n + (k + 1)·u per merge (non-negative products, summed),
  plus 2^-1074 per product for underflow, absolute;
- T by a sequential reverse sum within (N + 1)·u relative; V by the recursion within
  T's error plus 6u per step (N steps; the float b, e^{-b} and 1 - e^{-b} within 2u each);
- k*_w and g_w: ε - C - n·a and γ/b are exact rationals; x_w = (ε - C - n·a - γw)/b is
  split into an integer and a fraction whose float value is within 3u absolute; a gap
  below `_EXACT_GAP` (or a fraction too near 0 to decide its floor) is redone in exact
  rationals, so every g_w is within 6u/`_EXACT_GAP` relative and each factor within that
  plus 4u;
- the sum over w: numpy's pairwise sum of non-negative terms (`support_composition`);
- the dropped masses (the rest's pruned masses, the Gaussian's tails beyond ⌈39σ⌉ + 2):
  added to the upper bound only.

The loss distributions composed here are symmetric, so one direction gives δ.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np
from scipy.linalg import solve_banded

from dp_pipeline.accounting.bounds import DeltaBound, Method
from dp_pipeline.accounting.events import PrivacyEvent
from dp_pipeline.accounting.support_composition import (
    SupportLoss,
    gaussian_masses,
    support_loss,
)
from dp_pipeline.mechanisms import DiscreteGaussian

__all__ = ["METHOD", "GaussianSplit", "gaussian_split"]

METHOD = Method.GAUSSIAN_SPLIT.value
_U = 2.0**-53
_TINY = 2.0**-1074
_EXACT_GAP = 1e-4  # gaps (in units of b) below this are recomputed in exact rationals
_MAX_CONVOLUTION = 1 << 27  # products of the n-fold convolution of the Gaussian part
_MAX_GAUSSIAN = 1 << 22  # points of the Gaussian part
_MAX_INT = 1 << 60
_PRUNE = 2.0**-1070  # masses kept down to here (δ is summed down to ~1e-300)
_MAX_REST_GAUSSIAN = 1 << 15  # a discrete Gaussian of the rest: up to σ² ~ 1.7e5
_MAX_REST = 1 << 18  # rest points summed at every δ evaluation (~10 ms)
_MAX_REST_WORK = 1 << 24  # products composing the rest (~0.1 s)
_SPARSE_WEIGHT = 16  # a product merged by sorting costs about this many merged in place


@dataclass(frozen=True)
class LatticePart:
    """A loss offset + step·k with masses[k - low] at every k from ``low`` on (dense, zeros
    allowed), each within ``relative`` of its exact value plus ``absolute`` in total, and
    ``dropped`` P-mass not represented."""

    offset: Fraction
    step: Fraction
    low: int
    masses: np.ndarray
    relative: float
    absolute: float
    dropped: float


def gaussian_copies(sigma2: Fraction, shift: int, count: int) -> LatticePart:
    """``count`` copies of N_Z(0, σ²) with ``shift``: the n-fold direct convolution of the
    one-draw masses (module docstring)."""
    ys, masses, relative, dropped = gaussian_masses(sigma2, _PRUNE)
    one, one_relative = masses, relative
    one_absolute = 2 * _TINY * len(ys)  # subnormal masses are kept: 2^-1074 each
    absolute = one_absolute
    total = masses
    for _ in range(count - 1):
        absolute = (absolute + one_absolute) * (1 + relative) + _TINY * len(total) * len(one)
        k = min(len(total), len(one))
        total = np.convolve(total, one)
        relative = (relative + one_relative + (k + 1) * _U) * (1 + 1e-6)
    return LatticePart(
        offset=count * Fraction(shift * shift) / (2 * sigma2),
        step=Fraction(shift) / sigma2,
        low=int(ys[0]) * count,
        masses=total,
        relative=relative,
        absolute=absolute,
        dropped=dropped * count,
    )


def dense_part(loss: SupportLoss) -> LatticePart:
    """An exact support composition (`support_loss`) laid out densely on its lattice."""
    low = int(loss.positions[0])
    masses = np.zeros(int(loss.positions[-1]) - low + 1)
    masses[loss.positions - low] = loss.masses
    return LatticePart(
        loss.offset, loss.gamma, low, masses, loss.relative, loss.absolute, loss.dropped
    )


@dataclass(frozen=True)
class GaussianSplit:
    """δ(ε) of a wide lattice ``part`` (discrete Gaussian copies) beside ``rest``."""

    part: LatticePart
    rest: SupportLoss

    @cached_property
    def _gaussian(self):
        """(lowest k, T, V, relative error of T and V, absolute, dropped)."""
        part = self.part
        total = part.masses
        n = len(total)
        # T(i) = Σ_{k >= i} P_k: a sequential sum from the top (non-negative terms)
        tails = np.cumsum(total[::-1])[::-1]
        b = float(part.step)
        decay = math.exp(-b)
        # V(i) = (1 - e^{-b})·T(i+1) + e^{-b}·V(i+1), V(last) = 0: a first-order recursion,
        # run from the top on the reversed sequence as the lower bidiagonal system
        # y_j - e^{-b}·y_{j-1} = (1 - e^{-b})·x_j, whose banded LU solve (unit diagonal, no
        # pivot as e^{-b} < 1) is that recursion, one product and one sum per step (scipy.linalg
        # is loaded with the package; scipy.signal's lfilter, the same steps, costs ~1 s to import)
        shifted = np.concatenate([tails[1:], [0.0]])[::-1]
        bands = np.empty((2, n))
        bands[0] = 1.0
        bands[1] = -decay
        v = solve_banded((1, 0), bands, -math.expm1(-b) * shifted)[::-1]
        v = np.maximum(v, 0.0)
        t_relative = part.relative + (n + 1) * _U
        v_relative = t_relative + 6 * n * _U
        return part.low, tails, v, max(t_relative, v_relative), part.absolute, part.dropped

    @cached_property
    def _rational(self):
        """(b as a Fraction, P'/Q' = γ/b, the rest's and the part's offsets): the exact
        constants of k*_w."""
        b = self.part.step
        return b, self.rest.gamma / b, self.rest.offset + self.part.offset

    @cached_property
    def _products(self):
        """(P'·w div Q', P'·w mod Q') for every rest position w (exact int64)."""
        _, ratio, _ = self._rational
        scaled = self.rest.positions * ratio.numerator
        return np.floor_divide(scaled, ratio.denominator), np.mod(scaled, ratio.denominator)

    def delta_bound(self, epsilon: float) -> DeltaBound:
        """Rigorous (lower, upper) on δ(ε) (error budget in the module docstring)."""
        low, tails, v, gaussian_relative, gaussian_absolute, gaussian_dropped = self._gaussian
        b, ratio, offset = self._rational
        quotient, remainder = self._products
        # x_w = (ε - C - n·a)/b - (P'/Q')·w = (I - quotient) + (F - remainder/Q')
        scaled = (Fraction(epsilon) - offset) / b
        # beyond ±2^61 every k*_w is off the support on the same side as with the exact
        # value (|P'·w div Q'| < 2^60): clamping keeps the int64 arithmetic exact
        whole = min(max(math.floor(scaled), -(1 << 61)), 1 << 61)
        fraction = scaled - whole if abs(whole) < 1 << 61 else Fraction(0)  # in [0, 1)
        fraction_float = float(fraction) - remainder / ratio.denominator  # within 3u
        negative = fraction_float < 0
        # k*_w = floor(x_w) + 1, g_w = k*_w - x_w
        first = (whole - quotient) + np.where(negative, 0, 1)
        gap = np.where(negative, -fraction_float, 1.0 - fraction_float)
        unsure = (np.abs(fraction_float) < _EXACT_GAP) | (gap < _EXACT_GAP)
        for index in np.flatnonzero(unsure):
            exact = fraction - Fraction(int(remainder[index]), ratio.denominator)
            below = exact < 0
            first[index] = (whole - int(quotient[index])) + (0 if below else 1)
            gap[index] = float(-exact if below else 1 - exact)
        position = first - low
        gap = gap + np.maximum(-position, 0)  # below the support: start from its lowest k
        position = np.maximum(position, 0)
        inside = position < len(tails)
        masses = self.rest.masses[inside]
        position = position[inside]
        step = float(b) * gap[inside]
        terms = -np.expm1(-step) * tails[position] + np.exp(-step) * v[position]
        total = float(np.sum(masses * terms))
        relative = (
            self.rest.relative
            + gaussian_relative
            + 6 * _U / _EXACT_GAP
            + 8 * _U
            + 2 * (math.log2(max(len(terms), 2)) + 20) * _U
        ) * (1 + 1e-6)
        absolute = self.rest.absolute + gaussian_absolute
        lower = max(0.0, total * (1 - relative) - absolute)
        upper = total * (1 + relative) + absolute + self.rest.dropped + gaussian_dropped
        upper = min(1.0, math.nextafter(upper, 2.0))
        return DeltaBound(min(lower, upper), upper, METHOD)


def gaussian_split(events) -> GaussianSplit | None:
    """The split of ``events`` (`PrivacyEvent` values): the discrete Gaussian coordinates
    with the widest support apart (every coordinate of that σ², else its copies with one
    shift), the rest composed exactly (the point mass at 0 when there is none); None if
    the rest has no exact composition here (`support_loss`), or the sizes leave int64 or
    the work caps."""
    groups: Counter = Counter()
    for event in events:
        if isinstance(event.mechanism, DiscreteGaussian):
            for shift in event.sensitivity:
                if shift:
                    groups[(event.mechanism.sigma2, shift)] += event.count
    if not groups:
        return None
    sigma2, shift = max(groups, key=lambda key: (key[0], -key[1]))
    count = groups[(sigma2, shift)]
    # any width: the split is tried once the whole composition failed, and the rest
    # without the widest Gaussian is often small where the whole was not
    points = 2 * (math.ceil(39 * math.sqrt(float(sigma2))) + 2) + 1
    shifts = {s for (value, s) in groups if value == sigma2}
    if len(shifts) > 1:
        # every coordinate of that σ² together first: its lattice is dense, and the rest
        # (without another wide support) stays small
        wide = [
            PrivacyEvent(e.mechanism, tuple(s for s in e.sensitivity if s), e.count)
            for e in events
            if isinstance(e.mechanism, DiscreteGaussian) and e.mechanism.sigma2 == sigma2
        ]
        part = support_loss(wide, _MAX_REST_GAUSSIAN, _PRUNE, _MAX_REST_WORK, _SPARSE_WEIGHT)
        if part is not None and int(part.positions[-1]) - int(part.positions[0]) < _MAX_GAUSSIAN:
            loss = _rest_loss(_without(events, sigma2, shifts))
            split = None if loss is None else _checked(dense_part(part), loss)
            if split is not None:
                return split
    if points * count > _MAX_GAUSSIAN or points * points * count * (count - 1) / 2 > (
        _MAX_CONVOLUTION
    ):
        return None
    loss = _rest_loss(_without(events, sigma2, {shift}))
    return None if loss is None else _checked(gaussian_copies(sigma2, shift, count), loss)


def _without(events, sigma2: Fraction, shifts: set) -> list:
    """The events without the coordinates of N_Z(0, σ²) with the given shifts."""
    rest = []
    for event in events:
        if isinstance(event.mechanism, DiscreteGaussian) and event.mechanism.sigma2 == sigma2:
            others = tuple(s for s in event.sensitivity if s not in shifts)
            if any(others):
                rest.append(PrivacyEvent(event.mechanism, others, event.count))
        else:
            rest.append(event)
    return rest


def _rest_loss(rest) -> SupportLoss | None:
    """The rest's exact composition (the point mass at 0 when there is none), or None."""
    if not rest:
        return SupportLoss(
            positions=np.zeros(1, dtype=np.int64),
            masses=np.ones(1),
            gamma=Fraction(1),
            offset=Fraction(0),
            relative=0.0,
            absolute=0.0,
            dropped=0.0,
        )
    loss = support_loss(rest, _MAX_REST_GAUSSIAN, _PRUNE, _MAX_REST_WORK, _SPARSE_WEIGHT)
    return None if loss is None or len(loss.masses) > _MAX_REST else loss


def _checked(part: LatticePart, loss: SupportLoss) -> GaussianSplit | None:
    """The split, if its exact constants keep the int64 arithmetic of k*_w exact."""
    ratio = loss.gamma / part.step
    reach = max(abs(int(loss.positions[0])), abs(int(loss.positions[-1])))
    if ratio.denominator >= 2**53 or abs(ratio.numerator) * reach >= _MAX_INT:
        return None
    return GaussianSplit(part, loss)
