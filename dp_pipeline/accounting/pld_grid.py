"""The grid of a privacy loss distribution: a loss pmf on {i·h}, its directed discretisation,
truncation and FFT convolution (the numerical core of `pld`; see its docstring for the
discretisation and the round-off charge). Every array is capped at `MAX_GRID_POINTS`,
checked before it is allocated (`GridTooLargeError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dp_pipeline.accounting._checks import round_up
from dp_pipeline.errors import GridTooLargeError

__all__ = [
    "DEFAULT_STEP",
    "MAX_GRID_POINTS",
    "TRUNCATION_MASS",
    "GridLoss",
    "GridTooLargeError",
    "check_grid_size",
    "discretise",
    "fast_length",
    "fft_convolve",
]

DEFAULT_STEP = 1e-4
TRUNCATION_MASS = 1e-20
MAX_GRID_POINTS = 1 << 23  # 64 MiB of float64 per array: beyond, GridTooLargeError, no allocation
_UNIT_ROUNDOFF = 2.0**-53
_DIRECT_CONVOLUTION = 64


def check_grid_size(points: float, what: str) -> None:
    """Raise `GridTooLargeError` naming ``what`` if ``points`` exceeds `MAX_GRID_POINTS`."""
    if not points <= MAX_GRID_POINTS:
        raise GridTooLargeError(
            f"{what} needs {points:.3g} grid points, over the limit of {MAX_GRID_POINTS} "
            f"(memory); use a coarser step or PrivacyAccountant, which falls back to a "
            f"rigorous labelled bound"
        )


@dataclass(frozen=True)
class GridLoss:
    """Loss pmf on the grid: mass probabilities[i] at loss (first + i)·step, plus P[L = ∞]."""

    step: float
    first: int
    probabilities: np.ndarray
    infinite_mass: float
    roundoff: float
    upper: bool  # which rounding: upper (dominating) or lower (dominated)

    def convolve(self, other: GridLoss) -> GridLoss:
        a, b = self.probabilities, other.probabilities
        check_grid_size(fast_length(len(a) + len(b) - 1), "the convolution of two PLDs")
        if min(len(a), len(b)) <= _DIRECT_CONVOLUTION:
            result = np.convolve(a, b)
            # a sum of at most min(len) products of non-negative masses: L1 error (m + 1)·u
            error = (min(len(a), len(b)) + 1) * _UNIT_ROUNDOFF * float(np.sum(a) * np.sum(b))
        else:
            result = fft_convolve(a, b)
            size = fast_length(len(result))  # the transform length sets the round-off
            error = (
                4
                * _UNIT_ROUNDOFF
                * math.log2(size)
                * math.sqrt(size)
                * (math.sqrt(float(np.sum(a * a))) + math.sqrt(float(np.sum(b * b))))
            )
            np.clip(result, 0.0, None, out=result)
        infinite = 1 - (1 - self.infinite_mass) * (1 - other.infinite_mass)
        grid = GridLoss(
            self.step,
            self.first + other.first,
            result,
            infinite,
            self.roundoff + other.roundoff + error,
            self.upper,
        )
        return grid.truncated()

    def truncated(self, mass: float = TRUNCATION_MASS) -> GridLoss:
        p = self.probabilities
        cumulative = np.cumsum(p)
        low = int(np.searchsorted(cumulative, mass, side="right"))
        reverse = np.cumsum(p[::-1])
        high_drop = int(np.searchsorted(reverse, mass, side="right"))
        high = len(p) - high_drop
        if low >= high:
            return self
        kept = p[low:high].copy()
        low_mass = float(cumulative[low - 1]) if low > 0 else 0.0
        high_mass = float(reverse[high_drop - 1]) if high_drop > 0 else 0.0
        infinite = self.infinite_mass
        if self.upper:
            kept[0] += low_mass
            infinite += high_mass
        else:
            kept[-1] += high_mass
        return GridLoss(self.step, self.first + low, kept, infinite, self.roundoff, self.upper)

    def power(self, count: int) -> GridLoss:
        result: GridLoss | None = None
        base = self
        while count:
            if count & 1:
                result = base if result is None else result.convolve(base)
            count >>= 1
            if count:
                base = base.convolve(base)
        return result

    def delta(self, epsilon: float) -> float:
        losses = (self.first + np.arange(len(self.probabilities))) * self.step
        # the grid points i·h are the exact products; their floats are within u·|L|: the
        # upper bound reads them rounded up, the lower bound down (δ is increasing in L)
        margin = 2 * _UNIT_ROUNDOFF * np.abs(losses)
        losses = losses + margin if self.upper else losses - margin
        start = int(np.searchsorted(losses, epsilon, side="right"))
        finite = float(np.sum(self.probabilities[start:] * -np.expm1(epsilon - losses[start:])))
        if self.upper:
            return min(1.0, round_up(self.infinite_mass + finite + self.roundoff))
        return max(0.0, self.infinite_mass + finite - self.roundoff)


def fast_length(size: int) -> int:
    """Smallest 2^i·3^j >= size (numpy's pocketfft is fast on such lengths)."""
    best = 1 << max(0, (size - 1).bit_length())
    power3 = 1
    while power3 < best:
        candidate = power3 << max(0, (-(-size // power3) - 1).bit_length())
        best = min(best, candidate)
        power3 *= 3
    return best


def fft_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Full linear convolution of two real vectors by real FFTs (numpy.fft: no scipy import,
    which costs tens of seconds on a cold disk)."""
    size = len(a) + len(b) - 1
    length = fast_length(size)
    spectrum = np.fft.rfft(a, length) * np.fft.rfft(b, length)
    return np.fft.irfft(spectrum, length)[:size]


def discretise(
    losses: np.ndarray,
    masses: np.ndarray,
    infinite_mass: float,
    step: float,
    mass_relative: float = 0.0,
):
    """Upper (split) and lower (floor) grid pmfs of a finite-support loss distribution.

    Float care (each part only raises the upper pmf's δ or lowers the lower one's): the
    losses are moved by ``8u·(|L| + step)`` up for the upper split and down for the floor
    (a float loss and the grid offsets L - i·h each carry u·|L|; δ is increasing in every
    loss, and the split of a higher loss puts more P-mass on the upper grid point); the
    upper point's share is raised by 4u. ``mass_relative`` (the input masses' relative
    error), the shares' and the slot sums' round-off ((k + 4)·u for slots of k masses) are
    charged as the parts' round-off, an L1 bound on the masses.
    """
    keep = masses > 0
    losses, masses = losses[keep], masses[keep]
    check_grid_size((float(np.max(losses)) - float(np.min(losses))) / step + 2, "a loss pmf")
    margin = 8 * _UNIT_ROUNDOFF * (np.abs(losses) + step)
    upper_index, upper_share = _split(losses + margin, step)
    lower_index, _ = _split(losses - margin, step)
    upper_share = np.minimum(upper_share * (1 + 4 * _UNIT_ROUNDOFF), 1.0)
    first = int(min(upper_index.min(), lower_index.min()))
    size = int(max(upper_index.max(), lower_index.max())) - first + 2
    upper_slots = upper_index - first
    lower_slots = lower_index - first
    # bincount sums repeated slots like np.add.at, an order of magnitude faster.
    upper = np.bincount(upper_slots, masses * (1 - upper_share), minlength=size)
    upper += np.bincount(upper_slots + 1, masses * upper_share, minlength=size)
    lower = np.bincount(lower_slots, masses, minlength=size)
    crowded = max(int(np.bincount(upper_slots).max()), int(np.bincount(lower_slots).max()))
    roundoff = mass_relative + (2 * crowded + 8) * _UNIT_ROUNDOFF
    return (
        GridLoss(step, first, upper, infinite_mass, roundoff, True).truncated(),
        GridLoss(step, first, lower, infinite_mass, roundoff, False).truncated(),
    )


def _split(losses: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Grid index i with i·h <= L <= (i+1)·h and the share of L's P-mass put on (i+1)·h
    so that the Q-mass is kept: (1 - e^{-(L - ih)})/(1 - e^{-h})."""
    index = np.floor(losses / step).astype(np.int64)
    offset = losses - index * step
    index = np.where(offset < 0, index - 1, index)
    index = np.where(offset > step, index + 1, index)
    offset = np.clip(losses - index * step, 0.0, step)
    return index, np.clip(np.expm1(-offset) / math.expm1(-step), 0.0, 1.0)
