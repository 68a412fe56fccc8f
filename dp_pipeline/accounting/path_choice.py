"""Which direct path bounds a composition's δ(ε), before any cap (`PrivacyAccountant`, 1-4).

The exact 1-D formula when one coordinate is all there is; otherwise the MGF
inversion when it applies, intersected with the FFT paths built only once its
bracket is loose; otherwise the FFT paths alone; and when no path fits in memory,
the zCDP conversion (or the trivial δ <= 1) with lower bound 0. Each path is a
rigorous bracket (`paths`); this module only chooses among them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dp_pipeline.accounting.bounds import DeltaBound
from dp_pipeline.accounting.brackets import fft_refined, intersect_brackets, inversion_delta
from dp_pipeline.accounting.conditioning import (
    FAR_BELOW,
    LatticeConditioning,
    conditioning_coordinate,
)
from dp_pipeline.accounting.laplace_conditioning import METHOD as LAPLACE_METHOD
from dp_pipeline.accounting.laplace_conditioning import laplace_bracket, laplace_conditionings
from dp_pipeline.accounting.paths import (
    fft_composition,
    inversion_of,
    single_coordinate,
    tilted_lattice,
)
from dp_pipeline.accounting.tilted_lattice import METHOD as TILTED_METHOD
from dp_pipeline.accounting.zcdp import zcdp_to_delta

__all__ = ["DirectPaths", "direct_paths", "no_path_bound"]

# lattice points between the conditioning's two closed forms beside a loose MGF inversion
# (`conditioning`: one rest evaluation each)
_MIDDLE_POINTS = 4


@dataclass(frozen=True)
class DirectPaths:
    """The chosen path: ``delta_of(ε) -> DeltaBound`` and its ``name``.

    ``methods`` is the one method it can use, or None when it is the MGF inversion
    with an FFT fallback, whose name ``fallback_name()`` gives (building it if need be);
    ``middle_name()`` names the cheap bracket tried between the two (None if none is);
    ``tilted_name()`` names the tilted lattice once a loose bracket below δ = 1e-12 has
    used it (None before).
    """

    delta_of: Callable[[float], DeltaBound]
    name: str
    methods: tuple[str, ...] | None
    fallback_name: Callable[[], str | None] | None
    middle_name: Callable[[], str | None] | None = None
    tilted_name: Callable[[], str | None] | None = None


def direct_paths(events, rho: float | None, summarize=None, refine: bool = True) -> DirectPaths:
    """The direct path of ``events`` (a list of `PrivacyEvent`; ``rho`` their ρ as a float,
    None if not finite), uncapped: every bound it gives is a rigorous δ(ε) bracket.

    ``summarize(rest_events)``: the `conditioning.RestSummary` of other events (None if
    their ρ is not finite); with it, a loose MGF inversion is intersected with the
    `laplace_conditioning` brackets and the conditioning on a coarse discrete Gaussian
    coordinate with up to `_MIDDLE_POINTS` lattice points between its closed forms before
    any FFT path is built (with ``refine`` only: the rests of conditionings go without).
    Below δ = 1e-12 a bracket still loose is intersected with the tilted lattice FFT
    (`tilted_lattice`: relative precision at any δ), built on first use (``refine`` only).
    """
    single = single_coordinate(events)
    inversion = None if single is not None else (inversion_of(events) or None)
    if single is not None:
        delta_of, name = single
        return DirectPaths(delta_of, name, (name,), None)
    tilts: list = []  # the tilted lattice (or None), built on first use

    def tilted(eps):
        if not tilts:
            tilts.append(tilted_lattice(events))
        if tilts[0] is None:
            return DeltaBound(0.0, 1.0, TILTED_METHOD)
        return tilts[0].delta_bound(eps)

    def slope(eps):
        if not tilts:
            tilts.append(tilted_lattice(events))
        return None if tilts[0] is None else tilts[0].saddle(eps)

    def tilted_name():
        return TILTED_METHOD if tilts and tilts[0] is not None and tilts[0].used else None

    if inversion is None:
        fft = fft_composition(events)
        if fft is None:
            delta_of, name = no_path_bound(rho)
            return DirectPaths(delta_of, name, (name,), None)
        delta_of, name = fft
        if refine:
            delta_of = fft_refined(delta_of, tilted, slope)
        return DirectPaths(delta_of, name, (name,), None, None, tilted_name)
    built: list = []  # the FFT paths are built only if the MGF inversion is loose

    tried: set = set()  # which of the two builds were attempted (each once)

    def fallback(eps, exact_only=False):
        if not built:
            built.append(fft_composition(events, exact_only=True))
            tried.add("exact")
        if built[0] is None and not exact_only and "any" not in tried:
            built[0] = fft_composition(events, skip_exact=True)
            tried.add("any")
        return None if built[0] is None else built[0][0](eps)

    def fallback_name():
        fallback(1.0)
        return None if built[0] is None else built[0][1]

    laplace: list = []  # the Laplace conditionings' bracket (or None), found on first use

    def laplace_bracket_of():
        if not laplace:
            found = laplace_conditionings(events, summarize) if summarize else []
            laplace.append(laplace_bracket(found) if found else None)
        return laplace[0]

    conditionings: list = []  # a coarse Gaussian coordinate's conditioning, or None

    def conditioning_of():
        if not conditionings:
            chosen = conditioning_coordinate(events, summarize, _MIDDLE_POINTS)
            if chosen is not None and float(chosen[1] / chosen[0]) > (
                FAR_BELOW + chosen[2].far_above()
            ):
                chosen = None  # one point between: the accountant conditions on it already
            elif chosen is not None and chosen[2].method.startswith("lattice_conditioning"):
                chosen = None  # a rest that conditions in turn: each of its points costs one
            conditionings.append(None if chosen is None else LatticeConditioning(*chosen))
        return conditionings[0]

    def conditioned(eps):
        conditioning = conditioning_of() if summarize and refine else None
        if conditioning is None:
            return DeltaBound(0.0, 1.0, "mgf_inversion")
        return conditioning.delta_bound(eps)

    def middle(eps):
        bracket = laplace_bracket_of()
        return DeltaBound(0.0, 1.0, "mgf_inversion") if bracket is None else bracket(eps)

    def middle_name():
        if summarize and refine and conditioning_of() is not None:
            return conditioning_of().method
        return None if laplace_bracket_of() is None else LAPLACE_METHOD

    delta_of, name = intersect_brackets(
        inversion_delta(inversion),
        fallback,
        middle,
        conditioned,
        tilted if refine else None,
        slope,
    )
    return DirectPaths(delta_of, name, None, fallback_name, middle_name, tilted_name)


def no_path_bound(rho: float | None):
    """The bound when no composition path fits in memory: the zCDP conversion (CKS
    Cor. 13, an upper bound whenever ρ is finite, else the trivial δ <= 1) with the
    trivial lower bound 0, labelled as such: (δ bound function, name)."""

    def delta_of(eps: float) -> DeltaBound:
        if rho is None:
            return DeltaBound(0.0, 1.0, "trivial")
        return DeltaBound(0.0, zcdp_to_delta(rho, eps), "zcdp")

    return delta_of, "zcdp" if rho is not None else "trivial"
