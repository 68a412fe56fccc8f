"""Combining rigorous δ(ε) brackets of one composition: finite-support groups, intersections.

Every bracket combined here is a rigorous (lower, upper) pair, so their
intersection is too; the bound keeps the method that gave its upper end.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dp_pipeline.accounting.bounds import DeltaBound, DeltaPath, Method
from dp_pipeline.accounting.inversion import (
    SupportGroup,
)

__all__ = [
    "TIGHT",
    "TIGHT_ENOUGH",
    "fft_refined",
    "intersect_brackets",
    "inversion_delta",
    "pmf_group",
    "refine_below",
    "same_group",
]

# relative gap of the MGF inversion below which no other path is tried: a 1e-4 bracket on δ
# moves ε(δ) by ~1e-5 relative, far inside the 1% the accountant is held to
TIGHT = 1e-4
TIGHT_ENOUGH = 1e-3  # below this gap only the exact lattice FFT is tried, not the approximate
# below this δ only the exact paths are tried: the approximate FFT paths (coarsened lattice,
# grid PLD) charge their float round-off as an absolute error of at least ~1e-15 (u·log2 N
# per convolution of unit-mass vectors), so their upper end cannot be below it, and their
# lower end is 0 or at most the true δ
ABSOLUTE_FLOOR = 1e-17
# relative gap of a bracket below REFINE_BELOW past which the tilted lattice refines it: the
# 1% the accountant is held to (a δ bracket within 1% puts ε(δ) far inside 1% too)
LOOSE = 1e-2
EPSILON_LOOSE = 1e-3  # ... and in a search for ε(δ), the relative ε width past which it does
# below this δ a loose inversion is refined (`intersect_brackets`); above, the FFT paths
# resolve δ to ~1e-12 absolute as before, and the refinement's rest evaluations (one per
# lattice point, each an inversion) would only add time
REFINE_BELOW = 1e-12


def pmf_group(p: np.ndarray, q: np.ndarray, count: int):
    """Finite-support loss log(p/q) under p; p > 0 = q is the +∞ mass, p = 0 is dropped."""
    finite = (p > 0) & (q > 0)
    losses = np.log(p[finite]) - np.log(q[finite])
    unit = 2.0**-53
    error = 4 * unit * float(np.max(np.abs(np.log(p[finite])) + np.abs(np.log(q[finite])) + 1))
    return SupportGroup(
        masses=p[finite],
        losses=losses,
        count=count,
        infinite_mass=float(math.fsum(p[(p > 0) & (q == 0)])),
        loss_error=error if finite.any() else 0.0,
        mass_error=0.0,
    )


def same_group(one, two) -> bool:
    a, b = np.argsort(one.losses), np.argsort(two.losses)
    return (
        one.infinite_mass == two.infinite_mass
        and len(a) == len(b)
        and bool(np.array_equal(one.losses[a], two.losses[b]))
        and bool(np.array_equal(one.masses[a], two.masses[b]))
    )


def inversion_delta(candidates):
    """δ bound from the MGF inversion candidates (each a list of directions): the first
    within `TIGHT_ENOUGH`, else the intersection of all of them (each is rigorous)."""

    def delta_of(epsilon: float) -> DeltaBound:
        best_lower, best_upper = 0.0, 1.0
        for directions in candidates:
            bounds = [direction.delta_bounds(epsilon) for direction in directions]
            best_lower = max(best_lower, max(b[0] for b in bounds))
            best_upper = min(best_upper, max(b[1] for b in bounds))
            if best_upper - best_lower <= TIGHT_ENOUGH * best_upper:
                break
        return DeltaBound.clipped(best_lower, best_upper, Method.MGF_INVERSION)

    return delta_of


def intersect_brackets(
    primary, fallback, middle=None, refine=None, tilted=None, slope=None
) -> DeltaPath:
    """Both are rigorous brackets of the same δ: keep the larger lower, the smaller upper.

    The fallback (an FFT path) is evaluated only when the MGF inversion is not tight and,
    if ``middle`` (a cheap rigorous bracket, e.g. `laplace_conditioning`) is given, its
    intersection with the inversion is not tight either; and, when the caller passes
    ``decide`` (a δ it only compares with, `epsilon_search`), only when neither bracket
    decides which side of it δ lies on. ``refine`` (a rigorous bracket, e.g. the
    conditioning on a coarse discrete Gaussian coordinate) is intersected with a loose,
    undecided primary bracket whose upper end is below `REFINE_BELOW` before all of
    these, and the result stands in for it. ``tilted`` (a rigorous bracket with relative
    precision at tiny δ, `tilted_lattice`) is intersected last, with a result that is
    still loose and undecided below `REFINE_BELOW` (`refine_below`, with ``slope``).
    """

    def delta_of(epsilon: float, decide: float | None = None) -> DeltaBound:
        first = primary(epsilon)
        gap = first.upper - first.lower
        if first.upper > 0 and gap <= TIGHT * first.upper:
            return first
        if first.upper <= 5e-324:  # below the float range: no other path can improve it
            return first
        if decide is not None and (first.lower > decide or first.upper <= decide):
            return first  # the caller only compares with ``decide``: no path changes that
        if refine is not None and first.upper < REFINE_BELOW:
            first = first.intersect(refine(epsilon))
            gap = first.upper - first.lower
            if first.upper > 0 and gap <= TIGHT * first.upper:
                return first
            if decide is not None and (first.lower > decide or first.upper <= decide):
                return first
        if middle is not None:
            # used only where it closes or decides the bracket (in place of the FFT paths):
            # elsewhere the bracket stays the inversion's, so that a search over ε takes
            # the same steps as without it
            closed = first.intersect(middle(epsilon))
            if decide is not None and closed.lower > decide:
                # δ > decide for certain, and the inversion's upper end says so too: its
                # bracket keeps the search's steps (and its lower end's start) as they were
                return first
            if closed.upper > 0 and closed.upper - closed.lower <= TIGHT * closed.upper:
                return closed
            if decide is not None and closed.upper <= decide:
                return closed
        # the exact lattice FFT when it exists; the approximate FFT paths only if loose and
        # δ is within their (absolute) resolution
        exact_only = gap <= TIGHT_ENOUGH * first.upper or first.upper < ABSOLUTE_FLOOR
        second = fallback(epsilon, exact_only=exact_only)
        if second is not None:
            first = first.intersect(second)
        return first if tilted is None else refine_below(first, epsilon, tilted, decide, slope)

    return delta_of


def refine_below(
    bound: DeltaBound,
    epsilon: float,
    tilted: Callable[[float], DeltaBound],
    decide: float | None = None,
    slope: Callable[[float], float | None] | None = None,
) -> DeltaBound:
    """``bound`` intersected with ``tilted(ε)`` (a rigorous bracket) when it is loose (gap
    over `LOOSE` relative) with its lower end below `REFINE_BELOW` and, given ``decide`` (a δ
    the caller only compares with), undecided with ``decide`` below `REFINE_BELOW` and wide
    enough to move ε by more than `EPSILON_LOOSE` relative; else ``bound`` itself. (The
    approximate FFT paths' upper ends stay above ~1e-15, so the lower end, not the upper,
    says whether δ may be below `REFINE_BELOW`.)"""
    if not bound.lower < REFINE_BELOW or bound.upper - bound.lower <= LOOSE * bound.upper:
        return bound
    if decide is not None:
        if decide > REFINE_BELOW or bound.lower > decide or bound.upper <= decide:
            return bound
        # in a search for ε(δ): where δ(ε) falls with slope c = -d log δ/dε (``slope(ε)``,
        # the saddle point; else log(1/δ)/ε, below it when log(1/δ(ε)) is convex and
        # starts from 0), a δ bracket [l, u] spans about log(u/l)/(cε) of ε relative:
        # left alone where that is within `EPSILON_LOOSE`
        if bound.lower > 0:
            c = slope(epsilon) if slope is not None else None
            scale = c * epsilon if c is not None else -math.log(decide)
            if math.log(bound.upper / bound.lower) <= EPSILON_LOOSE * scale:
                return bound
    return bound.intersect(tilted(epsilon))


def fft_refined(
    delta_of: Callable[[float], DeltaBound],
    tilted: Callable[[float], DeltaBound],
    slope: Callable[[float], float | None] | None = None,
) -> DeltaPath:
    """An FFT path's δ bound function with `refine_below` applied (accepts ``decide``)."""

    def refined(epsilon: float, decide: float | None = None) -> DeltaBound:
        return refine_below(delta_of(epsilon), epsilon, tilted, decide, slope)

    return refined
