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
- anything with a finite loss support (discrete Laplace, randomized response for pure ε-DP,
  the exponential mechanism's bounded-range lattice, pmf pairs, discrete Gaussians with
  σ² < 1 truncated at 39σ, the dropped mass counted as L = +∞ for the upper bound):
  M(s) = Σ_i p_i e^{s l_i};
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

The result is returned as lower <= δ <= upper in floats rounded outward by whole ulps
(`outward`: valid among subnormal floats too); a δ below the float range is reported as
(0, 5e-324).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dp_pipeline.accounting.inversion_terms import (
    SMOOTH_SIGMA2,
    SmoothGaussian,
    SupportGroup,
    ThetaGaussian,
    discrete_gaussian_support,
    node_values,
    smooth_gaussian,
    stack_buckets,
)
from dp_pipeline.accounting.outward import exp_down, exp_up, round_down, round_up
from dp_pipeline.accounting.saddle import saddle_point
from dp_pipeline.errors import DPValueError

__all__ = [
    "SMOOTH_SIGMA2",
    "TINY",
    "InversionComposition",
    "SmoothGaussian",
    "SupportGroup",
    "discrete_gaussian_support",
    "smooth_gaussian",
]

_U = 2.0**-53
TINY = 5e-324  # the smallest positive float: the upper bound of a δ that underflows
_TARGET = 1e-15  # each of the discretisation and truncation errors, relative to δ
_NODE_WORK = 1 << 19  # terms summed over all nodes of one δ evaluation (time and memory)
_MIN_NODES, _MAX_NODES = 1 << 9, 1 << 18
_STAGES = 4  # spans of the staged outer tail (`InversionComposition._outer_tail`)
_LOG_TINY = math.log(TINY)


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
        self._thetas = [ThetaGaussian.of(g) for g in self.groups if g.gaussian is not None]
        direct = [g for g in self.groups if g.gaussian is None]
        self._buckets = stack_buckets(direct)
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
        exponent magnitude; per Poisson-summed Gaussian, `ThetaGaussian.slack`.
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

    # ------------------------------------------------------------------ δ(ε)
    def delta_bounds(self, epsilon: float) -> tuple[float, float]:
        """Rigorous (lower, upper) on δ(ε) for ε >= 0."""
        if not self.usable:
            raise DPValueError("the MGF inversion needs a smooth discrete Gaussian component")
        c = saddle_point(self._log_mgf, epsilon)
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
        nodes, short = 1, 0  # short: a count known to miss the target
        while True:
            edge = (nodes + 1) * h
            if edge > limit:
                band = 0.0
                break
            band = band_tail(edge)
            if band <= _TARGET * estimate:
                # the growth overshoots by up to 25%: bisect to the smallest count that meets
                # the target (the band tail decreases with the edge), the node sums dominate
                while nodes - short > 1:
                    middle = (short + nodes) // 2
                    middle_band = band_tail((middle + 1) * h)
                    if middle_band <= _TARGET * estimate:
                        nodes, band = middle, middle_band
                    else:
                        short = middle
                break
            if nodes >= max_nodes:
                break
            grown = min(max_nodes, max(nodes + 1, int(nodes * 1.25)), int(limit / h) - 1)
            if grown <= nodes:
                break
            short, nodes = nodes, grown
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
        values, abs_values, errors = node_values(
            self._buckets,
            self._thetas,
            (self.rho, self.rho_error, self.model_error),
            (c, epsilon, k0, h, nodes),
        )
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
        # outward at every magnitude: among subnormals a relative factor rounds back to
        # the nearest float, which may be below δ (`outward`)
        upper = TINY if log_upper < _LOG_TINY else exp_up(min(log_upper, 0.0))
        lower = exp_down(min(k0 + math.log(lower_ratio) - slack, 0.0)) if lower_ratio > 0 else 0.0
        upper = min(1.0, round_up(upper + self.infinite_upper * (1 + 4 * _U), 1))
        lower = round_down((lower + self.infinite_lower) * (1 - 4 * _U), 1)
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
