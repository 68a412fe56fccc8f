"""Bound objects returned by the accountants, the names of the methods that compute them,
and the one place where two brackets of the same δ(ε) are combined.

A `DeltaBound` is a bracket: ``upper`` a guaranteed upper bound, ``lower`` a value the
true δ cannot be below. Two rigorous brackets of the same δ intersect to a rigorous
bracket (`DeltaBound.intersect`); a bracket whose lower end rounding put above its upper
end is clipped (`DeltaBound.clipped`), which keeps the guarantee (the upper end) as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

__all__ = ["DeltaBound", "DeltaPath", "EpsilonBound", "Method", "ignoring_decide"]


class Method(StrEnum):
    """The methods that give a composition's δ(ε), as named in each bound's ``method``.

    A bound built from another composition's bound (a conditioning's rest, the
    composition without negligible Gaussians, a closed-form cap) names both: e.g.
    ``"lattice_conditioning + mgf_inversion"``, ``"zcdp (tighter than support_exact)"``.
    """

    NEGLIGIBLE_GAUSSIANS = "negligible gaussians"
    THEOREM7 = "theorem7"
    DISCRETE_LAPLACE_EXACT = "discrete_laplace_exact"
    LATTICE_CONDITIONING = "lattice_conditioning"
    MGF_INVERSION = "mgf_inversion"
    LAPLACE_CONDITIONING = "laplace_conditioning"
    SUPPORT_EXACT = "support_exact"
    GAUSSIAN_SPLIT = "support_exact + gaussian_tails"
    LATTICE_FFT = "multivariate_fft"
    COARSE_LATTICE = "multivariate_fft_coarsened"
    PLD = "pld_fft"
    TILTED_LATTICE = "tilted_lattice_fft"
    ZCDP = "zcdp"
    PURE_DP_ZCDP = "pure_dp + zcdp"
    PURE_DP = "pure_dp"
    TRIVIAL = "trivial"
    KEY_SELECTION = "key_selection"  # infinite-loss atoms composed with the finite part


@dataclass(frozen=True)
class DeltaBound:
    """δ(ε) of a composition: ``upper`` is the guarantee, ``lower`` a value δ cannot be below.

    ``method`` names how it was computed (a `Method` value, or two joined as described
    there). ``capped``: the upper end is a closed-form cap (zCDP, or pure DP + zCDP) of
    the composition or of a part it was built from; an ε search starts from the cap's ε
    when it is (`epsilon_search`). Not part of equality.
    """

    lower: float
    upper: float
    method: str
    capped: bool = field(default=False, compare=False, repr=False)

    @property
    def gap(self) -> float:
        """Absolute distance between the upper and lower bound."""
        return self.upper - self.lower

    @classmethod
    def clipped(cls, lower: float, upper: float, method: str, capped: bool = False) -> DeltaBound:
        """The bracket [min(lower, upper), upper]: a lower end that rounding put above the
        upper end is lowered to it (the upper end, the guarantee, is kept)."""
        return cls(min(lower, upper), upper, method, capped)

    def intersect(self, other: DeltaBound) -> DeltaBound:
        """The intersection of two rigorous brackets of the same δ: the larger lower end,
        the smaller upper end, named (and flagged ``capped``) by the bracket that gave the
        upper end, ``self`` on a tie. A valid bracket since both are."""
        best = self if self.upper <= other.upper else other
        return DeltaBound.clipped(
            max(self.lower, other.lower), best.upper, best.method, best.capped
        )


class DeltaPath(Protocol):
    """δ(ε) of one composition by one method: a rigorous `DeltaBound` at every ε.

    ``decide``: a δ the caller only compares with (`epsilon_search`); a path may then
    return a wider bracket, provided it still says on which side of ``decide`` δ lies
    whenever the full bracket would."""

    def __call__(self, epsilon: float, decide: float | None = None) -> DeltaBound: ...


def ignoring_decide(delta_of) -> DeltaPath:
    """``delta_of(ε)`` as a `DeltaPath` (it answers with its full bracket whatever
    ``decide`` is)."""

    def path(epsilon: float, decide: float | None = None) -> DeltaBound:
        return delta_of(epsilon)

    return path


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
