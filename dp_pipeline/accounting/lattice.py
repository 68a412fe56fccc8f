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

    Either ``sigma2`` is set (K ~ N_Z(0, σ²)) or ``probabilities`` (P[K = i], i = 0..r).
    """

    offset: Fraction
    step: Fraction
    count: int
    sigma2: Fraction | None = None
    probabilities: tuple[float, ...] | None = None


def _discrete_gaussian_log_phi(theta: np.ndarray, sigma2: float) -> np.ndarray:
    """log φ(θ) of N_Z(0, σ²), θ in [-π, π], by Poisson summation (every term positive)."""
    terms = max(1, math.ceil(math.sqrt(2 * 50 / sigma2) / (2 * math.pi)) + 1)
    shifts = 2 * math.pi * np.arange(-terms, terms + 1)
    log_terms = -0.5 * sigma2 * (theta[:, None] - shifts[None, :]) ** 2
    top = log_terms.max(axis=1)
    numerator = top + np.log(np.exp(log_terms - top[:, None]).sum(axis=1))
    denominator = math.log(sum(math.exp(-0.5 * sigma2 * s * s) for s in shifts))
    return numerator - denominator


def _log_mgf(component: LatticeComponent, multiplier: int, lam: np.ndarray) -> np.ndarray:
    """count · log E[exp(λ·n·(K - E K))] (an upper bound for the discrete Gaussian)."""
    if component.sigma2 is not None:
        return component.count * 0.5 * lam**2 * multiplier**2 * float(component.sigma2)
    probabilities = np.asarray(component.probabilities)
    values = np.arange(len(probabilities), dtype=np.float64)
    mean = float(probabilities @ values)
    with np.errstate(divide="ignore"):
        log_p = np.log(probabilities)
    exponents = log_p[None, :] + np.outer(lam, multiplier * (values - mean))
    top = exponents.max(axis=1)
    return component.count * (top + np.log(np.exp(exponents - top[:, None]).sum(axis=1)))


def _tail_bound(components, multipliers, distance: float, proxy_variance: float) -> float:
    """Chernoff bound on P[W - E W >= distance] + P[W - E W <= -distance]."""
    if distance <= 0:
        return 1.0
    lam = (distance / proxy_variance) * np.geomspace(1 / 16, 4, 25)
    total = 0.0
    for sign in (1.0, -1.0):
        log_mgf = sum(
            _log_mgf(c, n, sign * lam) for c, n in zip(components, multipliers, strict=True)
        )
        with np.errstate(over="ignore"):  # an infinite Chernoff bound is the trivial 1
            total += float(np.exp(np.min(log_mgf - lam * distance)))
    return min(1.0, total)


@dataclass(frozen=True)
class LatticeLoss:
    """The distribution of a composed privacy loss C + γ·w on a window of integers w."""

    probabilities: np.ndarray  # p̃_w for w = first, first+1, ...
    first: int
    gamma: Fraction
    offset: Fraction
    error: float  # bound on |computed δ - true δ| for every ε

    def losses(self) -> np.ndarray:
        w = np.arange(self.first, self.first + len(self.probabilities), dtype=np.float64)
        return float(self.offset) + float(self.gamma) * w

    def delta_bound(self, epsilon: float, method: str) -> DeltaBound:
        losses = self.losses()
        start = int(np.searchsorted(losses, epsilon, side="right"))
        tail = self.probabilities[start:]
        computed = float(np.sum(tail * -np.expm1(epsilon - losses[start:])))
        lower = max(0.0, computed - self.error)
        upper = min(1.0, round_up(computed + self.error))
        return DeltaBound(lower=lower, upper=upper, method=method)


def lattice_loss(
    components: Sequence[LatticeComponent], tolerance: float = 1e-13, max_size: int = MAX_FFT_SIZE
) -> LatticeLoss | None:
    """Compose lattice components by FFT; ``None`` if the window would exceed ``max_size``.

    ``tolerance`` bounds the aliasing error E (absolute, on δ).
    """
    components = [c for c in components if c.count > 0]
    gamma = fraction_gcd([c.step for c in components])
    multipliers = [int(c.step / gamma) for c in components]
    # A fine lattice (e.g. 1,000 unrelated σ²) makes the multipliers astronomically large; a
    # component whose own variance n²·count·Var(K) exceeds max_size² already needs a window
    # wider than max_size, so give up before any float conversion can overflow.
    for component, n in zip(components, multipliers, strict=True):
        if component.sigma2 is not None:
            log_variance = math.log(component.sigma2)
        else:
            probabilities = np.asarray(component.probabilities)
            values = np.arange(len(probabilities))
            spread = float(probabilities @ (values - probabilities @ values) ** 2)
            log_variance = math.log(max(spread, 1e-300))
        if math.log(component.count) + 2 * math.log(n) + log_variance > 2 * math.log(max_size):
            return None
    offset = sum((c.count * c.offset for c in components), Fraction(0))
    mean = 0.0
    proxy_variance = 0.0
    for component, n in zip(components, multipliers, strict=True):
        if component.sigma2 is not None:
            proxy_variance += component.count * n * n * float(component.sigma2)
        else:
            probabilities = np.asarray(component.probabilities)
            values = np.arange(len(probabilities))
            k_mean = float(probabilities @ values)
            mean += component.count * n * k_mean
            k_var = float(probabilities @ (values - k_mean) ** 2)
            proxy_variance += component.count * n * n * max(k_var, 1e-300)
    center = round(mean)
    half = 2 + math.sqrt(2 * proxy_variance * math.log(4 / tolerance))
    size = 1 << max(4, math.ceil(math.log2(2 * half + 4)))
    while True:
        if size > max_size:
            return None
        aliasing = _tail_bound(components, multipliers, size / 2 - 1.5, proxy_variance)
        if aliasing <= tolerance:
            break
        size *= 2
    frequencies = np.arange(size, dtype=np.int64)
    log_phi = np.zeros(size)
    phi_complex = None
    for component, n in zip(components, multipliers, strict=True):
        if component.sigma2 is not None:
            index = (frequencies * (n % size)) % size
            signed = np.where(index > size // 2, index - size, index)
            theta = (2 * math.pi / size) * signed
            log_phi += component.count * _discrete_gaussian_log_phi(theta, float(component.sigma2))
        else:
            masses = np.zeros(size, dtype=np.complex128)
            positions = (n * np.arange(len(component.probabilities), dtype=np.int64)) % size
            np.add.at(masses, positions, np.asarray(component.probabilities))
            factor = np.fft.ifft(masses) * size
            factor = factor**component.count if component.count > 1 else factor
            phi_complex = factor if phi_complex is None else phi_complex * factor
    phi = np.exp(log_phi)
    if phi_complex is not None:
        phi = phi * phi_complex
    residues = np.fft.fft(phi).real / size
    first = center - size // 2 + 1
    window = residues[(first + np.arange(size)) % size]
    np.clip(window, 0.0, None, out=window)
    groups = len(components)
    roundoff = (
        2
        * _UNIT_ROUNDOFF
        * math.sqrt(size)
        * (math.log2(size) + groups + sum(math.log2(c.count + 1) for c in components) + 4)
    )
    return LatticeLoss(
        probabilities=window,
        first=first,
        gamma=gamma,
        offset=offset,
        error=aliasing + roundoff,
    )
