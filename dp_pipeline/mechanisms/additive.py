"""Additive integer noise mechanisms: discrete Gaussian and discrete Laplace.

These frozen dataclasses carry exact rational parameters and nothing else. The
samplers (`dp_pipeline.noise`) draw from them; the accountant interprets them
(`dp_pipeline.accounting.discrete_gaussian` and `.discrete_laplace` give their
exact ρ, δ(ε), ε(δ) and pure ε for a sensitivity). Nothing privacy-relevant is a float.
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


@dataclass(frozen=True)
class DiscreteLaplace:
    """The discrete Laplace Lap_Z(b): P[X = x] ∝ exp(-|x|/b) on the integers.

    ``scale`` is the exact rational b. Sensitivity Δ gives pure ε = Δ/b
    (CKS Section 5.2, Algorithm 2 for sampling); the pure ε depends on Δ, so it is
    `dp_pipeline.accounting.discrete_laplace.discrete_laplace_pure_epsilon`, not an
    attribute.
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
