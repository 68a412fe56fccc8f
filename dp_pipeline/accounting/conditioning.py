"""δ(ε) of a composition holding one discrete Gaussian with a coarse loss lattice, by
conditioning on that coordinate.

For Y ~ N_Z(0, σ²) with shift μ the coordinate's privacy loss is ℓ_y = (μ² + 2μy)/(2σ²),
a lattice of step b = μ/σ². With R the loss of everything else (independent of Y),

    δ(ε) = Σ_y P[Y=y]·g(ε - ℓ_y),    g(t) = E_P[(1 - e^{t-R})_+],

g non-increasing with g(t) = δ_R(t) for t >= 0 and g(t) = 1 - e^t + e^t·δ_R'(-t) for
t < 0 (δ_R' the reverse direction; E_P[e^{-R}] = 1 as the rest has a finite ρ). So

- where t <= -T (T = 40): 1 - e^t <= g(t) <= 1 (so g = 1 - e^t within e^{-40} relative),
  and those terms sum to the tail of CKS Theorem 7 from the first such y on
  (`discrete_gaussian_tail_bounds`, direct sums with a written error budget);
- where t >= t_hi: 0 <= g(t) <= cap(t_hi), cap the rest's closed-form zCDP bound (and
  basic composition of its pure-DP part with the zCDP of the others), t_hi chosen so that
  cap(t_hi) is below ~1e-320; their P-mass is at most 1, so cap(t_hi) is added;
- between: g from the rest's own rigorous bracket at ±t (one δ_R evaluation).

When b > T + t_hi at most one y falls between, so a δ evaluation costs one evaluation of
the rest (a few milliseconds) instead of an inversion whose integrand repeats every
2π/b and needs ~50,000 nodes (a discrete Gaussian with Δ/σ in the thousands). With one
such y, the bounds of the other terms hold for either direction of the rest, so taking
the rest's bracket (the maximum over its directions) keeps the lower bound below the
maximum over directions of the composition's δ.

With b > (T + t_hi)/m, at most m + 1 y fall between (one rest evaluation each). The
upper bound sums their upper ends (each the maximum over the rest's directions, so the
sum bounds every direction's). The lower bound sums their lower ends when the rest is
symmetric (discrete Gaussians, discrete Laplaces, randomized response for pure ε: one
direction); otherwise it keeps only the largest middle term, which the direction that
reaches it satisfies alone (the other terms are >= 0). The strategy uses this form
(m <= 4) as a cheap bracket beside a loose MGF inversion (`strategy`): at tiny δ the inversion's
comb bound over such a coarse lattice is wide, and conditioning is not.

Rounding: ε - ℓ_y is exact (rationals), rounded down for the upper bound of g and up for
the lower (g is non-increasing); e^t and 1 - e^t carry 4 ulps each.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.accounting._checks import round_up
from dp_pipeline.accounting.bounds import DeltaBound, Method
from dp_pipeline.accounting.brackets import TIGHT
from dp_pipeline.accounting.discrete_gaussian import (
    discrete_gaussian_pmf_bounds,
    discrete_gaussian_tail_bounds,
)
from dp_pipeline.accounting.events import PrivacyEvent
from dp_pipeline.accounting.families import Family, family_of
from dp_pipeline.accounting.outward import round_down
from dp_pipeline.accounting.zcdp import zcdp_to_delta

__all__ = [
    "LatticeConditioning",
    "RestSummary",
    "conditioned_composition",
    "conditioning_coordinate",
]

_U = 2.0**-53
FAR_BELOW = 40  # T: below ε - ℓ_y = -T, g(t) = 1 - e^t within e^{-40} relative
_CAP_LOG = 740.0  # e^{-740} < 1e-321: the closed-form cap of the rest beyond t_hi
_MAX_SIGMA2 = 10**6  # the Theorem 7 tail sums stay below ~10^4 terms
_REFINED = 1e-7  # closed-form middle terms left while their width is below this, relative
_ABOVE_SLACK = math.exp(-FAR_BELOW) / -math.expm1(-FAR_BELOW)  # Σ p·e^t <= slack·Σ p(1 - e^t)


@dataclass(frozen=True)
class RestSummary:
    """What conditioning needs of the other events: their δ bracket and closed-form caps.

    ``rho``: their total zCDP ρ; ``pure``: (Σ pure ε, ρ of the others) or None;
    ``method_of()``: the method of their composition (building it: asked only once the
    conditioning applies); ``conditions_of()``: whether that composition is itself a
    lattice conditioning (building it too; False when not given).
    """

    delta: Callable[[float], DeltaBound]
    rho: float
    pure: tuple[float, float] | None
    method_of: Callable[[], str]
    conditions_of: Callable[[], bool] | None = None

    def conditions(self) -> bool:
        """Whether the rest's composition is a lattice conditioning in turn (each of its
        lattice points then costs one evaluation of its own rest)."""
        return self.conditions_of is not None and self.conditions_of()

    @property
    def method(self) -> str:
        return self.method_of()

    def cap(self, t: float) -> float:
        """Closed-form upper bound on δ_R(t), t >= 0 (CKS Cor. 13; basic composition)."""
        bound = zcdp_to_delta(self.rho, t)
        if self.pure is not None:
            pure_total = self.pure[0] * (1 + 1e-12)
            if t > pure_total:
                bound = min(bound, zcdp_to_delta(self.pure[1], t - pure_total))
        return bound

    def far_above(self) -> float:
        """t_hi: from here on cap(t) <= e^{-740} (δ_zCDP(ρ, t) <= e^{-(t-ρ)²/(4ρ)})."""
        high = self.rho + math.sqrt(4 * self.rho * _CAP_LOG) + 1
        if self.pure is not None:
            pure_total, rho_rest = self.pure
            high = min(
                high, pure_total * (1 + 1e-12) + rho_rest + math.sqrt(4 * rho_rest * _CAP_LOG) + 1
            )
        return high


def conditioned_composition(events, summarize, paths):
    """(δ bound function, name) by conditioning on a coarse lattice coordinate
    (`conditioning_coordinate`), or None where none qualifies. Where its bracket is wider
    than `brackets.TIGHT` relative, the direct paths' bracket (``paths()[0]``, built on
    first use) is intersected with it (both are rigorous); the bound keeps the method of
    its upper end."""
    chosen = conditioning_coordinate(events, summarize)
    if chosen is None:
        return None
    conditioning = LatticeConditioning(*chosen)

    def delta_of(epsilon: float) -> DeltaBound:
        first = conditioning.delta_bound(epsilon)
        if first.upper <= 5e-324 or first.upper - first.lower <= TIGHT * first.upper:
            return first
        return first.intersect(paths()[0](epsilon))

    return delta_of, conditioning.method


def conditioning_coordinate(
    events, summarize: Callable[[list], RestSummary | None], middle: int = 1
):
    """(σ², shift, the rest's summary, whether the rest is symmetric) of the discrete
    Gaussian coordinate to condition on, or None: a coordinate held once (σ² <= 10^6)
    whose lattice step μ/σ² exceeds (T + t_hi)/``middle`` of the other events (at most
    ``middle`` + 1 lattice points between, module docstring), the largest such step.

    ``summarize(rest_events)``: the `RestSummary` of a list of events (None if their ρ is
    not finite).
    """
    best = None
    for index, event in enumerate(events):
        mechanism = event.mechanism
        if family_of(mechanism) is not Family.DISCRETE_GAUSSIAN or mechanism.sigma2 > _MAX_SIGMA2:
            continue
        # a float pre-filter (σ² as a float is within 1e-15 relative): most steps are small
        reach = FAR_BELOW / middle * float(mechanism.sigma2) * (1 - 1e-9)
        if max(event.sensitivity) <= reach:
            continue
        held = Counter(s for s in event.sensitivity if s)
        for shift, multiplicity in held.items():
            step = Fraction(shift) / mechanism.sigma2
            if multiplicity * event.count != 1 or step * middle <= FAR_BELOW:
                continue
            if best is None or step > best[0]:
                best = (step, index, shift)
    if best is None:
        return None
    step, index, shift = best
    event = events[index]
    remaining = list(event.sensitivity)
    remaining.remove(shift)
    rest = [e for i, e in enumerate(events) if i != index]
    if any(remaining):
        rest.insert(index, PrivacyEvent(event.mechanism, tuple(remaining), event.count))
    summary = summarize(rest) if rest else None
    if summary is None or float(step) * middle <= FAR_BELOW + summary.far_above():
        return None
    return event.mechanism.sigma2, shift, summary, all(_symmetric(e.mechanism) for e in rest)


def _symmetric(mechanism) -> bool:
    """Whether a mechanism's privacy loss has the same law in both directions: discrete
    Gaussians and Laplaces (reflect the output about μ/2) and pure ε-DP events, which
    every path counts as randomized response (not selections, not pmf pairs)."""
    return family_of(mechanism) in (
        Family.DISCRETE_GAUSSIAN,
        Family.DISCRETE_LAPLACE,
        Family.PURE_DP,
    )


@dataclass(frozen=True)
class LatticeConditioning:
    """δ(ε) of N_Z(0, σ²) with shift μ composed with a rest (module docstring)."""

    sigma2: Fraction
    shift: int
    rest: RestSummary
    symmetric: bool = False  # the rest's loss has one law in both directions

    @property
    def method(self) -> str:
        return f"{Method.LATTICE_CONDITIONING} + {self.rest.method}"

    def _loss(self, y: int) -> Fraction:
        return Fraction(self.shift * self.shift + 2 * self.shift * y, 2) / self.sigma2

    def delta_bound(self, epsilon: float) -> DeltaBound:
        """Rigorous bracket of δ(ε) (module docstring)."""
        eps = Fraction(epsilon)
        sigma2, mu = self.sigma2, self.shift
        # first y with ℓ_y >= ε + T: from there on g = 1 - e^t within e^{-T}
        above = math.ceil(((eps + FAR_BELOW) * 2 * sigma2 - mu * mu) / (2 * mu))
        # the sum starts at -R at the lowest: P[Y < -R] < e^{-800}·(1/(1 - e^{-(2R+1)/(2σ²)}))
        # < 5e-324 for σ² <= 10^6, added to the upper bound as the smallest float
        reach = math.isqrt(math.ceil(1600 * sigma2)) + 1
        first = max(above, -reach)
        tail_lower, tail_upper = discrete_gaussian_tail_bounds(sigma2, mu, epsilon, first)
        upper = tail_upper * (1 + _ABOVE_SLACK) * (1 + 4 * _U) + (5e-324 if first > above else 0)
        lower = tail_lower
        high = self.rest.far_above()
        upper += self.rest.cap(high)  # the y whose t = ε - ℓ_y >= t_hi (P-mass <= 1)
        # the y that lie between: above - 1, above - 2, ... while ε - ℓ_y < t_hi (one when
        # b > T + t_hi: ℓ_{above-2} <= ε + T - b < ε - t_hi)
        middle = above - 1
        between = []  # (t, P[Y=y] lower, upper) of the y between
        while (t := eps - self._loss(middle)) < high:
            between.append((t, *discrete_gaussian_pmf_bounds(sigma2, middle)))
            middle -= 1
        method, capped = self.method, False
        # each term's bracket: closed forms first (g <= cap(t) for t >= 0, g >= 1 - e^t
        # below), the rest evaluated where that leaves a term wide (widest first, until the
        # closed-form terms' width is within `_REFINED` of the lower bound; all of them
        # when one lies between)
        terms = [self._closed_form_term(*term) for term in between]
        order = sorted(range(len(terms)), key=lambda i: terms[i][1] - terms[i][0], reverse=True)
        for rank, index in enumerate(order):
            remaining = sum(terms[i][1] - terms[i][0] for i in order[rank:])
            known = lower + sum(term[0] for term in terms)
            if len(terms) > 1 and remaining <= _REFINED * known:
                break
            t, p_lower, p_upper = between[index]
            g_lower, g_upper, rest = self._g_bounds(t)
            terms[index] = (p_lower * g_lower * (1 - 4 * _U), p_upper * g_upper * (1 + 4 * _U))
            method, capped = f"{Method.LATTICE_CONDITIONING} + {rest.method}", rest.capped
        if len(terms) == 1:
            upper += terms[0][1]
        elif terms:
            upper += math.fsum(term[1] for term in terms) * (1 + len(terms) * _U)
        if terms:
            # summed for a symmetric rest; else the largest (module docstring)
            if len(terms) == 1 or not self.symmetric:
                lower += max(term[0] for term in terms)
            else:
                lower += math.fsum(term[0] for term in terms) * (1 - len(terms) * _U)
        # a product or sum among subnormal floats errs by up to half a unit 2^-1074, which
        # no relative factor covers: each term's two products and the tail's are charged
        # one unit each, in whole ulps
        ulps = 2 * len(terms) + 4
        upper = min(1.0, round_up(upper, ulps))
        lower = round_down(lower * (1 - 4 * _U), ulps)
        return DeltaBound.clipped(lower, upper, method, capped)

    def _closed_form_term(self, t: Fraction, p_lower: float, p_upper: float):
        """(lower, upper) on P[Y=y]·g(t) from closed forms alone: 0 <= g(t) <= cap(t) for
        t >= 0 (cap non-increasing: taken at t rounded down), 1 - e^t <= g(t) <= 1 below."""
        if t >= 0:
            return 0.0, p_upper * min(1.0, self.rest.cap(_float_down(t))) * (1 + 4 * _U)
        return p_lower * -math.expm1(_float_up(t)) * (1 - 8 * _U), p_upper

    def _g_bounds(self, t: Fraction) -> tuple[float, float, DeltaBound]:
        """(lower, upper) on g(t) for the exact rational t, and the rest's bound that gave
        the upper end (its method names the conditioning's)."""
        t_down, t_up = _float_down(t), _float_up(t)
        if t >= 0:
            # g non-increasing: the upper bound at t rounded down, the lower at t rounded up
            at_down, at_up = self.rest.delta(t_down), self.rest.delta(t_up)
            return at_up.lower, at_down.upper, at_down
        # g(t) = (1 - e^t) + e^t·δ_R'(-t), bounded at each rounded t
        at_down = self.rest.delta(-t_down)
        at_up = self.rest.delta(max(0.0, -t_up))
        upper = (-math.expm1(t_down) + math.exp(t_down) * at_down.upper) * (1 + 8 * _U)
        lower = (-math.expm1(t_up) + math.exp(t_up) * at_up.lower) * (1 - 8 * _U)
        return max(0.0, lower), min(1.0, upper), at_down


def _float_down(value: Fraction) -> float:
    near = float(value)
    return math.nextafter(near, -math.inf) if Fraction(near) > value else near


def _float_up(value: Fraction) -> float:
    near = float(value)
    return math.nextafter(near, math.inf) if Fraction(near) < value else near
