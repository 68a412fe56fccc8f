"""Additive integer noise mechanisms: discrete Gaussian and discrete Laplace.

These frozen dataclasses carry exact rational parameters. The samplers
(`dp_pipeline.noise`) draw from them; the accountant
(`dp_pipeline.accounting`) interprets them. Nothing privacy-relevant is a float.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.noise import discrete_gaussian, discrete_laplace
from dp_pipeline.rational import positive_rational

__all__ = ["DiscreteGaussian", "DiscreteLaplace"]


@dataclass(frozen=True)
class DiscreteGaussian:
    """The discrete Gaussian N_Z(0, σ²): P[X = x] ∝ exp(-x²/(2σ²)) on the integers.

    ``sigma2`` is the exact rational σ² (int, Fraction or "p/q"; floats by the
    conservative rule of `dp_pipeline.rational`). Canonne, Kamath & Steinke
    (2020), "The Discrete Gaussian for Differential Privacy".
    """

    sigma2: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma2", positive_rational(self.sigma2, "sigma2"))

    @property
    def name(self) -> str:
        return "discrete_gaussian"

    def sample(self, size: int, stream):
        """``size`` exact samples drawn from ``stream`` (CKS Algorithm 3)."""
        return discrete_gaussian(self.sigma2, size, stream)

    # Accounting (exact math lives in dp_pipeline.accounting; imported lazily so the
    # mechanism layer does not depend on the accountant at import time).

    def rho(self, sensitivity: int = 1) -> Fraction:
        """Exact zCDP ρ = Δ²/(2σ²) (CKS Theorem 4)."""
        from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_rho

        return discrete_gaussian_rho(self.sigma2, sensitivity)

    def delta(self, epsilon: float, sensitivity: int = 1) -> float:
        """Exact δ(ε) (CKS Theorem 7, maximum over the shifts 1..Δ), rounded up."""
        from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_delta

        return discrete_gaussian_delta(self.sigma2, epsilon, sensitivity)

    def epsilon(self, delta: float, sensitivity: int = 1) -> float:
        """Smallest ε with exact δ(ε) <= δ (CKS Theorem 7), rounded up."""
        from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_epsilon

        return discrete_gaussian_epsilon(self.sigma2, delta, sensitivity)


@dataclass(frozen=True)
class DiscreteLaplace:
    """The discrete Laplace Lap_Z(b): P[X = x] ∝ exp(-|x|/b) on the integers.

    ``scale`` is the exact rational b. Sensitivity Δ gives pure ε = Δ/b
    (CKS Section 5.2, Algorithm 2 for sampling).
    """

    scale: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", positive_rational(self.scale, "scale"))

    @property
    def name(self) -> str:
        return "discrete_laplace"

    def sample(self, size: int, stream):
        """``size`` exact samples drawn from ``stream`` (CKS Algorithm 2)."""
        return discrete_laplace(self.scale, size, stream)

    # Accounting (lazy imports: see DiscreteGaussian).

    def pure_epsilon(self, sensitivity: int = 1) -> Fraction:
        """Exact pure ε = Δ/b."""
        from dp_pipeline.accounting.discrete_laplace import discrete_laplace_pure_epsilon

        return discrete_laplace_pure_epsilon(self.scale, sensitivity)

    def rho(self, sensitivity: int = 1) -> Fraction:
        """ρ = ε²/2 with ε = Δ/b (pure ε-DP implies ε²/2-zCDP, Bun & Steinke 2016)."""
        return self.pure_epsilon(sensitivity) ** 2 / 2

    def delta(self, epsilon: float, sensitivity: int = 1) -> float:
        """Tight δ(ε) from the discrete Laplace privacy-loss distribution, rounded up."""
        from dp_pipeline.accounting.discrete_laplace import discrete_laplace_delta

        return discrete_laplace_delta(self.scale, epsilon, sensitivity)

    def epsilon(self, delta: float, sensitivity: int = 1) -> float:
        """Smallest ε with tight δ(ε) <= δ (at most Δ/b), rounded up."""
        from dp_pipeline.accounting.discrete_laplace import discrete_laplace_epsilon

        return discrete_laplace_epsilon(self.scale, delta, sensitivity)
