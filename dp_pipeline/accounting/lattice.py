"""The privacy loss of independent lattice components by FFT (CKS 2020, §4), with error bounds.

`lattice_loss` returns the pmf of the integer part W of the loss Z = C + γ·W,
with rigorous aliasing/truncation and round-off bounds (see
`dp_pipeline.accounting.multivariate` for the error accounting). Shared by the
exact multivariate bound, the coarsened lattice and the accountant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting._checks import round_up
from dp_pipeline.accounting.bounds import DeltaBound

__all__ = ["MAX_FFT_SIZE", "LatticeComponent", "LatticeLoss", "fraction_gcd", "lattice_loss"]

MAX_FFT_SIZE = 1 << 22


_UNIT_ROUNDOFF = 2.0**-53


def fraction_gcd(values: Sequence[Fraction]) -> Fraction:
    """Largest rational γ with every value an integer multiple of γ (values > 0)."""
    result = Fraction(0)
    for value in values:
        if result == 0:
            result = value
        else:
            result = Fraction(
                math.gcd(
                    result.numerator * value.denominator, value.numerator * result.denominator
                ),
                result.denominator * value.denominator,
            )
    return result


@dataclass(frozen=True)
class LatticeComponent:
    """A privacy loss offset + step·K with K integer, repeated ``count`` times independently.

    Either ``sigma2`` is set (K ~ N_Z(0, σ²)) or ``probabilities`` (P[K = i], i = 0..r):
    a tuple, or a float array where the component is never hashed (not among the
    ``common`` components of `lattice_loss`, whose ``shared`` cache is keyed by them).
    """

    offset: Fraction
    step: Fraction
    count: int
    sigma2: Fraction | None = None
    probabilities: tuple[float, ...] | np.ndarray | None = None


def _discrete_gaussian_log_phi(theta: np.ndarray, sigma2: float) -> np.ndarray:
    """log φ(θ) of N_Z(0, σ²), θ in [-π, π], by Poisson summation (every term positive)."""
    terms = max(1, math.ceil(math.sqrt(2 * 50 / sigma2) / (2 * math.pi)) + 1)
    shifts = 2 * math.pi * np.arange(-terms, terms + 1)
    log_terms = -0.5 * sigma2 * (theta[:, None] - shifts[None, :]) ** 2
    top = log_terms.max(axis=1)
    numerator = top + np.log(np.exp(log_terms - top[:, None]).sum(axis=1))
    denominator = math.log(sum(math.exp(-0.5 * sigma2 * s * s) for s in shifts))
    return numerator - denominator


def _support_of(component: LatticeComponent) -> np.ndarray | None:
    """P[K = i], i = 0..r, as a float array (None for a discrete Gaussian)."""
    if component.probabilities is None:
        return None
    return np.asarray(component.probabilities, dtype=np.float64)


@dataclass(frozen=True)
class _MgfTerms:
    """The terms of one finite-support component's moment generating function, reduced.

    Zero masses are dropped (a support rounded onto a finer grid is mostly zeros); past
    `_MGF_TERMS` masses, runs of consecutive values are merged into one term carrying the
    run's total mass at its largest value (for λ > 0) or its smallest (λ < 0): each
    e^{λx} is then replaced by one at least as large, so the sum stays an upper bound.
    """

    log_masses: np.ndarray
    high: np.ndarray  # largest value of each run, centred
    low: np.ndarray  # smallest value of each run, centred
    merged: bool


_MGF_TERMS = 4096  # terms per component in a Chernoff bound (each evaluated at every λ)


def _mgf_terms(probabilities: np.ndarray) -> _MgfTerms:
    values = np.arange(len(probabilities), dtype=np.float64)
    mean = float(probabilities @ values)
    kept = np.flatnonzero(probabilities > 0)
    if len(kept) <= _MGF_TERMS:
        centred = values[kept] - mean
        return _MgfTerms(np.log(probabilities[kept]), centred, centred, merged=False)
    # runs of equal length in index space between the first and last positive mass
    first, last = int(kept[0]), int(kept[-1]) + 1
    run = -(-(last - first) // _MGF_TERMS)
    starts = np.arange(first, last, run)
    masses = np.add.reduceat(probabilities[first:last], starts - first)
    stops = np.minimum(starts + run, last) - 1
    positive = masses > 0
    # a run's float sum is within (run - 1)·u of its exact total: raise it by that
    masses = masses[positive] * (1 + run * _UNIT_ROUNDOFF)
    return _MgfTerms(
        np.log(masses),
        stops[positive] - mean,
        starts[positive] - mean,
        merged=True,
    )


def _log_mgf(component, terms, multiplier: int, lam: np.ndarray) -> np.ndarray:
    """count · log E[exp(λ·n·(K - E K))] or an upper bound on it, for λ of one sign
    (the discrete Gaussian: its sub-Gaussian bound, CKS Corollary 9)."""
    if component.sigma2 is not None:
        return component.count * 0.5 * lam**2 * multiplier**2 * float(component.sigma2)
    values = terms.high if lam[0] >= 0 else terms.low
    exponents = terms.log_masses[None, :] + np.outer(lam, multiplier * values)
    top = exponents.max(axis=1)
    return component.count * (top + np.log(np.exp(exponents - top[:, None]).sum(axis=1)))


# λ tried by the Chernoff bound, relative to distance / proxy variance: a sub-Gaussian tail
# is best near 1; a bounded or exponential one (a discrete Laplace) far above it on one side
# and far below on the other (the old grid 1/16..4 is kept: results there do not change)
_CHERNOFF_GRID = np.concatenate(
    [
        np.geomspace(1 / 1024, 1 / 16, 25)[:-1],
        np.geomspace(1 / 16, 4, 25),
        np.geomspace(4, 1024, 33)[1:],
    ]
)


def _tail_bound(components, terms, multipliers, distance: float, proxy_variance: float) -> float:
    """Chernoff bound on P[W - E W >= distance] + P[W - E W <= -distance]."""
    if distance <= 0:
        return 1.0
    lam = (distance / proxy_variance) * _CHERNOFF_GRID
    total = 0.0
    for sign in (1.0, -1.0):
        log_mgf = sum(
            _log_mgf(c, t, n, sign * lam)
            for c, t, n in zip(components, terms, multipliers, strict=True)
        )
        with np.errstate(over="ignore"):  # an infinite Chernoff bound is the trivial 1
            total += float(np.exp(np.min(log_mgf - lam * distance)))
    return min(1.0, total)


@dataclass(frozen=True)
class LatticeLoss:
    """The distribution of a composed privacy loss C + γ·w on a window of integers w.

    ``error`` bounds the absolute error of the computed masses' δ (aliasing, FFT round-off,
    direct merges) and ``relative`` the relative error of the component masses fed in
    (each finite-support mass within 4(r + 4)·u of itself, r its support size): the
    computed δ is then within ``relative`` of the δ of the exact masses, plus ``error``.

    The losses themselves are never rounded: L > ε is decided in exact rationals
    (w > (ε - C)/γ), and the gap t_w = L_w - ε = γ·(f + j) (f in (0, 1] the exact gap of
    the first lattice point above ε in units of γ, j = 0, 1, ... an integer) is formed from
    positive float terms, so it is within 3u of itself however close L_w lies to ε (a
    loss computed as C + γ·w in floats would carry an absolute error u·|L|, which near
    the top of the support is a large relative error in 1 - e^{-t}). The factor 1 - e^{-t}
    then has condition number t·e^{-t}/(1 - e^{-t}) <= 1, so each term is within 6u, and
    the pairwise sum of n positive terms within (log2 n + 1)·u: `_EVALUATION` charges
    (log2 n + 8)·u relative, with room to spare.
    """

    probabilities: np.ndarray  # p̃_w for w = first, first+1, ...
    first: int
    gamma: Fraction
    offset: Fraction
    error: float  # bound on |computed δ - true δ| for every ε, absolute
    relative: float = 0.0  # relative error of the component masses (see above)

    def losses(self) -> np.ndarray:
        """The losses C + γ·w as floats (for display and sizing; δ never uses them)."""
        w = np.arange(self.first, self.first + len(self.probabilities), dtype=np.float64)
        return float(self.offset) + float(self.gamma) * w

    def delta_bound(self, epsilon: float, method: str) -> DeltaBound:
        computed = self._computed(epsilon)
        n = max(2, len(self.probabilities))
        relative = self.relative + (math.log2(n) + 8) * _UNIT_ROUNDOFF
        lower = max(0.0, computed * (1 - relative) - self.error)
        upper = min(1.0, round_up(computed * (1 + relative) + self.error))
        return DeltaBound(lower=lower, upper=upper, method=method)

    def _computed(self, epsilon: float) -> float:
        """Σ_{w: L_w > ε} p̃_w·(1 - e^{ε - L_w}), the gaps taken from exact rationals."""
        threshold = (Fraction(epsilon) - self.offset) / self.gamma  # L_w > ε iff w > this
        above = math.floor(threshold) + 1
        start = max(0, above - self.first)
        if start >= len(self.probabilities):
            return 0.0
        tail = self.probabilities[start:]
        gap = float(Fraction(self.first + start) - threshold)  # in (0, ...], exact then rounded
        steps = np.arange(len(tail), dtype=np.float64)
        t = float(self.gamma) * (gap + steps)
        return float(np.sum(tail * -np.expm1(-t)))


def lattice_loss(
    components: Sequence[LatticeComponent],
    tolerance: float = 1e-13,
    max_size: int = MAX_FFT_SIZE,
    shared: dict | None = None,
    common: int = 0,
) -> LatticeLoss | None:
    """Compose lattice components by FFT; ``None`` if the window would exceed ``max_size``.

    ``tolerance`` bounds the aliasing error E (absolute, on δ): E is the mass of W outside
    the window, bounded by a Chernoff bound, or exactly 0 when every component has a finite
    support and all of W's fits in a window no wider than that bound asks for (the window
    then starts at W's smallest value). ``shared``: a dict kept by
    a caller composing several variants of one composition (the coarsened lattice's two
    roundings), where the discrete Gaussians' φ on equal grids are computed once, and so is
    the part of the product of the first ``common`` components (the same in every call).
    """
    common = sum(1 for c in components[:common] if c.count > 0)
    components = [c for c in components if c.count > 0]
    gamma = fraction_gcd([c.step for c in components])
    multipliers = [int(c.step / gamma) for c in components]
    supports = [_support_of(c) for c in components]
    # A fine lattice (e.g. 1,000 unrelated σ²) makes the multipliers astronomically large; a
    # component whose own variance n²·count·Var(K) exceeds max_size² already needs a window
    # wider than max_size, so give up before any float conversion can overflow.
    moments = []
    for component, n, support in zip(components, multipliers, supports, strict=True):
        if support is None:
            log_variance = math.log(component.sigma2)
            moments.append((0.0, float(component.sigma2)))
        else:
            values = np.arange(len(support))
            k_mean = float(support @ values)
            spread = float(support @ (values - k_mean) ** 2)
            log_variance = math.log(max(spread, 1e-300))
            moments.append((k_mean, max(spread, 1e-300)))
        if math.log(component.count) + 2 * math.log(n) + log_variance > 2 * math.log(max_size):
            return None
    offset = sum((c.count * c.offset for c in components), Fraction(0))
    mean = 0.0
    proxy_variance = 0.0
    for component, n, (k_mean, k_var) in zip(components, multipliers, moments, strict=True):
        mean += component.count * n * k_mean
        proxy_variance += component.count * n * n * k_var
    terms = [None if support is None else _mgf_terms(support) for support in supports]
    center = round(mean)
    first = None
    extent = _finite_extent(components, multipliers, supports)
    # a finite W whose whole support fits in a window has no mass outside it: no aliasing
    whole = None if extent is None else 1 << max(4, (extent[1] - extent[0]).bit_length())
    half = 2 + math.sqrt(2 * proxy_variance * math.log(4 / tolerance))
    size = 1 << max(4, math.ceil(math.log2(2 * half + 4)))
    while True:
        if whole is not None and whole <= min(size, max_size):
            size, aliasing, first = whole, 0.0, extent[0]
            break
        if size > max_size:
            return None
        aliasing = _tail_bound(components, terms, multipliers, size / 2 - 1.5, proxy_variance)
        if aliasing <= tolerance:
            break
        size *= 2
    spectrum, merge_error, factors = _spectrum(
        components, multipliers, supports, size, shared, common
    )
    residues = np.fft.irfft(spectrum, n=size)
    if first is None:
        first = center - size // 2 + 1
    window = np.roll(residues, -(first % size))  # window[i] = residues[(first + i) % size]
    np.clip(window, 0.0, None, out=window)
    # factors: the spectra multiplied and log2(count + 1) for each power taken (the
    # supports convolved directly enter as one transform per merged product)
    roundoff = 2 * _UNIT_ROUNDOFF * math.sqrt(size) * (math.log2(size) + factors + 4)
    return LatticeLoss(
        probabilities=window,
        first=first,
        gamma=gamma,
        offset=offset,
        error=aliasing + roundoff + merge_error,
        relative=_input_relative(components),
    )


def _finite_extent(components, multipliers, supports) -> tuple[int, int] | None:
    """(smallest, largest) value of W = Σ n·K over all copies when every component has a
    finite support (its first and last positive mass), else None."""
    low = high = 0
    for component, n, support in zip(components, multipliers, supports, strict=True):
        if support is None:
            return None
        kept = np.flatnonzero(support > 0)
        if len(kept) == 0:
            return None
        low += component.count * n * int(kept[0])
        high += component.count * n * int(kept[-1])
    return low, high


def _input_relative(components) -> float:
    """Relative error of the composed masses from the component masses fed in: each
    finite-support mass is within 4(r + 4)·u of its exact value (r the support size; the
    budget of `discrete_laplace_loss_pmf`, and of the randomized response's two masses
    1/(1 + e^{∓ε₀})), and a product of count·(one per component) masses adds them up.
    The discrete Gaussians' φ enter through the FFT round-off model instead."""
    total = 0.0
    for component in components:
        if component.probabilities is not None:
            total += component.count * 4 * (len(component.probabilities) + 4) * _UNIT_ROUNDOFF
    return total


_MERGED_POINTS = 1 << 16  # sparse products this small are compacted before the next merge
_MAX_PRODUCT = 1 << 23  # points of a direct convolution (memory: 16 bytes each)


def _spectrum(
    components, multipliers, supports, size: int, shared: dict | None = None, common: int = 0
) -> tuple[np.ndarray, float, float]:
    """Π_j φ_j(θ_f)^count_j at θ_f = 2πf/size, f = 0..size/2 (W is real, so its
    characteristic function is Hermitian and this half determines it), and the L1 error
    of the masses convolved directly (``merge_error``).

    Finite supports held once are convolved directly, smallest first, while their product
    stays within 4·size points (and 2^23) (a product of masses is within u of its exact value per
    factor and a sum of m of them within (m - 1)·u, all terms positive: the L1 error is
    at most Σ over merges of (largest multiplicity + 1)·u, charged with 1% to spare); a
    support held a few times whose count-fold sum has at most `_MERGED_POINTS` points
    enters as that many copies, convolved the same way (one FFT for all the small
    supports of a composition instead of one each); each remaining support costs one real
    FFT. Discrete Gaussians multiply by their Poisson-summed φ, the others by their FFT
    (to the power ``count``). The real FFT obeys the round-off model of `multivariate` as
    the complex one did (the same factors, per frequency, and the same inverse transform
    restricted to real input). Returns the spectrum, the merge error and the round-off
    model's factor count: one per spectrum multiplied, plus log2(count + 1) per power.

    ``common``: the first ``common`` components are the same in every call that passes
    ``shared`` (the exact components of the coarsened lattice's two roundings); their part
    of the product is computed once and kept there.
    """
    if shared is None or common <= 0:
        log_phi, spectrum, merge_error, factors = _partial_spectrum(
            components, multipliers, supports, size, shared
        )
    else:
        key = ("common", tuple(components[:common]), tuple(multipliers[:common]), size)
        if key not in shared:
            shared[key] = _partial_spectrum(
                components[:common], multipliers[:common], supports[:common], size, shared
            )
        log_phi, spectrum, merge_error, factors = shared[key]
        rest_log_phi, rest, rest_error, rest_factors = _partial_spectrum(
            components[common:], multipliers[common:], supports[common:], size, shared
        )
        if rest_log_phi is not None:
            log_phi = rest_log_phi if log_phi is None else log_phi + rest_log_phi
        merge_error += rest_error
        factors += rest_factors + 1  # the two parts' product
        if rest is not None:
            spectrum = rest if spectrum is None else spectrum * rest
    if log_phi is None:  # no discrete Gaussian: φ = 1, nothing to multiply by
        return spectrum, merge_error * 1.01, factors
    phi = np.exp(log_phi)
    return (phi if spectrum is None else spectrum * phi), merge_error * 1.01, factors


def _added(total: np.ndarray | None, term: np.ndarray) -> np.ndarray:
    """``total + term`` in place (``total`` None: a new array, 0 + term as before)."""
    if total is None:
        total = np.zeros(len(term))
    total += term
    return total


def _partial_spectrum(components, multipliers, supports, size: int, shared: dict | None):
    """(Σ count·log φ of the discrete Gaussians or None if there are none, the product of
    the other factors or None, the merge error, the factor count): the parts of
    `_spectrum` for some components."""
    frequencies = np.arange(size // 2 + 1, dtype=np.int64)
    log_phi = None
    spectrum = None
    sparse = []
    factors = 0.0
    for component, n, support in zip(components, multipliers, supports, strict=True):
        if support is None:
            factors += 1 + math.log2(component.count + 1)
            key = ("log_phi", component.sigma2, n % size, size)
            if shared is None or key not in shared:
                index = (frequencies * (n % size)) % size
                signed = np.where(index > size // 2, index - size, index)
                theta = (2 * math.pi / size) * signed
                value = _discrete_gaussian_log_phi(theta, float(component.sigma2))
                if shared is None:
                    log_phi = _added(log_phi, component.count * value)
                    continue
                shared[key] = value
            log_phi = _added(log_phi, component.count * shared[key])
            continue
        kept = np.flatnonzero(support > 0)
        positions = (n * kept.astype(np.int64)) % size
        span = int(kept[-1] - kept[0]) if len(kept) else 0
        if component.count == 1 or (component.count * span + 1) * len(kept) <= _MERGED_POINTS:
            sparse.extend([(positions, support[kept])] * component.count)
            continue
        factor = np.fft.rfft(np.bincount(positions, weights=support[kept], minlength=size))
        factor = factor**component.count
        factors += 1 + math.log2(component.count + 1)
        spectrum = factor if spectrum is None else spectrum * factor
    merge_error = 0.0
    sparse.sort(key=lambda pair: len(pair[0]))
    while sparse:
        positions, masses = sparse.pop(0)
        while sparse and len(positions) * len(sparse[0][0]) <= min(4 * size, _MAX_PRODUCT):
            other_positions, other_masses = sparse.pop(0)
            positions = ((positions[:, None] + other_positions[None, :]) % size).ravel()
            masses = np.multiply.outer(masses, other_masses).ravel()
            merge_error += _UNIT_ROUNDOFF  # one more factor in every product
            if len(positions) <= _MERGED_POINTS:
                positions, inverse, counts = np.unique(
                    positions, return_inverse=True, return_counts=True
                )
                masses = np.bincount(inverse.ravel(), weights=masses)
                merge_error += (int(counts.max()) - 1) * _UNIT_ROUNDOFF
        # the masses landing on one residue are summed here (a support may wrap around)
        merge_error += (int(np.bincount(positions).max()) - 1) * _UNIT_ROUNDOFF
        factor = np.fft.rfft(np.bincount(positions, weights=masses, minlength=size))
        factors += 1 + math.log2(2)  # as a component held once
        spectrum = factor if spectrum is None else spectrum * factor
    return log_phi, spectrum, merge_error, factors
