"""Lattice FFT for compositions whose loss lattice is too fine: round the odd components only.

A release that mixes count tables (sensitivity 1) with a sum table (sensitivity 250,000)
has privacy losses on lattices whose common step is 250,000 times finer than the counts'
own, too fine for the exact multivariate FFT of CKS §4 (`lattice_loss`). The grid PLD
accountant would discretise *every* mechanism; here only the components that break the
lattice are moved onto it, and in both directions:

- **upper bound**: each such component's loss (offset + step·K) is rounded UP to the grid
  {offset + j·g}. δ(ε) = E_P[(1 - e^{ε-L})₊] is non-decreasing in every summand of the
  composed loss L (couple the rounded and unrounded losses), so δ of the rounded
  composition is >= the true δ for every ε;
- **lower bound**: the same with rounding DOWN.

The components on the coarse lattice (here: the count tables) stay exact. The grid step g
is the finest divisor of their common step that keeps the FFT window near ``target_size``,
so each rounded component shifts the loss by less than g (about 1e-4 of the loss range).

Rounded discrete Gaussians with a large σ are binned through the normal CDF plus the
Euler–Maclaurin midpoint correction, Σ_{k=a}^{b} f(k) = ∫_{a-1/2}^{b+1/2} f
- (f'(b+1/2) - f'(a-1/2))/24 + R, with Σ|R| <= (7/5760)·∫|f'''| = 0.00184/σ³ over all bins
for the N(0, σ²) density f (the Jacobi-theta normaliser of N_Z equals √(2π)σ to within
e^{-2π²σ²}); σ < 26,000 (or fewer than 2^21 integers within 14σ) are summed term by term in
extended precision. The tail mass beyond 14σ (< 1e-42) and the
binning round-off (the float model of `multivariate`) are charged to both bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.bounds import DeltaBound
from dp_pipeline.accounting.lattice import (
    MAX_FFT_SIZE,
    LatticeComponent,
    LatticeLoss,
    lattice_loss,
)
from dp_pipeline.accounting.lattice_grid import choose_grid, floor_ratio, floor_times

__all__ = ["CoarsenedLatticeLoss", "coarsened_lattice_loss"]

DEFAULT_TARGET_SIZE = 1 << 15
_MAX_TARGET_SIZE = 1 << 19
_MAX_ROUNDING_SHIFT = 2e-3  # total loss shift from rounding (ε units) we accept
_TAIL_SIGMAS = 14  # P[|K| > 14σ] < 2e-43 for N_Z(0, σ²), σ >= 1 (sub-Gaussian tail)
_CDF_MIN_SIGMA = 26_000.0  # from here the Euler–Maclaurin remainder 0.00184/σ³ is < 1e-16
_ENUMERATION_LIMIT = 1 << 21  # below this many integers, sum term by term anyway
_UNIT_ROUNDOFF = 2.0**-53
_SQRT_HALF = math.sqrt(0.5)


@dataclass(frozen=True)
class CoarsenedLatticeLoss:
    """Upper- and lower-rounded compositions; ``extra_error`` covers binning and tails."""

    upper_loss: LatticeLoss
    lower_loss: LatticeLoss
    extra_error: float
    rounded: int  # number of components that were rounded onto the grid
    grid: Fraction

    def delta_bound(self, epsilon: float, method: str) -> DeltaBound:
        upper = self.upper_loss.delta_bound(epsilon, method).upper
        lower = self.lower_loss.delta_bound(epsilon, method).lower
        upper = min(1.0, math.nextafter(upper + self.extra_error, math.inf))
        lower = max(0.0, lower - self.extra_error)
        return DeltaBound(lower=min(lower, upper), upper=upper, method=method)


def _variance_of(component: LatticeComponent) -> float:
    """Var(K) of one copy of the component (float; sizing only)."""
    if component.sigma2 is not None:
        return float(component.sigma2)
    probabilities = np.asarray(component.probabilities)
    values = np.arange(len(probabilities))
    mean = float(probabilities @ values)
    return float(probabilities @ (values - mean) ** 2)


def _bin_edges(low_k: int, high_k: int, ratio: Fraction, up: bool) -> tuple[np.ndarray, int]:
    """Edges B_j so that bin j holds the integers k with B_j < k <= B_{j+1}.

    The bin of k is ceil(k/ratio) (up) or floor(k/ratio) (down); returns the edges of the
    bins covering [low_k, high_k] and the index of the first bin.
    """
    if up:
        first = -((-low_k * ratio.denominator) // ratio.numerator)  # ceil(low_k / ratio)
        last = -((-high_k * ratio.denominator) // ratio.numerator)
        # bin j: (j-1)·ratio < k <= j·ratio  ->  B_j = floor((j-1)·ratio)
        edges = floor_times(np.arange(first - 1, last + 1, dtype=np.int64), ratio)
    else:
        first = (low_k * ratio.denominator) // ratio.numerator  # floor(low_k / ratio)
        last = (high_k * ratio.denominator) // ratio.numerator
        # bin j: j·ratio <= k < (j+1)·ratio  ->  B_j = ceil(j·ratio) - 1
        edges = -floor_times(-np.arange(first, last + 2, dtype=np.int64), ratio) - 1
    return np.asarray(edges, dtype=np.float64), int(first)


def _normalised_weights(sigma2: Fraction, reach: int) -> np.ndarray:
    """P[K = k] of N_Z(0, σ²) for |k| <= reach, in extended precision (term by term)."""
    k = np.arange(-reach, reach + 1, dtype=np.float64)
    weights = np.exp(-(k * k) / (2 * float(sigma2)))
    weights /= math.fsum(weights)
    return weights.astype(np.longdouble)


def _discrete_gaussian_bins(
    sigma2: Fraction, ratio: Fraction, up: bool, weights: dict | None = None
) -> tuple[np.ndarray, int, float]:
    """Masses of N_Z(0, σ²) in the bins of k/ratio (rounded up or down), first bin, L1 error.

    ``weights``: the term-by-term pmfs by σ², shared by the calls of one composition (both
    rounding directions and every shift of a σ² sum the same terms).
    """
    sigma = math.sqrt(float(sigma2))
    reach = math.ceil(_TAIL_SIGMAS * sigma) + 2
    edges, first = _bin_edges(-reach, reach, ratio, up)
    edges = np.clip(edges, -reach - 1, reach)
    tail_error = 2e-43
    if sigma < _CDF_MIN_SIGMA or 2 * reach + 1 <= _ENUMERATION_LIMIT:
        # Term by term: per-bin sums in extended precision (recursive summation errs by at
        # most (n-1)·u_ext·mass per bin, so <= max bin length · u_ext over all bins).
        weights = {} if weights is None else weights
        if sigma2 not in weights:
            weights[sigma2] = _normalised_weights(sigma2, reach)
        extended = weights[sigma2]
        starts = (edges[:-1] + reach + 1).astype(np.int64)
        stops = (edges[1:] + reach + 1).astype(np.int64)
        filled = stops > starts
        masses = np.zeros(len(starts))
        masses[filled] = np.add.reduceat(extended, starts[filled]).astype(np.float64)
        longest = float(np.max(stops - starts))
        extended_roundoff = float(np.finfo(np.longdouble).eps)
        error = tail_error + 4 * _UNIT_ROUNDOFF + longest * extended_roundoff
    else:
        # ∫ over (B_j + 1/2, B_{j+1} + 1/2] of the N(0, σ²) density, tails taken on their
        # own side so that small masses keep their relative precision.
        x = (edges + 0.5) / sigma
        erfc = np.vectorize(math.erfc, otypes=[np.float64])
        upper_tail = 0.5 * erfc(x * _SQRT_HALF)
        lower_tail = 0.5 * erfc(-x * _SQRT_HALF)
        from_upper = upper_tail[:-1] - upper_tail[1:]
        from_lower = lower_tail[1:] - lower_tail[:-1]
        masses = np.where(x[:-1] >= 0, from_upper, from_lower)
        density = np.exp(-0.5 * x * x) / (math.sqrt(2 * math.pi) * sigma)
        slope = -(x / sigma) * density  # f'(B + 1/2)
        masses = masses - (slope[1:] - slope[:-1]) / 24
        remainder = 0.00184 / sigma**3
        # Each mass is a difference of two tails, each good to a few ulps of itself.
        tails = np.minimum(upper_tail, lower_tail)
        roundoff = 8 * _UNIT_ROUNDOFF * (2 * math.fsum(tails) + 1)
        error = tail_error + remainder + roundoff
    np.clip(masses, 0.0, None, out=masses)
    return masses, first, error


def _round_component(
    component: LatticeComponent, grid: Fraction, up: bool, weights: dict | None = None
) -> tuple[LatticeComponent, float]:
    """The component with its loss rounded up/down onto offset + grid·Z, and its L1 error
    (``weights``: as for `_discrete_gaussian_bins`)."""
    ratio = grid / component.step  # how many K-units one grid step spans
    if component.sigma2 is not None:
        masses, first, error = _discrete_gaussian_bins(component.sigma2, ratio, up, weights)
    else:
        probabilities = np.asarray(component.probabilities, dtype=np.float64)
        k = np.arange(len(probabilities), dtype=np.int64)
        bins = -floor_ratio(-k, ratio) if up else floor_ratio(k, ratio)  # ceil / floor(k/ratio)
        bins_array = np.asarray(bins, dtype=np.int64)
        first = int(bins_array.min())
        masses = np.bincount(bins_array - first, weights=probabilities)
        error = 4 * _UNIT_ROUNDOFF * math.sqrt(len(probabilities))
    nonzero = np.flatnonzero(masses)
    start, stop = int(nonzero[0]), int(nonzero[-1]) + 1
    rounded = LatticeComponent(
        offset=component.offset + grid * (first + start),
        step=grid,
        count=component.count,
        probabilities=tuple(masses[start:stop].tolist()),
    )
    return rounded, component.count * error


def coarsened_lattice_loss(
    components: Sequence[LatticeComponent],
    tolerance: float = 1e-13,
    target_size: int = DEFAULT_TARGET_SIZE,
    max_size: int = MAX_FFT_SIZE,
) -> CoarsenedLatticeLoss | None:
    """Compose by FFT on a grid near ``target_size`` points, rounding the components whose
    step is not a multiple of it (see the module docstring); ``None`` if even that fails."""
    components = [c for c in components if c.count > 0]
    if not components:
        return None
    loss_variance = sum(c.count * float(c.step) ** 2 * _variance_of(c) for c in components)
    half_width = math.sqrt(2 * loss_variance * math.log(4 / tolerance)) + max(
        float(c.step) for c in components
    )
    # Each rounded copy moves the composed loss by less than one grid step; past a total
    # of _MAX_ROUNDING_SHIFT the bracket gets loose, so refine the grid, and past
    # _MAX_TARGET_SIZE leave the composition to the grid PLD (its O(h²) split is better
    # when hundreds of components are off the lattice).
    while True:
        grid = choose_grid(components, 2 * half_width / target_size)
        shift = sum(c.count for c in components if (c.step / grid).denominator != 1) * grid
        if float(shift) <= _MAX_ROUNDING_SHIFT:
            break
        target_size *= 2
        if target_size > _MAX_TARGET_SIZE:
            return None
    exact, up, down, extra, rounded = [], [], [], 0.0, 0
    weights: dict = {}  # the term-by-term pmf of each σ², for this composition only
    for component in components:
        if (component.step / grid).denominator == 1:
            exact.append(component)
            continue
        rounded += 1
        rounded_up, error_up = _round_component(component, grid, True, weights)
        rounded_down, error_down = _round_component(component, grid, False, weights)
        up.append(rounded_up)
        down.append(rounded_down)
        extra += max(error_up, error_down)
    shared: dict = {}  # the exact components' part of the spectrum, for both roundings
    upper_loss = lattice_loss(exact + up, tolerance, max_size, shared, len(exact))
    lower_loss = lattice_loss(exact + down, tolerance, max_size, shared, len(exact))
    if upper_loss is None or lower_loss is None:
        return None
    return CoarsenedLatticeLoss(upper_loss, lower_loss, extra, rounded, grid)
