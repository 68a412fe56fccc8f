"""The composition paths of `PrivacyAccountant`: each turns recorded events into a δ(ε) bracket.

One function per method named in the accountant's docstring (the exact 1-D
formula, the MGF inversion and its finite-support split, the exact and the
coarsened lattice FFT, the grid privacy-loss distribution). Each takes the
tuple of `PrivacyEvent` values and returns rigorous (lower, upper) brackets,
or None where it does not apply; the accountant chooses and intersects them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.bounded_range import (
    adaptive_blocks,
    block_lattice,
    block_pld,
    block_span,
    block_support,
    support_points,
)
from dp_pipeline.accounting.bounds import DeltaBound, Method
from dp_pipeline.accounting.brackets import (
    pmf_group,
    same_group,
)
from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss
from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_delta_bounds
from dp_pipeline.accounting.discrete_laplace import (
    discrete_laplace_delta_bounds,
    discrete_laplace_loss_pmf,
)
from dp_pipeline.accounting.events import pure_epsilon_of, randomized_response_masses
from dp_pipeline.accounting.families import Family, family_of
from dp_pipeline.accounting.gaussian_split import METHOD as SPLIT_METHOD
from dp_pipeline.accounting.gaussian_split import gaussian_split
from dp_pipeline.accounting.inversion import (
    SMOOTH_SIGMA2,
    InversionComposition,
    SupportGroup,
    discrete_gaussian_support,
    smooth_gaussian,
)
from dp_pipeline.accounting.lattice import LatticeComponent, lattice_loss
from dp_pipeline.accounting.pld import GridTooLargeError, PrivacyLossDistribution
from dp_pipeline.accounting.rounded_support import RoundedComposition, rounded_group
from dp_pipeline.accounting.support_composition import METHOD as SUPPORT_METHOD
from dp_pipeline.accounting.support_composition import support_loss
from dp_pipeline.accounting.tilted_lattice import TiltedLattice
from dp_pipeline.accounting.zcdp import zcdp_to_delta

__all__ = [
    "fft_composition",
    "inversion_of",
    "inversion_split",
    "lattice_components",
    "no_path_bound",
    "pld_of",
    "single_coordinate",
    "support_threshold",
    "tilted_lattice",
    "tilted_refinement",
]

_LATTICE_TOLERANCE = 1e-14
_MAX_LATTICE_WORK = 1 << 26  # FFT size × number of distinct components
_MAX_EXACT_FFT = 1 << 20  # beyond, the coarsened lattice (2^15-2^19 points) is faster and tighter
_PLD_RESOLUTION = 1000  # grid points per standard deviation of the composed loss
_EXHAUSTIVE_SHIFTS = 64  # one coordinate: Theorem 7 maximised over shifts 1..Δ up to this Δ
_MAX_SUPPORT = 4096  # finite-support components larger than this are rounded (rounded_support)
_MAX_TOTAL_SUPPORT = 1 << 16  # support points summed at every node of the MGF inversion
_SUPPORT_SIGMA2 = 10_000  # below, a discrete Gaussian may be summed exactly as a support
_MAX_SPLIT_SUPPORT = 4096  # ... while such supports total at most this many points
_MAX_LATTICE_SUPPORT = 1 << 15  # finite-support lattice components larger go to the grid PLD
_MAX_PLD_POINTS = 1 << 20  # grid PLD parts larger than this are not built (time and memory)


def fft_composition(events, exact_only: bool = False, skip_exact: bool = False):
    """The exact support composition (`support_composition`, when small enough), or
    that of all but the widest discrete Gaussian beside it (`gaussian_split`), the lattice
    FFT, its coarsened variant, or the grid PLD: (δ bound function, name); with
    ``exact_only``, one of the first three or None; with ``skip_exact``, the paths after
    them (for a caller that found they do not fit). None also when no FFT path fits in
    memory (every grid is capped; see `pld_of`)."""
    exact = None if skip_exact else support_loss(events)
    if exact is not None:
        return exact.delta_bound, SUPPORT_METHOD
    split = None if skip_exact else gaussian_split(events)
    if split is not None:
        return split.delta_bound, SPLIT_METHOD
    components = lattice_components(events)
    if components is not None and any(
        len(c.probabilities or ()) > _MAX_LATTICE_SUPPORT for c in components
    ):
        components = None  # its tail bound alone would sum that support at every λ tried
    loss = None
    if components is not None and not skip_exact:
        loss = lattice_loss(
            components,
            _LATTICE_TOLERANCE,
            max_size=max(16, min(_MAX_EXACT_FFT, _MAX_LATTICE_WORK // max(1, len(components)))),
        )
    if loss is not None:
        name = Method.LATTICE_FFT.value
        return (lambda eps: loss.delta_bound(eps, name)), name
    if exact_only:
        return None
    # a selection's 257-point lattice makes the coarsened lattice slower and looser than
    # the grid PLD: with selections, the grid PLD follows the exact lattice FFT
    if components is not None and not _has_selections(events):
        coarse = coarsened_lattice_loss(components, _LATTICE_TOLERANCE)
        if coarse is not None:
            name = Method.COARSE_LATTICE.value
            return (lambda eps: coarse.delta_bound(eps, name)), name
    pld = pld_of(events)
    return None if pld is None else (pld.delta, Method.PLD.value)


def tilted_lattice(events) -> TiltedLattice | None:
    """The tilted lattice FFT of the events (`tilted_lattice`): discrete Gaussians, discrete
    Laplaces and pure-DP events only (None with selections or other pmf mechanisms)."""
    if _has_selections(events):
        return None
    components = lattice_components(events)
    if components is None or any(
        len(c.probabilities or ()) > _MAX_LATTICE_SUPPORT for c in components
    ):
        return None
    return TiltedLattice(components)


def single_coordinate(events):
    if len(events) != 1:
        return None
    event = events[0]
    if event.count != 1 or len(event.sensitivity) != 1:
        return None
    if event.sensitivity[0] > _EXHAUSTIVE_SHIFTS:
        # Theorem 7 maximised over every shift 1..Δ costs Δ exact tail sums per δ;
        # a sum with Δ = 200,000 would take hours. Larger Δ take the lattice path with
        # the shift Δ, the same worst-case rule as every composition (module docstring).
        return None
    mechanism, shift = event.mechanism, event.sensitivity[0]
    family = family_of(mechanism)
    if family is Family.DISCRETE_GAUSSIAN:

        def delta_of(eps):
            # rigorous bracket of Theorem 7 (error budget in discrete_gaussian)
            lower, upper = discrete_gaussian_delta_bounds(mechanism.sigma2, eps, shift)
            return DeltaBound(lower, upper, Method.THEOREM7.value)

        return delta_of, Method.THEOREM7.value
    if family is Family.DISCRETE_LAPLACE:

        def delta_of(eps):
            lower, upper = discrete_laplace_delta_bounds(mechanism.scale, eps, shift)
            return DeltaBound(lower, upper, Method.DISCRETE_LAPLACE_EXACT.value)

        return delta_of, Method.DISCRETE_LAPLACE_EXACT.value
    return None


def inversion_of(events):
    """Candidate MGF-inversion compositions, each a list of neighbouring directions.

    Discrete Gaussians with σ² >= 36.5 can be "smooth" (their lattice is handled by the
    comb bound of `inversion`) or a finite support (exact at every node). Two splits are
    offered, tried in order: small σ² (< 10^4, if their supports stay small) as supports
    and the rest smooth, which makes the comb bound negligible; then every σ² >= 36.5
    smooth. Empty when no discrete Gaussian is smooth in either split.
    """
    candidates = []
    threshold = support_threshold(events)
    shared: dict = {}  # the splits differ only in their Gaussians: build the rest once
    for split in (threshold, None) if threshold is not None else (None,):
        directions = inversion_split(events, split, shared)
        if directions is not None:
            candidates.append(directions)
    return candidates


def support_threshold(events) -> Fraction | None:
    """The σ² below which discrete Gaussians are summed as supports: the smallest σ²
    first, while their supports (~78σ points each) total at most `_MAX_SPLIT_SUPPORT`
    and σ² < `_SUPPORT_SIGMA2`. None if that changes nothing."""
    sizes: dict = {}
    for event in events:
        mechanism = event.mechanism
        if family_of(mechanism) is Family.DISCRETE_GAUSSIAN and mechanism.sigma2 >= SMOOTH_SIGMA2:
            size = (78 * math.sqrt(float(mechanism.sigma2)) + 5) * len(set(event.sensitivity) - {0})
            sizes[mechanism.sigma2] = sizes.get(mechanism.sigma2, 0) + size
    total, threshold = 0.0, None
    for sigma2 in sorted(sizes):
        total += sizes[sigma2]
        if total > _MAX_SPLIT_SUPPORT or sigma2 >= _SUPPORT_SIGMA2:
            threshold = sigma2
            break
    if threshold is None or threshold == min(sizes, default=None):
        return None
    return threshold


def inversion_split(events, support_below, shared: dict | None = None):
    """One candidate of `inversion_of`: discrete Gaussians with σ² >= ``support_below``
    (all if None) smooth, the rest finite supports. ``shared`` caches the finite-support
    groups of the other events and their rounded versions between calls (same events)."""
    shared = {} if shared is None else shared
    gaussians, forward, backward = [], [], []
    asymmetric = False
    unit = 2.0**-53
    support_size = 0
    blocks_added = False
    for event in events:
        mechanism = event.mechanism
        family = family_of(mechanism)
        shifts = Counter(s for s in event.sensitivity if s)
        if family is Family.DISCRETE_GAUSSIAN:
            for shift, multiplicity in shifts.items():
                count = multiplicity * event.count
                sigma2 = mechanism.sigma2
                if sigma2 >= SMOOTH_SIGMA2 and (support_below is None or sigma2 >= support_below):
                    gaussians.append(smooth_gaussian(sigma2, shift, count))
                else:
                    group = discrete_gaussian_support(float(sigma2), shift, count)
                    support_size += len(group.masses)
                    forward.append(group)
                    backward.append(group)
            continue
        if family is Family.DISCRETE_LAPLACE:
            for shift, multiplicity in shifts.items():
                key = ("laplace", mechanism.scale, shift, multiplicity * event.count)
                if key not in shared:
                    values, probabilities = discrete_laplace_loss_pmf(mechanism.scale, shift)
                    losses = (-shift + 2.0 * values) / float(mechanism.scale)
                    shared[key] = SupportGroup(
                        masses=probabilities,
                        losses=losses,
                        count=multiplicity * event.count,
                        loss_error=8 * unit * float(np.max(np.abs(losses))),
                        mass_error=8 * unit * (shift + 4),
                    )
                group = shared[key]
                support_size += len(group.masses)
                forward.append(group)
                backward.append(group)
            continue
        if family is Family.SELECTION:
            if not blocks_added:  # every selection enters once, in its ε's blocks
                blocks_added = True
                points = support_points(events)
                for block in adaptive_blocks(events):
                    key = ("br-block", *block, points)
                    if key not in shared:
                        epsilon, runs, copies = block
                        shared[key] = block_support(epsilon, runs, points, copies)
                    support_size += len(shared[key].masses)
                    forward.append(shared[key])
                    backward.append(shared[key])
            continue
        if family is Family.PMF_PAIR:
            key = ("pmf", id(mechanism), event.count)
            if key not in shared:
                p, q = (np.asarray(x, dtype=np.float64) for x in mechanism.privacy_loss_pmfs())
                if p.shape != q.shape:
                    return None
                pair = pmf_group(p, q, event.count), pmf_group(q, p, event.count)
                shared[key] = (mechanism, pair)  # the mechanism keeps its id alive
            one, two = shared[key][1]
            support_size += len(one.masses)
            forward.append(one)
            backward.append(two)
            asymmetric = asymmetric or not same_group(one, two)
            continue
        pure = float(pure_epsilon_of(mechanism))
        if pure > 0:
            low, high = randomized_response_masses(pure)
            group = SupportGroup(
                masses=np.array([high, low]),
                losses=np.array([pure, -pure]),
                count=event.count,
                loss_error=2 * unit * pure,
            )
            support_size += 2
            forward.append(group)
            backward.append(group)
    if not gaussians:
        return None
    rounded = any(len(g.masses) > _MAX_SUPPORT for g in forward + backward)
    if rounded:
        ups = [_rounded(forward, True, shared), _rounded(backward, True, shared)]
        downs = [_rounded(forward, False, shared), _rounded(backward, False, shared)]
        support_size = sum(len(g.masses) for g in ups[0])
    if support_size > _MAX_TOTAL_SUPPORT:
        return None
    if not rounded:
        directions = [InversionComposition(gaussians, forward)]
        if asymmetric:
            directions.append(InversionComposition(gaussians, backward))
        return directions
    return [
        RoundedComposition(
            InversionComposition(gaussians, up), InversionComposition(gaussians, down)
        )
        for up, down in list(zip(ups, downs, strict=True))[: 2 if asymmetric else 1]
    ]


def _rounded(groups, up: bool, shared: dict) -> list[SupportGroup]:
    """The groups with supports over `_MAX_SUPPORT` rounded (`rounded_support`); a group
    met again (both directions of a symmetric loss, both splits) is rounded once."""
    rounded = []
    for group in groups:
        if len(group.masses) <= _MAX_SUPPORT:
            rounded.append(group)
            continue
        key = ("rounded", id(group), up)
        if key not in shared:
            shared[key] = (group, rounded_group(group, up))  # the group keeps its id alive
        rounded.append(shared[key][1])
    return rounded


def lattice_components(events) -> list[LatticeComponent] | None:
    counts: Counter = Counter()
    for event in events:
        mechanism = event.mechanism
        family = family_of(mechanism)
        if family is Family.DISCRETE_GAUSSIAN:
            for shift in event.sensitivity:
                if shift:
                    counts[("dg", mechanism.sigma2, shift)] += event.count
        elif family is Family.DISCRETE_LAPLACE:
            for shift in event.sensitivity:
                if shift:
                    counts[("dl", mechanism.scale, shift)] += event.count
        elif family is Family.SELECTION:
            counts[("br", None, 0)] = 1  # every selection at once, in blocks (below)
        elif family is Family.PMF_PAIR:
            return None
        else:
            pure = pure_epsilon_of(mechanism)
            if not isinstance(pure, Fraction):
                return None
            if pure > 0:
                counts[("rr", pure, 1)] += event.count
    components = []
    for (kind, value, shift), count in counts.items():
        if kind == "dg":
            components.append(
                LatticeComponent(
                    offset=Fraction(shift * shift) / (2 * value),
                    step=Fraction(shift) / value,
                    count=count,
                    sigma2=value,
                )
            )
        elif kind == "br":
            components.extend(block_lattice(*block) for block in adaptive_blocks(events))
        elif kind == "dl":
            _, probabilities = discrete_laplace_loss_pmf(value, shift)
            components.append(
                LatticeComponent(
                    offset=-Fraction(shift) / value,
                    step=2 / value,
                    count=count,
                    probabilities=tuple(probabilities.tolist()),  # the same floats, fast
                )
            )
        else:
            components.append(
                LatticeComponent(
                    offset=-value,
                    step=2 * value,
                    count=count,
                    probabilities=randomized_response_masses(float(value)),
                )
            )
    return components or None


def pld_of(events, max_points: int = _MAX_PLD_POINTS) -> PrivacyLossDistribution | None:
    """The grid PLD of the events (step: 1/1000 of the composed loss's standard deviation),
    or None if a part would need more than ``max_points`` grid points or the composition
    more than `pld.MAX_GRID_POINTS` (checked before anything that large is allocated)."""
    parts_spec = []
    variance = 0.0
    for event in events:
        mechanism = event.mechanism
        family = family_of(mechanism)
        if family in (Family.DISCRETE_GAUSSIAN, Family.DISCRETE_LAPLACE):
            for shift, multiplicity in Counter(s for s in event.sensitivity if s).items():
                parts_spec.append((mechanism, shift, multiplicity * event.count))
                if family is Family.DISCRETE_GAUSSIAN:
                    variance += multiplicity * event.count * shift * shift / float(mechanism.sigma2)
                else:
                    variance += multiplicity * event.count * (shift / float(mechanism.scale)) ** 2
        else:
            if family is not Family.SELECTION:  # selections: blocks, below
                parts_spec.append((mechanism, 1, event.count))
            pure = pure_epsilon_of(mechanism)
            variance += event.count * (float(pure) ** 2 if pure is not None else 1.0)
    step = max(math.sqrt(variance) / _PLD_RESOLUTION, 1e-7)
    if not math.isfinite(step):
        return None
    for mechanism, shift, count in parts_spec:
        if _pld_points(mechanism, shift, count, step) > max_points:
            return None
    blocks = adaptive_blocks(events)
    for epsilon, runs, copies in blocks:
        if block_span(epsilon, runs, copies) / step + 2 > max_points:
            return None
    try:
        parts = [block_pld(epsilon, runs, step, copies) for epsilon, runs, copies in blocks]
        for mechanism, shift, count in parts_spec:
            part = PrivacyLossDistribution.from_mechanism(mechanism, shift, step)
            parts.append(part.self_compose(count) if count > 1 else part)
        while len(parts) > 1:
            parts = [
                parts[i].compose(parts[i + 1]) if i + 1 < len(parts) else parts[i]
                for i in range(0, len(parts), 2)
            ]
    except GridTooLargeError:
        return None
    return parts[0]


def _pld_points(mechanism, shift: int, count: int, step: float) -> float:
    """An upper estimate of the points a grid PLD part needs: its terms, its loss range on
    the grid (times ``count``, its self-composition)."""
    family = family_of(mechanism)
    if family is Family.DISCRETE_GAUSSIAN:
        sigma2 = float(mechanism.sigma2)
        terms = 2 * math.sqrt(100 * sigma2) + 5
        return max(terms, count * 2 * math.sqrt(100 * sigma2) * shift / sigma2 / step)
    if family is Family.DISCRETE_LAPLACE:
        return max(shift + 1.0, count * 2 * shift / float(mechanism.scale) / step)
    pure = pure_epsilon_of(mechanism)
    return count * 2 * float(pure) / step + 2 if pure is not None else 0.0


def _has_selections(events) -> bool:
    return any(family_of(e.mechanism) is Family.SELECTION for e in events)


def tilted_refinement(events):
    """(tilted(ε), slope(ε), tilted_name()) of the tilted lattice, built on first use."""
    tilts: list = []  # the tilted lattice (or None), built on first use

    def tilted(eps):
        if not tilts:
            tilts.append(tilted_lattice(events))
        if tilts[0] is None:
            return DeltaBound(0.0, 1.0, Method.TILTED_LATTICE.value)
        return tilts[0].delta_bound(eps)

    def slope(eps):
        if not tilts:
            tilts.append(tilted_lattice(events))
        return None if tilts[0] is None else tilts[0].saddle(eps)

    def tilted_name():
        used = tilts and tilts[0] is not None and tilts[0].used
        return Method.TILTED_LATTICE.value if used else None

    return tilted, slope, tilted_name


def no_path_bound(rho: float | None) -> tuple[Callable[[float], DeltaBound], str]:
    """The bound when no composition path fits in memory: the zCDP conversion (CKS
    Cor. 13, an upper bound whenever ρ is finite, else the trivial δ <= 1) with the
    trivial lower bound 0, labelled as such: (δ bound function, name)."""

    def delta_of(eps: float) -> DeltaBound:
        if rho is None:
            return DeltaBound(0.0, 1.0, Method.TRIVIAL.value)
        return DeltaBound(0.0, zcdp_to_delta(rho, eps), Method.ZCDP.value)

    return delta_of, Method.ZCDP.value if rho is not None else Method.TRIVIAL.value
