"""Exact δ(ε) of a composition by inverting its moment generating function (Bromwich).

For a privacy loss L (under P, the distribution with the person) with moment generating
function M(s) = E_P[e^{sL}], the hockey-stick function h(z) = (1 - e^{ε-z})_+ has the
two-sided Laplace transform ∫ h(z) e^{-sz} dz = e^{-sε}/(s(s+1)) for Re s > 0, so for every
c > 0

    δ(ε) = P[L = +∞] + (1/2π) ∫ F(u) du,    F(u) = M(c+iu) e^{-(c+iu)ε} / ((c+iu)(c+iu+1)).

Composition multiplies moment generating functions, so a thousand mechanisms cost a
thousand products per node, not a thousand convolutions; nothing is discretised, and the
relative precision does not depend on how small δ is (c is the saddle point, where the
integrand does not oscillate). Components:

- a discrete Gaussian N_Z(0, σ²) with shift μ and σ² >= 36.5 ("smooth"): by Poisson
  summation M(s) = e^{ρ s(s+1)}·T(s), ρ = μ²/(2σ²), T(s) = Σ_k w_k e^{-2πikμs}/Σ_k w_k,
  w_k = e^{-2π²σ²k²}. For |u| <= P/4 (P = 2πσ²/μ, the period of the lattice) |T - 1| <=
  4.0002·e^{-π²σ²}, which is charged to every node; all smooth Gaussians together are one
  factor e^{ρ_G s(s+1)}, whatever their number;
- anything with a finite loss support (discrete Laplace, randomized response for pure ε-DP
  and the exponential mechanism, pmf pairs, discrete Gaussians with σ² < 1 truncated at
  39σ, the dropped mass counted as L = +∞ for the upper bound): M(s) = Σ_i p_i e^{s l_i};
- a discrete Gaussian summed exactly at every node but with σ² >= 1 (the "support"
  Gaussians the accountant does not treat as smooth): the same Poisson sum, kept exact,
  M(s) = e^{ρ(c²+c)} Σ_k e^{-ρ(u - kP)²} e^{i(ρu(2c+1) - 2πkμc)} / Σ_k w_k, of which only
  the terms with |u - kP| < (K+1)P are summed (2K+2 of them, 2π²σ²(K+1)² >= 80; the others
  total <= 2.0001·e^{-80} relative), so a node costs a few terms instead of ~78σ.

Error budget (every term is a rigorous bound; their sum is added to the upper bound and
subtracted from the lower):

1. discretisation: the trapezoid rule with step h on an integrand analytic in the strip
   |Im u| < a has error <= 2B/(e^{2πa/h} - 1) with B >= ∫|F(u ± ia)| du (Trefethen &
   Weideman 2014, Thm 5.1); |M(c'+iu)| <= M(c') and ∫ du/|s(s+1)| <= π/c' give
   B = max over c' = c ± a of M(c') e^{-c'ε} π/c' (log-convex, so the ends suffice);
2. truncation at |u| <= Nh: for |u| <= P_min/4 the smooth part decays as e^{-ρ_G u²}; beyond,
   the comb bound |M_j(c+iu)| <= e^{ρ_j(c²+c)} Σ_k e^{-ρ_j(u - kP_j)²} of the component with
   the shortest period P*, summed over the nodes period by period (each period holds one
   bump of node sum <= 1 + sqrt(π/ρ*)/h, weighted by 1/u²); or staged over the shortest
   periods P_1 <= P_2 <= ...: on (P_i/4, P_{i+1}/4] every component after the i-th is still
   in its band, so their joint Gaussian decay bounds it, and the comb bound starts later;
3. floating point: each node's exponent carries an absolute error bound (ulps times the
   magnitudes of its terms, the float σ²/ρ/losses/masses errors times |s|, and the
   cancellation factor Σ|terms|/|Σ terms| of each finite-support sum); the node sum adds
   N·u·Σ|F|. The tail bounds of 1 and 2 are relative to e^{K(c)} as computed; they are
   scaled by e^{slack}, slack bounding the float error of the computed K at c and c + a.

The result is returned as lower <= δ <= upper in floats rounded outward; a δ below the
float range is reported as (0, 5e-324).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "SMOOTH_SIGMA2",
    "InversionComposition",
    "SmoothGaussian",
    "SupportGroup",
    "discrete_gaussian_support",
]

_U = 2.0**-53
TINY = 5e-324
SMOOTH_SIGMA2 = 36.5  # π²σ²/8 >= 45: the comb between the lattice returns is below e^-45
THETA_SIGMA2 = 1.0  # a support Gaussian this wide is summed by Poisson summation (w_1 < e^-19)
_THETA_OMIT = 80.0  # Poisson terms farther than (K+1)P from u: below e^-80 relative, bounded
_TARGET = 1e-15  # each of the discretisation and truncation errors, relative to δ
_NODE_WORK = 1 << 19  # terms summed over all nodes of one δ evaluation (time and memory)
_MIN_NODES, _MAX_NODES = 1 << 9, 1 << 18
_STAGES = 4  # spans of the staged outer tail (`InversionComposition._outer_tail`)
_LOG_TINY = math.log(TINY)


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
class _Theta:
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
    def of(cls, group: SupportGroup) -> _Theta:
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
class _Bucket:
    """Support groups of one support size, stacked for vectorised evaluation."""

    log_masses: np.ndarray  # (G, A), -inf where padded
    losses: np.ndarray  # (G, A)
    counts: np.ndarray  # (G,)
    loss_error: np.ndarray  # (G,)
    mass_error: np.ndarray  # (G,)


def _buckets(groups: Sequence[SupportGroup]) -> list[_Bucket]:
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
            _Bucket(
                log_masses=log_masses,
                losses=np.stack([np.asarray(g.losses, dtype=np.float64) for g in members]),
                counts=np.array([g.count for g in members], dtype=np.float64),
                loss_error=np.array([g.loss_error for g in members]),
                mass_error=np.array([g.mass_error for g in members]),
            )
        )
    return buckets


@dataclass
class InversionComposition:
    """A composition of smooth discrete Gaussians and finite-support losses (one direction).

    ``delta_bounds(ε)`` returns rigorous (lower, upper) for δ(ε); see the module docstring.
    """

    gaussians: Sequence[SmoothGaussian]
    groups: Sequence[SupportGroup]
    rho_error_extra: float = 0.0
    _buckets: list = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.gaussians = [g for g in self.gaussians if g.count > 0]
        self.groups = [g for g in self.groups if g.count > 0]
        terms = [g.count * g.rho for g in self.gaussians]
        self.rho = math.fsum(terms)
        # each ρ_j correctly rounded (u), times count exact up to u, fsum correctly rounded.
        self.rho_error = 3 * _U * self.rho + self.rho_error_extra
        self._thetas = [_Theta.of(g) for g in self.groups if g.gaussian is not None]
        direct = [g for g in self.groups if g.gaussian is None]
        self._buckets = _buckets(direct)
        self._work_per_node = (
            4
            + sum(b.losses.shape[0] * b.losses.shape[1] for b in self._buckets)
            + sum(2 * t.reach + 3 for t in self._thetas)
        )
        log_finite = 0.0
        log_kept = 0.0
        for group in direct:  # a Poisson-summed Gaussian has no dropped mass
            log_finite += group.count * math.log1p(-min(group.infinite_mass, 1.0))
            log_kept += group.count * math.log1p(
                -min(group.infinite_mass + group.dropped_mass, 1.0)
            )
        # P[some L = +∞] (lower: only true +∞; upper: with the dropped mass), outward.
        self.infinite_lower = max(0.0, -math.expm1(log_finite) * (1 - 1e-12))
        self.infinite_upper = min(1.0, -math.expm1(log_kept) * (1 + 1e-12) + 1e-300)
        if not any(g.infinite_mass or g.dropped_mass for g in direct):
            self.infinite_upper = 0.0
        self.model_error = sum(
            4.0002 * g.count * math.exp(-(math.pi**2) * g.sigma2) for g in self.gaussians
        )
        self.max_loss = sum(g.count * float(np.max(g.losses)) for g in self.groups if len(g.losses))
        if self.gaussians:
            # the shortest periods, and the total ρ of the components after each (staged
            # outer tail: a few stages, each costs a comb bound over every component)
            ordered = sorted(self.gaussians, key=lambda g: g.period)
            suffix = [0.0] * len(ordered)
            for i in range(len(ordered) - 2, -1, -1):
                suffix[i] = suffix[i + 1] + ordered[i + 1].count * ordered[i + 1].rho
            self._stages = (ordered, suffix[: min(len(ordered) - 1, _STAGES)])
            star = min(self.gaussians, key=lambda g: g.period)
            self.star = star
            self.quarter = star.period / 4
            self.comb_floor = 2.0001 * math.exp(-(math.pi**2) * star.sigma2 / 2)
            self.others = math.exp(
                sum(2.0001 * g.count * math.exp(-2 * math.pi**2 * g.sigma2) for g in self.gaussians)
                + sum(2.0001 * g.count * math.exp(-(math.pi**2) * g.sigma2) for g in self.gaussians)
            )

    @property
    def usable(self) -> bool:
        """Whether the smooth Gaussian part is there to make the integrand decay."""
        return self.rho > 0

    # ------------------------------------------------------------------ real axis
    def _support_log_mgf(self, c: np.ndarray):
        """Σ_g n_g log M_g(c) and its first two derivatives, for real c (vectorised)."""
        value = np.zeros_like(c)
        first = np.zeros_like(c)
        second = np.zeros_like(c)
        for bucket in self._buckets:
            exponents = bucket.log_masses[None] + c[:, None, None] * bucket.losses[None]
            top = np.max(exponents, axis=2, keepdims=True)
            weights = np.exp(exponents - top)
            total = weights.sum(axis=2)
            mean = (weights * bucket.losses[None]).sum(axis=2) / total
            square = (weights * bucket.losses[None] ** 2).sum(axis=2) / total
            value += ((np.log(total) + top[..., 0]) * bucket.counts[None]).sum(axis=1)
            first += (mean * bucket.counts[None]).sum(axis=1)
            second += (np.maximum(square - mean * mean, 0.0) * bucket.counts[None]).sum(axis=1)
        for theta in self._thetas:
            value += theta.count * theta.log_mgf(c)
            first += theta.count * theta.rho * (2 * c + 1)
            second += theta.count * 2 * theta.rho
        return value, first, second

    def _log_mgf_slack(self, c: float) -> float:
        """Bound on the float error of the support part of K(c) (real c >= 0).

        Per finite-support copy: the masses' and losses' errors and 8 ulps of the largest
        exponent magnitude; per Poisson-summed Gaussian, `_Theta.slack`.
        """
        total = sum(theta.count * theta.slack(c) for theta in self._thetas)
        for bucket in self._buckets:
            finite = np.where(np.isfinite(bucket.log_masses), np.abs(bucket.log_masses), 0)
            magnitude = np.max(finite, axis=1) + c * np.max(np.abs(bucket.losses), axis=1)
            per_copy = (
                bucket.mass_error * 1.01
                + c * bucket.loss_error * 1.01
                + 8 * _U * (magnitude + 2 + bucket.losses.shape[1])
            )
            total += float(np.sum(per_copy * bucket.counts))
        return total

    def _log_mgf(self, c, epsilon: float):
        c = np.atleast_1d(np.asarray(c, dtype=np.float64))
        value, first, second = self._support_log_mgf(c)
        rho = self.rho
        return (
            value + rho * c * (c + 1) - c * epsilon,
            first + rho * (2 * c + 1) - epsilon,
            second + 2 * rho,
        )

    def _saddle(self, epsilon: float) -> float:
        """c > 0 minimising K(c) - log(c(c+1)) (any c > 0 is valid; this one is tight)."""
        low, high = 1e-300, 1.0

        def slope(c):
            _, first, _ = self._log_mgf(c, epsilon)
            return float(first[0]) - 1 / c - 1 / (c + 1)

        while slope(high) < 0:
            low, high = high, high * 4
            if high > 1e300:
                return high
        if slope(low) >= 0:
            return low

        # bisection in log c down to a factor 1.5, then safeguarded Newton (the slope is
        # increasing: K is convex, -log(c(c+1)) too), bisecting when a step leaves the bracket
        def slope_and_curvature(c):
            _, first, second = self._log_mgf(c, epsilon)
            curvature = float(second[0]) + 1 / c**2 + 1 / (c + 1) ** 2
            return float(first[0]) - 1 / c - 1 / (c + 1), curvature

        while high > 1.5 * low:
            middle = math.sqrt(low * high)
            if slope(middle) < 0:
                low = middle
            else:
                high = middle
        c = math.sqrt(low * high)
        for _ in range(30):
            value, curvature = slope_and_curvature(c)
            if value < 0:
                low = c
            else:
                high = c
            if high - low <= 1e-4 * high:
                break
            step = c - value / curvature
            c = step if low < step < high else 0.5 * (low + high)
        return 0.5 * (low + high)

    # ------------------------------------------------------------------ δ(ε)
    def delta_bounds(self, epsilon: float) -> tuple[float, float]:
        """Rigorous (lower, upper) on δ(ε) for ε >= 0."""
        if not self.usable:
            raise ValueError("the MGF inversion needs a smooth discrete Gaussian component")
        c = self._saddle(epsilon)
        k0, _, k2 = (float(x[0]) for x in self._log_mgf(c, epsilon))
        # Laplace approximation of δ/e^{K(c)}: the scale the error targets are relative to.
        curvature = k2 + 1 / c**2 + 1 / (c + 1) ** 2
        estimate = 1 / (c * (c + 1) * math.sqrt(2 * math.pi * curvature))
        # (1/2π)∫|F| <= e^{K(c)}/(2c): a δ far below the float range ends here.
        if k0 - math.log(2 * c) + 16 * _U * (abs(k0) + 1) < _LOG_TINY:
            return self.infinite_lower, max(TINY, self.infinite_upper)
        # strip half-width a and node step h (error 1 of the module docstring), in logs
        a = min(0.5 * c, math.sqrt(2 * 40 / max(k2, 1e-300)))
        side = self._log_mgf(np.array([c - a, c + a]), epsilon)[0]
        log_strip = max(
            float(side[0]) - k0 + math.log(math.pi / (c - a)),
            float(side[1]) - k0 + math.log(math.pi / (c + a)),
        ) + math.log(1.001)
        log_strip += self._log_mgf_slack(c + a)
        log_ratio = log_strip - math.log(math.pi * _TARGET * estimate)
        # e^{2πa/h} = 1 + ratio, so the error is strip/π/ratio = target·estimate
        exponent = log_ratio if log_ratio > 30 else math.log1p(math.exp(log_ratio))
        h = 2 * math.pi * a / exponent
        discretisation = math.exp(log_strip - math.log(math.pi) - exponent) * 1.001
        # truncation within the band |u| <= P*/4 (error 2)
        rho_low = max(self.rho - self.rho_error, 0.0)
        limit = self.quarter
        if 2 * h > limit:
            return self.infinite_lower, 1.0  # the lattice is too coarse for this path

        def band_tail(edge: float) -> float:
            return (
                h
                / math.pi
                * self.others
                * math.exp(-rho_low * edge * edge)
                / (edge * edge * -math.expm1(-2 * rho_low * h * edge))
            )

        # more nodes where the terms per node are few (a tiny ρ decays slowly)
        max_nodes = min(_MAX_NODES, max(_MIN_NODES, _NODE_WORK // self._work_per_node))
        nodes = 1
        while True:
            edge = (nodes + 1) * h
            if edge > limit:
                band = 0.0
                break
            band = band_tail(edge)
            if band <= _TARGET * estimate or nodes >= max_nodes:
                break
            grown = min(max_nodes, max(nodes + 1, int(nodes * 1.25)), int(limit / h) - 1)
            if grown <= nodes:
                break
            nodes = grown
        if nodes >= max_nodes and band > estimate:
            # the bracket would be wider than δ itself: not worth the nodes (this happens
            # with the saddle point near the pole at 0, i.e. δ near P[L > ε])
            return self.infinite_lower, 1.0
        outer = self._outer_tail(h)
        # the tail bounds are relative to e^{K(c)} with the float ρ; the exact ρ may exceed
        # it by rho_error, which scales e^{ρ(c²+c)} by at most this factor
        scale = math.exp(self.rho_error * (c * c + c) + self._log_mgf_slack(c))
        band *= scale
        outer *= scale
        values, abs_values, errors = self._nodes(c, epsilon, k0, h, nodes)
        weights = np.full(len(values), 2.0)
        weights[0] = 1.0
        total = h / (2 * math.pi) * float(np.sum(weights * values.real))
        magnitude = h / (2 * math.pi) * float(np.sum(weights * abs_values))
        roundoff = h / (2 * math.pi) * float(np.sum(weights * errors))
        roundoff += 2 * len(values) * _U * magnitude
        error = discretisation + band + outer + roundoff + 4 * _U * magnitude
        upper_ratio = total + error
        lower_ratio = total - error
        slack = 16 * _U * (abs(k0) + 1)
        log_upper = k0 + math.log(upper_ratio) + slack if upper_ratio > 0 else -math.inf
        upper = TINY if log_upper < _LOG_TINY else math.exp(min(log_upper, 0.0)) * (1 + 4 * _U)
        upper = min(1.0, upper)
        lower = 0.0
        if lower_ratio > 0:
            log_lower = min(k0 + math.log(lower_ratio) - slack, 0.0)
            lower = math.exp(log_lower) * (1 - 4 * _U) if log_lower > _LOG_TINY + 1 else 0.0
        upper = min(1.0, upper + self.infinite_upper * (1 + 4 * _U))
        lower = max(0.0, (lower + self.infinite_lower) * (1 - 4 * _U))
        return min(lower, upper), upper

    def _outer_tail(self, h: float) -> float:
        """Σ over nodes |u| > P_min/4 of |F|/e^{K(c)}, times h/(2π) (error 2, comb bound).

        For any smooth component j (n copies, comb G_j <= e^{-ρ d²} + f between returns,
        f = 2.0001·e^{-π²σ²/2}): G_j^n <= e·e^{-nρd²} + 2nf ((a+f)^n <= e·a^n if a >= nf,
        else <= (n+1)f), or a + f for n = 1; the other components are <= 1 (+ tiny, in
        `others`). Nodes in (P_min/4, P_j/2) see the bump at 0, the period around kP_j
        (k >= 1) holds one bump of node sum <= factor·(1 + sqrt(π/(nρ))/h) + floor·(P_j/h+1)
        and weight 1/((k - 1/2)P_j)². The best component gives the bound.

        Staged: with the periods sorted, P_1 <= P_2 <= ..., the nodes in (P_i/4, P_{i+1}/4]
        are in the band of every component j > i, so there |F|/e^{K} <= others·e^{-ρ_{>i}u²}/u²
        (ρ_{>i} their total ρ, the others bounded by 1), summed from P_i/4 on like the band
        tail; the comb bound then starts at P_k/4. The smallest over k is returned.
        """
        best = self._comb_tail(h, self.quarter)
        ordered, rests = self._stages
        bands = 0.0
        for i in range(len(rests)):
            start = ordered[i].period / 4
            rest = rests[i] * (1 - 1e-12) - self.rho_error
            if rest <= 0:
                break
            bands += (
                h
                / math.pi
                * self.others
                * math.exp(-rest * start * start)
                / (start * start * -math.expm1(-2 * rest * h * start))
            )
            best = min(best, bands + self._comb_tail(h, ordered[i + 1].period / 4))
        return best

    def _comb_tail(self, h: float, start: float) -> float:
        """The comb bound of `_outer_tail` on the nodes |u| > start (start >= P_min/4)."""
        best = math.inf
        for gaussian in self.gaussians:
            n, rho, period = gaussian.count, gaussian.rho * gaussian.count, gaussian.period
            floor = 2.0001 * math.exp(-(math.pi**2) * gaussian.sigma2 / 2)
            factor, floor_n = (1.0, floor) if n == 1 else (math.e, 2 * n * floor)
            near = 0.0
            if start < period / 2:
                near = (
                    factor
                    * math.exp(-rho * start * start)
                    / (start * start * -math.expm1(-2 * rho * h * start))
                    + (period / (2 * h) + 1) * floor_n / start**2
                )
            bump = factor * (1 + math.sqrt(math.pi / rho) / h) + floor_n * (period / h + 1)
            far = bump * math.pi**2 / (2 * period**2)
            best = min(best, near + far)
        return h / (2 * math.pi) * 2 * self.others * best

    def _nodes(self, c: float, epsilon: float, k0: float, h: float, count: int):
        """F(u_m)/e^{K(c)} at u_m = m·h, m = 0..count, and an absolute error bound each.

        With F = F_other·Π_g z_g^{n_g} (z_g a finite-support sum, e_g its absolute error
        bound, E the error bound of the exponent of F_other):
        |F_true - F| <= |F_other|·(e^E·Π(|z_g| + e_g)^{n_g} - Π|z_g|^{n_g}).
        """
        u = h * np.arange(count + 1, dtype=np.float64)
        s = c + 1j * u
        rho = self.rho
        quadratic = rho * s * (s + 1)
        linear = s * epsilon
        log_value = quadratic - linear - np.log(s) - np.log(s + 1) - k0
        magnitude_terms = (
            np.abs(quadratic) + np.abs(linear) + np.abs(np.log(s)) + np.abs(np.log(s + 1))
        )
        error = 8 * _U * (magnitude_terms + abs(k0) + 1)
        error += self.rho_error * np.abs(s * (s + 1)) * 1.01 + self.model_error * 1.01
        log_with_error = log_value.real.copy()
        abs_s = np.abs(s)
        for bucket in self._buckets:
            real = bucket.log_masses[None] + c * bucket.losses[None]  # (1, G, A)
            top = np.max(real, axis=2)  # (1, G)
            relative_log = real - top[..., None]
            absolute = np.exp(relative_log).sum(axis=2)  # Σ|terms|, (1, G)
            # Terms below e^-60 of the largest are left out; their Σ|t| joins the error.
            kept = np.flatnonzero(np.any(relative_log[0] > -60, axis=0))
            omitted = absolute - np.exp(relative_log[..., kept]).sum(axis=2)
            losses = bucket.losses[:, kept]
            exponent = relative_log[..., kept] + 1j * (u[:, None, None] * losses[None])
            sums = np.exp(exponent).sum(axis=2)  # (N, G)
            size = len(kept)
            finite_log = np.where(np.isfinite(bucket.log_masses), np.abs(bucket.log_masses), 0)
            per_term = (
                4
                * _U
                * (
                    np.max(finite_log, axis=1)[None]
                    + np.max(np.abs(c * bucket.losses), axis=1)[None]
                    + np.abs(top)
                    + np.max(np.abs(u[:, None, None] * bucket.losses[None]), axis=2)
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
        for theta in self._thetas:
            log_value, log_with_error, error = _theta_nodes(
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


def _theta_nodes(theta: _Theta, c: float, u: np.ndarray, log_value, log_with_error, error):
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
    sums = np.exp(real + 1j * imag).sum(axis=1)
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
    from fractions import Fraction

    rho = Fraction(shift * shift) / (2 * sigma2)
    return SmoothGaussian(sigma2=float(sigma2), mu=shift, count=count, rho=float(rho))
