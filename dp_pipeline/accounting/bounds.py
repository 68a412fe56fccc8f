"""Bound objects returned by the accountants: a guaranteed upper bound and a lower bound."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeltaBound", "EpsilonBound"]


@dataclass(frozen=True)
class DeltaBound:
    """δ(ε) of a composition: ``upper`` is the guarantee, ``lower`` a value δ cannot be below.

    ``method`` names how it was computed (e.g. ``"theorem7"``, ``"multivariate_fft"``,
    ``"pld_fft"``, ``"zcdp"``, ``"pure_dp"``).
    """

    lower: float
    upper: float
    method: str

    @property
    def gap(self) -> float:
        """Absolute distance between the upper and lower bound."""
        return self.upper - self.lower


@dataclass(frozen=True)
class EpsilonBound:
    """ε(δ) of a composition: ``upper`` is the guarantee (the release is (upper, δ)-DP)."""

    lower: float
    upper: float
    method: str

    def with_method(self, method: str) -> EpsilonBound:
        """The same bound, computed by ``method``."""
        return EpsilonBound(self.lower, self.upper, method)

    @property
    def gap(self) -> float:
        """Absolute distance between the upper and lower bound."""
        return self.upper - self.lower
