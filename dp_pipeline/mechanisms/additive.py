"""Additive integer noise mechanisms: discrete Gaussian and discrete Laplace.

These frozen dataclasses carry exact rational parameters. The samplers
(`dp_pipeline.noise`) draw from them; the accountant
(`dp_pipeline.accounting`) interprets them. Nothing privacy-relevant is a float.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

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
        from dp_pipeline.noise import discrete_gaussian

        return discrete_gaussian(self.sigma2, size, stream)


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
        from dp_pipeline.noise import discrete_laplace

        return discrete_laplace(self.scale, size, stream)
