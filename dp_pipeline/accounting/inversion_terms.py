"""The components of the MGF inversion (`inversion`) and their moment generating functions.

- `SmoothGaussian`: discrete Gaussians with σ² >= `SMOOTH_SIGMA2`, one factor e^{ρ s(s+1)}
  of the composed MGF (the lattice comb is bounded by `InversionComposition`);
- `SupportGroup`: a loss with finite support, M(s) = Σ_i p_i e^{s l_i}, stacked by size into
  `SupportBucket` arrays for vectorised node sums;
- `ThetaGaussian`: a support discrete Gaussian with σ² >= `THETA_SIGMA2`, whose MGF is summed
  exactly by Poisson summation (`theta_nodes`), a few terms per node whatever σ².

Each carries the float error bounds the inversion's error budget needs (see the docstring
of `inversion` for the budget and `ThetaGaussian`/`theta_nodes` for the Poisson sums).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = [
    "SMOOTH_SIGMA2",
    "THETA_SIGMA2",
    "SmoothGaussian",
    "SupportBucket",
    "SupportGroup",
    "ThetaGaussian",
    "discrete_gaussian_support",
    "node_values",
    "smooth_gaussian",
    "stack_buckets",
    "theta_nodes",
]

UNIT_ROUNDOFF = 2.0**-53
_U = UNIT_ROUNDOFF
SMOOTH_SIGMA2 = 36.5  # π²σ²/8 >= 45: the comb between the lattice returns is below e^-45
THETA_SIGMA2 = 1.0  # a support Gaussian this wide is summed by Poisson summation (w_1 < e^-19)
_THETA_OMIT = 80.0  # Poisson terms farther than (K+1)P from u: below e^-80 relative, bounded


@dataclass(frozen=True)
class SmoothGaussian:
    """``count`` discrete Gaussians N_Z(0, σ²) with shift μ (σ² >= SMOOTH_SIGMA2)."""

    sigma2: float  # nearest float; sigma2_error bounds |float - exact|
    mu: int
    count: int
    rho: float  # μ²/(2σ²), correctly rounded from the exact rational

    @property
    def period(self) -> float:
        return 2 * math.pi * self.sigma2 / self.mu


@dataclass(frozen=True)
class SupportGroup:
    """``count`` copies of a loss with finite support: P-masses ``masses`` at ``losses``.

    ``infinite_mass``: P[L = +∞] (an outcome Q cannot produce) per copy, counted in both
    bounds; ``dropped_mass``: truncated P-mass per copy, counted as +∞ in the upper bound
    only. ``loss_error`` bounds |float loss - exact loss| and ``mass_error`` the relative
    error of each float mass.
    """

    masses: np.ndarray
    losses: np.ndarray
    count: int
    infinite_mass: float = 0.0
    dropped_mass: float = 0.0
    loss_error: float = 0.0
    mass_error: float = 4 * _U
    gaussian: tuple[float, int] | None = None  # (σ², μ): a discrete Gaussian, exact MGF


def discrete_gaussian_support(sigma2: float, shift: int, count: int) -> SupportGroup:
    """N_Z(0, σ²) with shift μ as a finite support: y in [-R, R], R = ceil(39σ) + 2.

    P-masses e^{-y²/(2σ²)}/Z summed directly (Z by the same sum plus its tail bound), losses
    (μ² + 2μy)/(2σ²); the mass beyond R (< e^{-760}) is counted as dropped. For σ² >= 1
    the group also carries (σ², μ): `InversionComposition` then evaluates its exact MGF in
    closed form (module docstring) instead of the truncated sum, with no dropped mass.
    """
    sigma = math.sqrt(sigma2)
    limit = math.ceil(39 * sigma) + 2
    ys = np.arange(-limit, limit + 1, dtype=np.float64)
    log_weights = -(ys * ys) / (2 * sigma2)
    total = float(np.sum(np.exp(log_weights)))
    masses = np.exp(log_weights) / total
    # Σ_{|y| > R} e^{-y²/(2σ²)} <= 2 e^{-(R+1)²/(2σ²)} / (1 - e^{-(2R+3)/(2σ²)}), relative to Z>=1.
    dropped = (
        2
        * math.exp(-((limit + 1) ** 2) / (2 * sigma2))
        / -math.expm1(-(2 * limit + 3) / (2 * sigma2))
    )
    losses = (shift * shift + 2 * shift * ys) / (2 * sigma2)
    keep = masses > 0
    mass_error = 8 * _U * (float(np.max(-log_weights)) + 2) + 2 * len(ys) * _U
    return SupportGroup(
        masses=masses[keep],
        losses=losses[keep],
        count=count,
        dropped_mass=dropped,
        loss_error=8 * _U * float(np.max(np.abs(losses))) + 8 * _U * abs(losses[0]),
        mass_error=mass_error,
        gaussian=(sigma2, shift) if sigma2 >= THETA_SIGMA2 else None,
    )


@dataclass(frozen=True)
class ThetaGaussian:
    """A discrete Gaussian support group evaluated by Poisson summation (module docstring)."""

    sigma2: float
    mu: int
    count: int
    rho: float  # μ²/(2σ²) from the float σ² (relative error <= 3u)
    period: float  # P = 2πσ²/μ (relative error <= 5u)
    reach: int  # K: the terms k with |u - kP| < (K+1)P are summed
    log_s0: float  # log Σ_k e^{-2π²σ²k²}
    omitted: float  # bound on the terms left out, relative to e^{ρ(c²+c)}

    @classmethod
    def of(cls, group: SupportGroup) -> ThetaGaussian:
        sigma2, mu = group.gaussian
        width = 2 * math.pi**2 * sigma2
        reach = max(0, math.ceil(math.sqrt(_THETA_OMIT / width)) - 1)
        log_s0 = math.log1p(2 * sum(math.exp(-width * k * k) for k in range(1, 4)))
        # (K + 1 - 1e-6): the window is placed by a float floor(u/P)
        omitted = (
            2.0001
            * math.exp(-width * (reach + 1 - 1e-6) ** 2)
            / -math.expm1(-width * (2 * reach + 2.99))
        )
        return cls(
            sigma2=sigma2,
            mu=mu,
            count=group.count,
            rho=mu * mu / (2 * sigma2),
            period=2 * math.pi * sigma2 / mu,
            reach=reach,
            log_s0=log_s0,
            omitted=omitted + 1e-300,
        )

    def log_mgf(self, c: np.ndarray) -> np.ndarray:
        """log M(c) for real c: ρc(c+1) + log(S(c)/S(0)), S(c) = Σ_k w_k cos(2πkμc)."""
        width = 2 * math.pi**2 * self.sigma2
        ripple = sum(
            math.exp(-width * k * k) * np.cos(2 * math.pi * k * self.mu * c) for k in range(1, 4)
        )
        return self.rho * c * (c + 1) + np.log1p(2 * ripple) - self.log_s0

    def slack(self, c: float) -> float:
        """Bound on |computed log M(c) - exact log M(c)| (c >= 0)."""
        return 8 * _U * (self.rho * (c * c + c) + 4) + 3 * math.exp(-32 * math.pi**2 * self.sigma2)


@dataclass
class SupportBucket:
    """Support groups of one support size, stacked for vectorised evaluation."""

    log_masses: np.ndarray  # (G, A), -inf where padded
    losses: np.ndarray  # (G, A)
    counts: np.ndarray  # (G,)
    loss_error: np.ndarray  # (G,)
    mass_error: np.ndarray  # (G,)


def stack_buckets(groups: Sequence[SupportGroup]) -> list[SupportBucket]:
    by_size: dict[int, list[SupportGroup]] = {}
    for group in groups:
        by_size.setdefault(len(group.masses), []).append(group)
    buckets = []
    for size, members in by_size.items():
        if size == 0:
            continue
        with np.errstate(divide="ignore"):
            log_masses = np.log(np.stack([g.masses for g in members]))
        buckets.append(
            SupportBucket(
                log_masses=log_masses,
                losses=np.stack([np.asarray(g.losses, dtype=np.float64) for g in members]),
                counts=np.array([g.count for g in members], dtype=np.float64),
                loss_error=np.array([g.loss_error for g in members]),
                mass_error=np.array([g.mass_error for g in members]),
            )
        )
    return buckets


def _exp_sum(real: np.ndarray, imag: np.ndarray, axis: int) -> np.ndarray:
    """Σ over ``axis`` of e^{real + i·imag} (``real`` broadcast to ``imag``'s shape): the
    same floats as ``np.exp(real + 1j * imag).sum(axis)``, whose real parts are ``real``
    and imaginary parts ``imag`` exactly, laid out like ``imag`` as that sum's are (so
    summed in the same order), without its temporary complex arrays."""
    exponent = np.empty_like(imag, dtype=np.complex128)
    exponent.real[...] = real
    exponent.imag[...] = imag
    np.exp(exponent, out=exponent)
    return exponent.sum(axis=axis)


def theta_nodes(theta: ThetaGaussian, c: float, u: np.ndarray, log_value, log_with_error, error):
    """Add ``count``·log M(c + iu) of a Poisson-summed Gaussian to the node arrays.

    Term k (relative to e^{top}, top = ρ(c²+c) - log S(0)): e^{-ρd²} e^{iφ}, d = u - kP,
    φ = ρu(2c+1) - 2πkμc. Float error of the exponent (σ², ρ, P, u and every operation):
    |Δ Re| <= 16u·ρ(d² + |d|(|k|P + u) + 1), |Δ Im| <= 8u(2ρu(2c+1) + 2π|k|μc + 1); the
    term's error is its magnitude times expm1 of their sum (1.01 for exp's rounding), the
    sum adds (T + 4)u·Σ|terms|, and the terms left out add `omitted`.
    """
    offsets = np.arange(-theta.reach, theta.reach + 2, dtype=np.float64)
    ks = np.floor(u / theta.period)[:, None] + offsets[None, :]  # (N, T)
    d = u[:, None] - ks * theta.period
    rho = theta.rho
    real = -rho * d * d
    imag = rho * (2 * c + 1) * u[:, None] - (2 * math.pi * theta.mu * c) * ks
    sums = _exp_sum(real, imag, axis=1)
    moduli = np.exp(real)
    absolute = moduli.sum(axis=1)
    eta = 16 * _U * rho * (d * d + np.abs(d) * (np.abs(ks) * theta.period + u[:, None]) + 1)
    eta += (
        8 * _U * (2 * rho * (2 * c + 1) * u[:, None] + 2 * math.pi * theta.mu * c * np.abs(ks) + 1)
    )
    sum_error = (
        (moduli * np.expm1(eta * 1.01 + 4 * _U)).sum(axis=1) * 1.01
        + absolute * (ks.shape[1] + 4) * _U * 1.01
        + theta.omitted * 1.01
    )
    top = rho * (c * c + c) - theta.log_s0
    magnitude = np.abs(sums)
    count = theta.count
    with np.errstate(divide="ignore"):
        logs = np.log(sums) + top  # a zero sum gives -inf + i·0: a zero node value
        log_magnitude = np.log(magnitude)
    log_value = log_value + count * logs.real + 1j * (count * logs.imag)
    log_with_error = log_with_error + count * (
        np.log(np.maximum(magnitude + sum_error, 1e-300)) + top
    )
    finite_log = np.where(np.isfinite(log_magnitude), np.abs(log_magnitude), 0.0)
    error = error + count * (
        4 * _U * (np.abs(np.log(np.maximum(absolute, 1e-300))) + finite_log + abs(top) + 1)
        + theta.slack(c)
    )
    return log_value, log_with_error, error


def smooth_gaussian(sigma2, shift: int, count: int) -> SmoothGaussian:
    """A SmoothGaussian from the exact rational σ² (ρ correctly rounded from the rational)."""
    rho = Fraction(shift * shift) / (2 * sigma2)
    return SmoothGaussian(sigma2=float(sigma2), mu=shift, count=count, rho=float(rho))


def node_values(buckets, thetas, smooth: tuple, node: tuple):
    """F(u_m)/e^{K(c)} at u_m = m·h, m = 0..count, and an absolute error bound each, for a
    composition of support buckets, Poisson-summed Gaussians and a smooth factor
    (``smooth`` = (ρ, its error bound, the lattice model error); ``node`` = (c, ε, K(c), h,
    count)).

    With F = F_other·Π_g z_g^{n_g} (z_g a finite-support sum, e_g its absolute error
    bound, E the error bound of the exponent of F_other):
    |F_true - F| <= |F_other|·(e^E·Π(|z_g| + e_g)^{n_g} - Π|z_g|^{n_g}).
    """
    rho, rho_error, model_error = smooth
    c, epsilon, k0, h, count = node
    u = h * np.arange(count + 1, dtype=np.float64)
    s = c + 1j * u
    quadratic = rho * s * (s + 1)
    linear = s * epsilon
    log_s, log_s1 = np.log(s), np.log(s + 1)
    log_value = quadratic - linear - log_s - log_s1 - k0
    magnitude_terms = np.abs(quadratic) + np.abs(linear) + np.abs(log_s) + np.abs(log_s1)
    error = 8 * _U * (magnitude_terms + abs(k0) + 1)
    error += rho_error * np.abs(s * (s + 1)) * 1.01 + model_error * 1.01
    log_with_error = log_value.real.copy()
    abs_s = np.abs(s)
    for bucket in buckets:
        real = bucket.log_masses[None] + c * bucket.losses[None]  # (1, G, A)
        top = np.max(real, axis=2)  # (1, G)
        relative_log = real - top[..., None]
        absolute = np.exp(relative_log).sum(axis=2)  # Σ|terms|, (1, G)
        # Terms below e^-60 of the largest are left out; their Σ|t| joins the error.
        kept = np.flatnonzero(np.any(relative_log[0] > -60, axis=0))
        omitted = absolute - np.exp(relative_log[..., kept]).sum(axis=2)
        losses = bucket.losses[:, kept]
        phases = u[:, None, None] * losses[None]
        sums = _exp_sum(relative_log[..., kept], phases, axis=2)  # (N, G)
        size = len(kept)
        finite_log = np.where(np.isfinite(bucket.log_masses), np.abs(bucket.log_masses), 0)
        per_term = (
            4
            * _U
            * (
                np.max(finite_log, axis=1)[None]
                + np.max(np.abs(c * bucket.losses), axis=1)[None]
                + np.abs(top)
                # max_a |u·l_a| = u·max_a |l_a| exactly (u >= 0, rounding is monotone)
                + u[:, None] * np.max(np.abs(bucket.losses), axis=1)[None]
                + 2
            )
        )
        loss_part = np.expm1(abs_s[:, None] * bucket.loss_error[None] * 1.01)
        sum_error = (
            absolute * (per_term + (size + 2) * _U + bucket.mass_error[None] + loss_part)
            + np.maximum(omitted, 0) * 1.01
            + absolute * 2 * size * _U
        )
        magnitude = np.abs(sums)
        with np.errstate(divide="ignore"):
            logs = np.log(sums) + top  # a zero sum gives -inf + i·0: a zero node value
        counts = bucket.counts[None]
        log_value = log_value + (logs.real * counts).sum(axis=1)
        log_value = log_value + 1j * (logs.imag * counts).sum(axis=1)
        log_with_error = log_with_error + (
            (np.log(magnitude + sum_error) + top) * bucket.counts[None]
        ).sum(axis=1)
        error = error + 4 * _U * (
            (np.abs(np.log(absolute)) + np.abs(top)) * bucket.counts[None]
        ).sum(axis=1)
    for theta in thetas:
        log_value, log_with_error, error = theta_nodes(
            theta, c, u, log_value, log_with_error, error
        )
    finite_real = np.where(np.isfinite(log_value.real), np.abs(log_value.real), 0.0)
    error = error + 4 * _U * (finite_real + 1)
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.exp(log_value)
        abs_values = np.abs(values)
        high = np.exp(log_with_error + error)
        abs_errors = high * -np.expm1(np.minimum(log_value.real - log_with_error - error, 0))
    values = np.where(np.isfinite(values), values, 0)
    abs_errors = np.where(np.isfinite(abs_errors), abs_errors, 1e300)
    return values, abs_values, abs_errors
