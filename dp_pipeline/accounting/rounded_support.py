"""Finite-support losses too large to sum at every node, rounded onto a coarser grid.

δ(ε) = P[L = ∞] + E_P[(1 - e^{ε-L})_+] is non-decreasing in every loss value of every
component of a composition (L is their sum, and (1 - e^{ε-x})_+ is non-decreasing in x).
So moving each loss value up to a grid point, keeping its P-mass, gives a composition
whose δ(ε) is an upper bound, and moving each down gives a lower bound, for every ε.
`RoundedComposition` evaluates the two by the MGF inversion and keeps the upper end of
the first and the lower end of the second: a rigorous bracket, whose width is set by the
gaps between kept losses (each copy moves by at most one gap).

The grid is a subset of the support itself (`rounded_group`), so the kept losses keep
their float error bound; a loss moves only to a kept loss more than twice that bound
beyond it, so the rounding is directed for the exact losses too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dp_pipeline.accounting.inversion import InversionComposition, SupportGroup

__all__ = ["ROUNDED_POINTS", "RoundedComposition", "rounded_group"]

ROUNDED_POINTS = 2048  # grid points of a rounded support
_U = 2.0**-53


def rounded_group(group: SupportGroup, up: bool, points: int = ROUNDED_POINTS) -> SupportGroup:
    """``group`` with every loss moved up (``up``) or down to one of about ``points`` kept
    loss values of its own support, the P-masses of each kept value summed.

    Kept: the smallest and largest loss, the ``points/2`` largest masses (where the
    distribution is, exact) and ``points/2`` losses evenly spaced in rank (the tails, each
    moved by at most one gap). A loss moves to the nearest kept one at least two loss
    errors beyond it (so the exact losses are ordered the same way); with none (within two
    errors of the largest) its mass moves to +∞ for the upper bound, or is dropped (-∞)
    for the lower.
    """
    order = np.argsort(group.losses, kind="stable")
    losses = np.asarray(group.losses, dtype=np.float64)[order]
    masses = np.asarray(group.masses, dtype=np.float64)[order]
    size = len(losses)
    ranks = np.linspace(0, size - 1, max(2, points // 2)).round().astype(np.int64)
    heaviest = np.argsort(masses, kind="stable")[-(points // 2) :]
    kept = np.unique(np.concatenate([ranks, heaviest, [0, size - 1]]))
    kept_losses = losses[kept]
    margin = 2 * group.loss_error * 1.01 + 8 * _U * (np.abs(losses) + 1e-300)
    if up:
        # first kept value >= loss + margin (a kept loss itself stays: margin is not needed)
        target = np.searchsorted(kept_losses, losses + margin, side="left")
        own = np.searchsorted(kept, np.arange(size))
        own_hit = (own < len(kept)) & (kept[np.minimum(own, len(kept) - 1)] == np.arange(size))
        target = np.where(own_hit, own, target)
        lost = target >= len(kept)
    else:
        target = np.searchsorted(kept_losses, losses - margin, side="right") - 1
        own = np.searchsorted(kept, np.arange(size))
        own_hit = (own < len(kept)) & (kept[np.minimum(own, len(kept) - 1)] == np.arange(size))
        target = np.where(own_hit, own, target)
        lost = target < 0
    merged = np.bincount(target[~lost], weights=masses[~lost], minlength=len(kept))
    lost_mass = float(np.sum(masses[lost])) * (1 + size * _U)
    keep = merged > 0
    return SupportGroup(
        masses=merged[keep],
        losses=kept_losses[keep],
        count=group.count,
        infinite_mass=group.infinite_mass,
        dropped_mass=group.dropped_mass + (lost_mass if up else 0.0),
        loss_error=group.loss_error,  # kept losses are original values
        mass_error=group.mass_error + 2 * size * _U,  # bincount: sums of <= size masses
    )


@dataclass
class RoundedComposition:
    """The MGF inversion of a composition with rounded supports: the upper end of the
    rounded-up composition and the lower end of the rounded-down one (module docstring)."""

    up: InversionComposition
    down: InversionComposition

    def delta_bounds(self, epsilon: float) -> tuple[float, float]:
        """Rigorous (lower, upper) on δ(ε) of the original composition."""
        upper = self.up.delta_bounds(epsilon)[1]
        lower = self.down.delta_bounds(epsilon)[0]
        return min(lower, upper), upper
