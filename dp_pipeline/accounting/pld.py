"""Privacy loss distributions on a grid, composed by FFT (Koskela, Jälkö, Prediger &
Honkela 2021; the dominating-pair discretisation of Doroshenko et al. 2022).

A mechanism with output distributions P (dataset with the person) and Q (without) has the
privacy loss L = log(P(t)/Q(t)), t ~ P, and

    δ(ε) = P[L = ∞] + E_P[max(0, 1 - e^{ε - L})].

Composition adds independent losses, so loss pmfs convolve. Discretisation on the grid
{i·h} (h = ``step``):

- **upper bound**: a loss s in [s_i, s_{i+1}] with P-mass w is split into masses on s_i and
  s_{i+1} that keep both its P-mass and its Q-mass (w·e^{-s}). The original outcome is the
  merge of the two new ones, i.e. a post-processing, so the split pair dominates the true
  one for every ε and stays dominating under composition (error O(h²) per mechanism);
- **lower bound**: each loss is rounded down to the grid (δ is increasing in the loss).

Truncation keeps arrays compact and is rigorous: for the upper bound, negligible low-loss
mass moves up to the first kept point and negligible high-loss mass to L = ∞; for the lower
bound, low-loss mass is dropped and high-loss mass moves down to the last kept point.
Convolutions use FFTs; their round-off is charged to both bounds as
Σ|error| <= sqrt(N)·||error||₂ <= 4·u·log2(N)·sqrt(N)·(||a||₂ + ||b||₂) per convolution of
probability vectors (backward-stable FFT error model, ||DFT(a)||_∞ <= ||a||₁ = 1,
u = 2^-53); it is a model-based estimate, not a proof. Both neighbouring directions are
composed; δ is the larger one.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting._checks import (
    check_delta,
    check_epsilon,
    check_integer_sensitivity,
)
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound, Method
from dp_pipeline.accounting.discrete_gaussian import (
    bisect_epsilon,
    discrete_gaussian_log_normalizer,
)
from dp_pipeline.accounting.discrete_laplace import discrete_laplace_loss_pmf
from dp_pipeline.accounting.events import pure_epsilon_of, randomized_response_masses
from dp_pipeline.accounting.pld_grid import (
    DEFAULT_STEP,
    MAX_GRID_POINTS,
    GridLoss,
    GridTooLargeError,
    check_grid_size,
    discretise,
)
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.rational import positive_rational

_UNIT_ROUNDOFF = 2.0**-53

__all__ = [
    "MAX_GRID_POINTS",
    "GridTooLargeError",
    "PrivacyLossDistribution",
    "pld_from_lattice_components",
]


def _discrete_gaussian_losses(sigma2: Fraction, shift: int):
    """Loss values (μ² + 2μy)/(2σ²), P-masses and the bounded tail mass beyond ±T."""
    s2 = float(sigma2)
    check_grid_size(2 * math.sqrt(2 * s2 * 50) + 5, f"N_Z(0, σ² = {s2:.6g}) summed term by term")
    limit = math.ceil(math.sqrt(2 * s2 * 50)) + 1
    ys = np.arange(-limit, limit + 1, dtype=np.float64)
    log_normalizer = discrete_gaussian_log_normalizer(s2)
    masses = np.exp(-(ys * ys) / (2 * s2) - log_normalizer)
    # P[|Y| > T] <= 2·P[Y = T+1] / (1 - e^{-(2T+3)/(2σ²)}) (ratios of consecutive terms).
    tail = (
        2
        * math.exp(-((limit + 1) ** 2) / (2 * s2) - log_normalizer)
        / -math.expm1(-(2 * limit + 3) / (2 * s2))
    )
    losses = (shift * shift + 2 * shift * ys) / (2 * s2)
    return losses, masses, tail


class PrivacyLossDistribution:
    """Privacy loss distribution of a (composed) mechanism, both neighbouring directions.

    Build with `from_pmfs`, `from_discrete_gaussian`, `from_discrete_laplace`,
    `from_randomized_response` or `from_mechanism`; combine with `compose` and
    `self_compose`; query with `delta` / `epsilon`: a `DeltaBound` / `EpsilonBound` (upper:
    the guarantee, lower), as every ``delta`` / ``epsilon`` of the accounting API. All
    parts must share one ``step``.
    """

    def __init__(self, forward: tuple[GridLoss, GridLoss], backward=None):
        self._forward = forward
        self._backward = backward  # None: symmetric (same distribution both ways)

    @property
    def step(self) -> float:
        return self._forward[0].step

    @property
    def symmetric(self) -> bool:
        return self._backward is None

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_losses(
        cls,
        losses,
        masses,
        infinite_mass: float = 0.0,
        step: float = DEFAULT_STEP,
        mass_relative: float = 0.0,
    ):
        """Symmetric PLD from the loss values and their P-masses (plus P[L = ∞]);
        ``mass_relative``: how far (relative) the float masses may be from the exact ones,
        charged to both bounds."""
        step = _check_step(step)
        losses = np.asarray(losses, dtype=np.float64)
        masses = np.asarray(masses, dtype=np.float64)
        return cls(discretise(losses, masses, float(infinite_mass), step, mass_relative))

    @classmethod
    def from_pmfs(cls, p, q, step: float = DEFAULT_STEP, symmetric: bool = False):
        """PLD of the dominating pair (P, Q): two pmfs on a common support.

        Both directions (P, Q) and (Q, P) are kept unless ``symmetric`` (the caller
        vouches that both have the same loss distribution).
        """
        step = _check_step(step)
        p = _check_pmf(p, "p")
        q = _check_pmf(q, "q")
        if p.shape != q.shape:
            raise DPValueError(
                f"p and q must be pmfs on a common support of the same length, "
                f"got lengths {len(p)} and {len(q)}"
            )
        forward = _pair_losses(p, q, step)
        if symmetric:
            return cls(forward)
        return cls(forward, _pair_losses(q, p, step))

    @classmethod
    def from_discrete_gaussian(cls, sigma2, sensitivity: int = 1, step: float = DEFAULT_STEP):
        """PLD of N_Z(0, σ²) with shift Δ (symmetric; the tail beyond 10σ goes to L = ∞)."""
        sigma2 = positive_rational(sigma2, "sigma2")
        shift = check_integer_sensitivity(sensitivity)
        losses, masses, tail = _discrete_gaussian_losses(sigma2, shift)
        # each mass e^{-a} with a = y²/(2σ²) + log Z <= 50 + log Z: within (2|a| + 2)·u
        pld = cls.from_losses(losses, masses, tail, step, 256 * _UNIT_ROUNDOFF)
        # A dominating tail goes to +∞ for the upper bound only; the lower bound drops it.
        lower = replace(pld._forward[1], infinite_mass=0.0)
        return cls((pld._forward[0], lower))

    @classmethod
    def from_discrete_laplace(cls, scale, sensitivity: int = 1, step: float = DEFAULT_STEP):
        """PLD of Lap_Z(b) with shift Δ: loss -Δ/b + (2/b)K, K = Δ - clip(y, 0, Δ)."""
        scale = positive_rational(scale, "scale")
        shift = check_integer_sensitivity(sensitivity)
        values, masses = discrete_laplace_loss_pmf(scale, shift)
        losses = (-shift + 2.0 * values) / float(scale)
        return cls.from_losses(losses, masses, 0.0, step, 4 * (shift + 4) * _UNIT_ROUNDOFF)

    @classmethod
    def from_randomized_response(cls, epsilon, step: float = DEFAULT_STEP):
        """PLD of the ε-DP randomized-response pair, the dominating pair of pure ε-DP."""
        epsilon = check_epsilon(float(epsilon), "pure_epsilon")
        low, high = randomized_response_masses(epsilon)
        return cls.from_losses(
            np.array([epsilon, -epsilon]), np.array([high, low]), 0.0, step, 4 * _UNIT_ROUNDOFF
        )

    @classmethod
    def from_mechanism(cls, mechanism, sensitivity=1, step: float = DEFAULT_STEP):
        """PLD of a mechanism value (discrete Gaussian/Laplace, or any object with
        ``privacy_loss_pmfs()`` or ``pure_epsilon``)."""
        if isinstance(mechanism, DiscreteGaussian):
            return cls.from_discrete_gaussian(mechanism.sigma2, sensitivity, step)
        if isinstance(mechanism, DiscreteLaplace):
            return cls.from_discrete_laplace(mechanism.scale, sensitivity, step)
        if hasattr(mechanism, "privacy_loss_pmfs"):
            p, q = mechanism.privacy_loss_pmfs()
            return cls.from_pmfs(p, q, step)
        pure = pure_epsilon_of(mechanism)
        if pure is not None:
            return cls.from_randomized_response(float(pure), step)
        raise DPTypeError(
            f"mechanism {mechanism!r} has no privacy-loss description: expected a "
            f"DiscreteGaussian, DiscreteLaplace, or an object with privacy_loss_pmfs() or "
            f"pure_epsilon"
        )

    # ----------------------------------------------------------------- composition
    def compose(self, other: PrivacyLossDistribution) -> PrivacyLossDistribution:
        """PLD of running both mechanisms independently (losses add; pmfs convolve)."""
        if not isinstance(other, PrivacyLossDistribution):
            raise DPTypeError(
                f"other must be a PrivacyLossDistribution, got {type(other).__name__}"
            )
        if other.step != self.step:
            raise DPValueError(
                f"both PLDs must share one grid step to compose, got {self.step} and {other.step}"
            )
        forward = tuple(a.convolve(b) for a, b in zip(self._forward, other._forward, strict=True))
        if self.symmetric and other.symmetric:
            return PrivacyLossDistribution(forward)
        mine = self._backward or self._forward
        theirs = other._backward or other._forward
        backward = tuple(a.convolve(b) for a, b in zip(mine, theirs, strict=True))
        return PrivacyLossDistribution(forward, backward)

    def self_compose(self, count: int) -> PrivacyLossDistribution:
        """PLD of ``count`` independent runs (by repeated squaring)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise DPValueError(f"count must be an integer >= 1, got {count!r}")
        forward = tuple(part.power(count) for part in self._forward)
        backward = None
        if self._backward is not None:
            backward = tuple(part.power(count) for part in self._backward)
        return PrivacyLossDistribution(forward, backward)

    # ----------------------------------------------------------------- queries
    def delta(self, epsilon: float) -> DeltaBound:
        """Upper (guarantee) and lower bound on δ(ε), maximised over both directions."""
        epsilon = check_epsilon(epsilon)
        directions = [self._forward] + ([self._backward] if self._backward else [])
        upper = max(d[0].delta(epsilon) for d in directions)
        lower = max(d[1].delta(epsilon) for d in directions)
        return DeltaBound(lower=min(lower, upper), upper=upper, method=Method.PLD.value)

    def epsilon(self, delta: float) -> EpsilonBound:
        """Upper (guarantee) and lower bound on the smallest ε with δ(ε) <= δ."""
        delta = check_delta(delta)
        high = self._loss_range_top()
        upper = bisect_epsilon(lambda eps: self.delta(eps).upper, delta, high, 1e-7)
        if self.delta(upper).upper > delta:
            upper = math.inf  # the infinite-loss mass alone exceeds δ
            return EpsilonBound(lower=math.inf, upper=math.inf, method=Method.PLD.value)
        lower = bisect_epsilon(lambda eps: self.delta(eps).lower, delta, upper, 1e-7)
        return EpsilonBound(
            lower=max(0.0, lower * (1 - 1e-7) - 1e-12), upper=upper, method=Method.PLD.value
        )

    def _loss_range_top(self) -> float:
        parts = list(self._forward) + list(self._backward or ())
        return max((p.first + len(p.probabilities)) * p.step for p in parts) + self.step


def _check_step(step: object) -> float:
    if isinstance(step, bool) or not isinstance(step, (int, float)):
        raise DPTypeError(f"step must be a positive float, got {step!r}")
    if not (math.isfinite(step) and step > 0):
        raise DPValueError(f"step must be finite and > 0, got {step!r}")
    return float(step)


def _check_pmf(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or len(array) == 0:
        raise DPValueError(f"{name} must be a non-empty 1-D array of probabilities")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise DPValueError(f"{name} must hold finite probabilities >= 0")
    total = float(array.sum())
    if abs(total - 1) > 1e-9:
        raise DPValueError(f"{name} must sum to 1 (within 1e-9), got {total!r}")
    return array


def _pair_losses(p: np.ndarray, q: np.ndarray, step: float):
    both = (p > 0) & (q > 0)
    infinite = float(p[(p > 0) & (q == 0)].sum())
    losses = np.log(p[both]) - np.log(q[both])
    return discretise(losses, p[both], infinite, step)


def pld_from_lattice_components(components, step: float | None = None) -> PrivacyLossDistribution:
    """PLD of lattice components (see `multivariate.LatticeComponent`) on a grid.

    The grid step defaults to a small fraction of the composed loss's standard deviation.
    Used when the lattice is too fine for the exact multivariate FFT.
    """
    if step is None:
        variance = 0.0
        for c in components:
            if c.sigma2 is not None:
                variance += c.count * float(c.step) ** 2 * float(c.sigma2)
            else:
                probabilities = np.asarray(c.probabilities)
                values = np.arange(len(probabilities))
                mean = probabilities @ values
                variance += (
                    c.count * float(c.step) ** 2 * float(probabilities @ (values - mean) ** 2)
                )
        step = max(math.sqrt(variance) / 4000, 1e-7)
    total: PrivacyLossDistribution | None = None
    parts = []
    for c in components:
        if c.sigma2 is not None:
            shift = c.step * c.sigma2
            if shift.denominator != 1:
                raise DPValueError(
                    "lattice component is not a discrete Gaussian with integer shift"
                )
            part = PrivacyLossDistribution.from_discrete_gaussian(c.sigma2, int(shift), step)
        else:
            probabilities = np.asarray(c.probabilities)
            losses = float(c.offset) + float(c.step) * np.arange(len(probabilities))
            relative = 4 * (len(probabilities) + 4) * _UNIT_ROUNDOFF  # as `lattice_loss`
            part = PrivacyLossDistribution.from_losses(losses, probabilities, 0.0, step, relative)
        parts.append(part.self_compose(c.count) if c.count > 1 else part)
    # Balanced tree keeps the intermediate arrays small.
    while len(parts) > 1:
        parts = [
            parts[i].compose(parts[i + 1]) if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    total = parts[0]
    return total
