"""Relative precision at tiny δ: the lattice FFT of the exponentially tilted privacy losses.

The FFT paths (`lattice`, `coarse_lattice`) resolve δ(ε) to an absolute ~1e-14; below
that their brackets say little. Tilting moves the mass the FFT resolves to where δ lives.
For c >= 0 and independent components with losses ℓ_i ~ P_i, let M_i(c) = E[e^{cℓ_i}],
M = Π M_i, and Q_i the tilted pmf Q_i(ℓ) = P_i(ℓ)·e^{cℓ}/M_i(c). Then, with L = Σ ℓ_i,

    δ(ε) = E_P[(1 - e^{ε-L})₊] = M(c)·e^{-cε}·E_Q[w(L - ε)],  w(t) = e^{-ct}(1 - e^{-t})₊,

because Π P_i = Π Q_i·M·e^{-cL}. For t > 0 and c >= 0, 0 <= w(t) <= 1, so an error
of the composed Q's masses that is absolute (aliasing, FFT round-off, omitted tails: an
L1 error e of the mass vector changes E_Q[w] by at most e) is an error relative to the
factor M(c)e^{-cε}, which at the saddle point c (`saddle`) is within a modest factor of δ
itself: the bracket is relative, at any δ in the float range.

Construction, for the upper bound (the lower one rounds down instead):

- **rounding** (`coarse_lattice`'s rule): a component whose lattice step is not a multiple
  of the grid g has its loss rounded UP onto {offset + j·g}; δ is non-decreasing in every
  summand of L, so δ of the rounded composition P' is >= the true δ. The tilt is then taken
  of P' with its rounded losses (the identity above holds exactly for P'): tilting first
  would not do, w is not monotone. Components on the grid stay exact.
- **tilted pmfs**: for a discrete Gaussian, K ~ N_Z(0, σ²) and ℓ = o + h·K, the tilted
  weights e^{-k²/(2σ²)}·e^{c(ℓ'(k) - o)} are summed on the window |k - μ| <= Aσ
  (μ = c·h·σ², the centre of the tilted Gaussian); outside it, ℓ' <= ℓ + g gives
  e^{-k²/(2σ²) + c(ℓ'-o)} <= e^{μ²/(2σ²) + cg}·e^{-(k-μ)²/(2σ²)}, whose sum over
  |k - μ| >= a is at most 2e^{-a²/(2σ²)}/(1 - e^{-a/σ²}) (a geometric series): the tilted
  tail τ_i, and the same bound gives the normaliser Z = Σ e^{-k²/(2σ²)} within its window
  sum and that plus its tail. Finite supports (discrete Laplace, randomized response) are
  tilted term by term; their masses are within 4(r + 4)·u of themselves (`lattice`).
- **floats**: each tilted weight is e^{E(k)} with E(k) computed in floats; |E - E_exact|
  <= η (8u times the largest magnitude summed, plus the input masses' relative error), so
  every tilted mass (after the normalising sum, the per-bin sums of positive terms and one
  division) is within a factor e^{±(2η + (b + 4)u)} of its exact value (b the largest bin
  count), and log M_i within ±(η + 4u) plus the normaliser's tail bound. A product of
  count masses per component moves E_Q[w] by at most the factor e^{±Σ count·(2η + (b+4)u)}.
- **tails**: the composed tilted Q is (Π(1-τ_i)) times the windowed one plus the rest, and
  w <= 1, so E_Q[w] <= E_windowed[w] + Σ count·τ_i and E_Q[w] >= (1 - Σ count·τ_i)·E_windowed[w].
- **FFT**: `lattice_loss` bounds the L1 error of the composed masses (aliasing, round-off,
  direct merges; `LatticeLoss.error`) plus the relative error of its inputs
  (`LatticeLoss.relative`), both valid for any weight in [0, 1]; the weight is evaluated
  from the exact rational gap t = L - ε as in `LatticeLoss`, each term within
  (12 + 4ct)·u of itself (one more exponential), the pairwise sum (log2 n)·u; terms with
  ct > 50 are not summed but charged e^{-50}·(1 + the L1 error) to the upper end.
- **the factor**: log(M(c)e^{-cε}) = Σ count·log M_i - cε is formed in floats and given a
  margin of 8u times the sum of the magnitudes of its terms.

Every charge moves the upper end up and the lower end down, so the result is a rigorous
bracket of δ(ε) for any c >= 0 (c only decides how tight it is). The grid keeps the total
rounding shift Δ within 5e-3/max(1, c) (δ within a factor e^{cΔ} <= 1.005 of the unrounded
composition's) on up to 2^18 points, else within 1e-4·ε (ε(δ) within 1e-4 relative).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.bounds import DeltaBound, Method
from dp_pipeline.accounting.lattice import LatticeComponent, LatticeLoss, lattice_loss
from dp_pipeline.accounting.lattice_grid import choose_grid, floor_ratio
from dp_pipeline.accounting.outward import exp_down, exp_up
from dp_pipeline.accounting.saddle import saddle_point
from dp_pipeline.errors import DPError

__all__ = ["METHOD", "TiltedLattice"]


class _NoTiltError(DPError, OverflowError):
    """No tilt is built at this c (caught by `TiltedLattice.saddle`: the path is not taken)."""


METHOD = Method.TILTED_LATTICE.value

_U = 2.0**-53
_WINDOW_SIGMAS = 13.0  # tilted window half-width: e^{-84.5} < 2e-37 relative tail
_MAX_WINDOW = 1 << 16  # discrete Gaussians with a wider window (σ > ~2500) are not tilted
_TOLERANCE = 1e-15  # aliasing of the tilted composition (absolute on E_Q[w] <= 1)
_TARGET_SIZE = 1 << 14
_MAX_TARGET_SIZE = 1 << 18
_MAX_FFT = 1 << 19
# total loss shift Δ from rounding, times max(1, c): δ moves by a factor <= e^{cΔ} <= 1.005
_MAX_ROUNDING_SHIFT = 5e-3
_EPSILON_SHIFT = 1e-4  # else Δ relative to ε (ε(δ) moves by at most Δ)
_MAX_BUILDS = 3  # tilts built per composition (each one FFT per rounding direction)
_MAX_C = 1e4  # larger tilts are not built (ε at the top of the loss's support)
_NEAR = 0.1  # no new tilt within this relative distance of the c of one built
_WEIGHT_CUTOFF = 50.0  # terms with c·t beyond this (weight <= e^{-50}) are charged, not summed
_TIGHT = 1e-6  # a cached tilt whose bracket is this tight is not rebuilt for a new ε


@dataclass(frozen=True)
class _Tilt:
    """One component tilted at c (one copy): its tilted pmf on a lattice, log M_i(c) bounds,
    the tilted tail τ_i outside the window, and the relative error of its masses."""

    component: LatticeComponent
    log_mgf_low: float
    log_mgf_high: float
    tail: float
    relative: float
    margin: float  # magnitude of log M_i (for the factor's float margin)


def _indices(
    component: LatticeComponent, ks: np.ndarray, grid: Fraction, up: bool
) -> tuple[np.ndarray, Fraction]:
    """The grid index j of each K = k (loss o + g·j after rounding up/down) and the step;
    the component's own step and j = k when it lies on the grid."""
    ratio = grid / component.step
    if (component.step / grid).denominator == 1 or ratio.numerator == 0:
        return ks.astype(np.int64), component.step
    if up:
        return -np.asarray(floor_ratio(-ks, ratio), dtype=np.int64), grid
    return np.asarray(floor_ratio(ks, ratio), dtype=np.int64), grid


def _window(component: LatticeComponent) -> int:
    """Points of the tilted window of a discrete Gaussian (0 for a finite support)."""
    if component.sigma2 is None:
        return 0
    return 2 * (math.ceil(_WINDOW_SIGMAS * math.sqrt(float(component.sigma2))) + 16) + 1


def _tilt(component: LatticeComponent, c: float, grid: Fraction, up: bool) -> _Tilt | None:
    """The tilted pmf of one copy of ``component`` (rounded onto ``grid`` unless on it)."""
    if component.sigma2 is not None:
        sigma2 = float(component.sigma2)
        sigma = math.sqrt(sigma2)
        mu = c * float(component.step) * sigma2
        reach = math.ceil(_WINDOW_SIGMAS * sigma) + 16
        if 2 * reach + 1 > _MAX_WINDOW or not math.isfinite(mu) or abs(mu) > 2**50:
            return None
        centre = round(mu)
        ks = np.arange(centre - reach, centre + reach + 1, dtype=np.int64)
        log_masses = -(ks.astype(np.float64) ** 2) / (2 * sigma2)
        # the normaliser Z = Σ e^{-k²/(2σ²)}: its window |k| <= reach, and the tail beyond
        zk = np.arange(-reach, reach + 1, dtype=np.float64)
        z_window = math.fsum(np.exp(-(zk * zk) / (2 * sigma2)).tolist())
        a = float(reach)
        z_tail = 2 * math.exp(-a * a / (2 * sigma2)) / -math.expm1(-a / sigma2)
        log_z_low = math.log(z_window) - 8 * _U * reach
        log_z_high = math.log(z_window + z_tail * 1.01) + 8 * _U * reach
        # distance from μ to the nearest k outside the window
        a = min(mu - (centre - reach - 1), (centre + reach + 1) - mu)
        log_tail_bound = (
            math.log(2) - a * a / (2 * sigma2) - math.log(-math.expm1(-a / sigma2)) + 1e-9
        )
        input_relative = 0.0
    else:
        probabilities = np.asarray(component.probabilities, dtype=np.float64)
        if not len(probabilities) or np.any(probabilities <= 0):
            return None
        ks = np.arange(len(probabilities), dtype=np.int64)
        log_masses = np.log(probabilities)
        log_z_low = log_z_high = 0.0
        log_tail_bound = None
        mu = 0.0
        input_relative = 4 * (len(probabilities) + 4) * _U * 1.01
    j, step = _indices(component, ks, grid, up)
    tilt_terms = c * float(step) * j.astype(np.float64)
    exponents = log_masses + tilt_terms
    top = float(np.max(exponents))
    weights = np.exp(exponents - top)
    total = math.fsum(weights.tolist())
    if not (total > 0 and math.isfinite(total) and math.isfinite(top)):
        return None
    eta = input_relative + 8 * _U * (float(np.max(np.abs(log_masses) + np.abs(tilt_terms))) + 1)
    first = int(j.min())
    bins = np.bincount(j - first, weights=weights)
    longest = int(np.max(np.bincount(j - first)))
    masses = bins / total
    relative = 2 * eta + (longest + 4) * _U
    nonzero = np.flatnonzero(masses)
    start, stop = int(nonzero[0]), int(nonzero[-1]) + 1
    # log M_i = c·o + top + log Σ (window) - log Z, and the tail beyond the window
    constant = c * float(component.offset)
    base = constant + top + math.log(total)
    log_low = base - eta - 4 * _U - log_z_high
    tail = 0.0
    log_high = base + eta + 4 * _U - log_z_low
    if log_tail_bound is not None:
        # outside the window: e^{-k²/(2σ²) + c(ℓ' - o)} <= e^{μ²/(2σ²) + cg}·e^{-(k-μ)²/(2σ²)}
        shift = c * float(grid) if step == grid else 0.0
        log_outside = mu * mu / (2 * sigma2) + shift + log_tail_bound
        ratio = math.exp(min(700.0, log_outside - top - math.log(total)) + eta + 4 * _U)
        tail = min(1.0, ratio)
        log_high += math.log1p(ratio)
    tilted = LatticeComponent(
        offset=component.offset + step * (first + start),
        step=step,
        count=component.count,
        probabilities=masses[start:stop]
        if step == grid and step != component.step
        else tuple(masses[start:stop].tolist()),  # rounded: an array (never hashed, `lattice`)
    )
    margin = abs(constant) + abs(top) + abs(math.log(total)) + abs(log_z_high)
    return _Tilt(tilted, log_low, log_high, tail, relative, margin)


def _tilted_expectation(loss: LatticeLoss, epsilon: float, c: float) -> tuple[float, float, float]:
    """Σ_{w: L_w > ε} p̃_w·e^{-c t_w}(1 - e^{-t_w}), t_w = L_w - ε from exact rationals
    (as `LatticeLoss`), over t_w <= `_WEIGHT_CUTOFF`/c; the relative error of its
    evaluation; and the bound e^{-_WEIGHT_CUTOFF} on the terms left out (w <= e^{-ct} and
    the masses sum to at most 1 + ``loss.error``)."""
    threshold = (Fraction(epsilon) - loss.offset) / loss.gamma
    above = math.floor(threshold) + 1
    start = max(0, above - loss.first)
    if start >= len(loss.probabilities):
        return 0.0, 0.0, 0.0
    gap = float(Fraction(loss.first + start) - threshold)
    gamma = float(loss.gamma)
    left_out = 0.0
    stop = len(loss.probabilities)
    if c > 0:
        reach = math.floor(_WEIGHT_CUTOFF / (c * gamma) * (1 - 1e-9) - gap)
        if start + reach + 1 < stop:
            stop = start + max(0, reach) + 1
            left_out = math.exp(-_WEIGHT_CUTOFF * (1 - 2e-9)) * (1 + loss.error)
    tail = loss.probabilities[start:stop]
    t = gamma * (gap + np.arange(len(tail), dtype=np.float64))
    with np.errstate(under="ignore"):
        value = float(np.sum(tail * np.exp(-c * t) * -np.expm1(-t)))
    relative = (math.log2(max(2, len(tail))) + 12 + 4 * c * float(t[-1])) * _U
    return value, relative, left_out


@dataclass(frozen=True)
class _Build:
    c: float
    shift: float  # total rounding shift Δ of the losses (0 if nothing was rounded)
    upper: tuple  # (LatticeLoss, log M high, Σ count·τ, Σ count·relative, margin)
    lower: tuple

    def tolerance(self) -> float:
        """The relative gap its rounding alone may leave, e^{2.5cΔ} - 1, plus `_TIGHT`."""
        return math.expm1(2.5 * self.c * self.shift) + _TIGHT

    def delta_bound(self, epsilon: float) -> DeltaBound:
        c = self.c
        ends = []
        for side, up in ((self.upper, True), (self.lower, False)):
            loss, log_m, tail, relative, margin = side
            expectation, evaluation, left_out = _tilted_expectation(loss, epsilon, c)
            log_factor = log_m - c * epsilon
            # the products and sums forming ``value`` err by a few u of it (4u charged)
            total_relative = evaluation + loss.relative + 4 * _U
            if up:
                value = expectation * (1 + total_relative) + loss.error + tail + left_out + 1e-300
            else:
                value = (expectation * (1 - total_relative) - loss.error) * (1 - tail)
                if value <= 0:
                    ends.append(0.0)
                    continue
            # each float term of the log (and its sum) errs by at most 8u of its magnitude
            log_margin = 8 * _U * (margin + c * epsilon + abs(math.log(value)) + 1) + relative
            if up:
                log_value = log_factor + log_margin + math.log(value)
                ends.append(min(1.0, exp_up(min(log_value, 0.0))))
            else:
                # outward by whole ulps: a relative factor does not move a subnormal
                log_value = log_factor - log_margin + math.log(value)
                ends.append(exp_down(log_value))
        upper, lower = ends
        return DeltaBound(min(lower, upper), upper, METHOD)


class TiltedLattice:
    """δ(ε) brackets of a composition of lattice components (discrete Gaussians with
    ``sigma2``, finite supports with ``probabilities``: `paths.lattice_components`) by the
    FFT of their losses tilted at the saddle point of ε (module docstring); the tilts built
    are kept and reused for nearby ε while their bracket stays within `_TIGHT`."""

    def __init__(self, components: Sequence[LatticeComponent]) -> None:
        self._components = [c for c in components if c.count > 0]
        if any(_window(c) > _MAX_WINDOW for c in self._components):
            self._components = []  # a Gaussian too wide to tilt term by term: no bracket
        self._builds: list[_Build] = []
        self._failed: set = set()
        self._float_cache: dict = {}
        self._saddles: dict = {}

    @property
    def used(self) -> bool:
        """Whether a tilt has been built (a bracket has come from this path)."""
        return bool(self._builds)

    def _log_mgf(self, c: object, epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(0, K', K'') at c of K(c) = log M(c) - cε: the tilted losses' mean minus ε and
        their variance, in floats from the unrounded pmfs (they only choose c; the value
        K itself is not needed by `saddle.saddle_point`)."""
        c = max(0.0, float(np.asarray(c, dtype=np.float64).ravel()[0]))
        if not c < _MAX_C:
            raise _NoTiltError("no saddle point below the largest tilt")
        first = second = 0.0
        for component in self._components:
            step = float(component.step)
            if component.sigma2 is not None and component.sigma2 >= 100:
                # the tilted N_Z is N_Z(μ, σ²) recentred: its mean and variance are μ and σ²
                # within e^{-2π²σ²} relative (Poisson summation)
                sigma2 = float(component.sigma2)
                mu = c * step * sigma2
                first += component.count * (float(component.offset) + step * mu)
                second += component.count * step * step * sigma2
                continue
            if component.sigma2 is not None:
                sigma2 = float(component.sigma2)
                mu = c * step * sigma2
                reach = math.ceil(_WINDOW_SIGMAS * math.sqrt(sigma2)) + 2
                if not abs(mu) < 2**50:
                    raise _NoTiltError("tilted centre beyond the integer range")
                ks = np.arange(round(mu) - reach, round(mu) + reach + 1, dtype=np.float64)
                log_weights = -((ks - mu) ** 2) / (2 * sigma2)
            else:
                key = ("log", id(component))
                if key not in self._float_cache:
                    probabilities = np.asarray(component.probabilities, dtype=np.float64)
                    with np.errstate(divide="ignore"):
                        self._float_cache[key] = np.log(probabilities)
                log_masses = self._float_cache[key]
                ks = np.arange(len(log_masses), dtype=np.float64)
                log_weights = log_masses + c * step * ks
            weights = np.exp(log_weights - np.max(log_weights))
            weights /= weights.sum()
            mean = float(weights @ ks)
            first += component.count * (float(component.offset) + step * mean)
            second += component.count * step * step * float(weights @ (ks - mean) ** 2)
        return np.zeros(1), np.array([first - epsilon]), np.array([second])

    def _build(self, c: float, epsilon: float) -> _Build | None:
        variance = float(self._log_mgf(c, 0.0)[2][0])
        if not (variance > 0 and math.isfinite(variance)):
            return None
        half_width = math.sqrt(2 * variance * math.log(4 / _TOLERANCE)) + max(
            float(c.step) for c in self._components
        )
        grid = self._grid(2 * half_width, _MAX_ROUNDING_SHIFT / max(1.0, c))
        if grid is None:
            # no grid within `_MAX_TARGET_SIZE` keeps δ within e^{cΔ} <= 1.005: one that
            # keeps ε within 1e-4 relative (Δ <= 1e-4·ε) still makes ε(δ) tight
            grid = self._grid(2 * half_width, _EPSILON_SHIFT * max(1.0, epsilon))
        if grid is None:
            return None
        exact = [k for k in self._components if (k.step / grid).denominator == 1]
        rounded = [k for k in self._components if (k.step / grid).denominator != 1]
        ordered = exact + rounded
        shared: dict = {}  # the exact components' part of the spectrum, for both roundings
        sides = []
        for up in (True, False):
            maybe = [_tilt(k, c, grid, up) for k in ordered]
            tilts = [t for t in maybe if t is not None]
            if len(tilts) != len(maybe):
                return None
            loss = lattice_loss(
                [t.component for t in tilts], _TOLERANCE, _MAX_FFT, shared, len(exact)
            )
            if loss is None:
                return None
            pairs = list(zip(ordered, tilts, strict=True))
            log_m = math.fsum(k.count * (t.log_mgf_high if up else t.log_mgf_low) for k, t in pairs)
            tail = math.fsum(k.count * t.tail for k, t in pairs)
            relative = math.fsum(k.count * t.relative for k, t in pairs)
            margin = math.fsum(k.count * t.margin for k, t in pairs)
            sides.append((loss, log_m, min(1.0, tail), relative, margin))
        shift = float(sum(k.count for k in rounded) * grid)
        return _Build(c, shift, sides[0], sides[1])

    def _grid(self, width: float, allowed: float) -> Fraction | None:
        """The coarsest grid (`lattice_grid.choose_grid`, ``width`` over 2^14 ... 2^18
        points) whose rounded copies move the loss by at most ``allowed`` in total."""
        target = _TARGET_SIZE
        while target <= _MAX_TARGET_SIZE:
            grid = choose_grid(self._components, width / target)
            rounded = sum(k.count for k in self._components if (k.step / grid).denominator != 1)
            if float(rounded * grid) <= allowed:
                return grid
            target *= 2
        return None

    def saddle(self, epsilon: float) -> float | None:
        """The saddle point c of ε (`saddle.saddle_point`), or None if there is none in
        (0, `_MAX_C`) (ε at or beyond the largest loss); ≈ -d log δ/dε there."""
        if epsilon not in self._saddles:
            try:
                c: float | None = saddle_point(self._log_mgf, epsilon)
            except (_NoTiltError, OverflowError, ValueError, ZeroDivisionError):
                c = None
            if c is not None and not 0 < c < _MAX_C:
                c = None
            if len(self._saddles) > 64:
                self._saddles.clear()
            self._saddles[epsilon] = c
        return self._saddles[epsilon]

    def delta_bound(self, epsilon: float) -> DeltaBound:
        """A rigorous bracket of δ(ε) (the trivial [0, 1] if no tilt could be built).

        A tilt built for another ε is reused where its bracket is about as tight as its
        rounding allows (`_Build.tolerance`) or its c is within `_NEAR` of this ε's saddle
        point: a new one would be little tighter.
        """
        best = DeltaBound(0.0, 1.0, METHOD)
        if not self._components:
            return best
        for build in self._builds:
            best = best.intersect(build.delta_bound(epsilon))
            if best.upper > 0 and best.upper - best.lower <= build.tolerance() * best.upper:
                return best
        if len(self._builds) >= _MAX_BUILDS:
            return best
        c = self.saddle(epsilon)
        if c is None or any(abs(b.c - c) <= _NEAR * c for b in self._builds):
            return best  # a tilt this close gives about the same bracket
        key = round(math.log(c), 3)
        if key in self._failed:
            return best
        built = self._build(c, epsilon)
        if built is None:
            self._failed.add(key)
            return best
        self._builds.append(built)
        return best.intersect(built.delta_bound(epsilon))
