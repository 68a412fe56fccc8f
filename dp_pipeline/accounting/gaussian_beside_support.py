"""One discrete Gaussian coordinate composed exactly with a finite-support rest.

For product pairs the composed δ is the expectation, over the rest's privacy loss L under
P, of the Gaussian's δ at the shifted ε (the hockey-stick divergence factorises):

    δ(ε) = Σ_i p_i · δ_G(ε - l_i),

with δ_G at a negative argument from the Gaussian pair's symmetry (N_Z(0, σ²) against
N_Z(Δ, σ²) is its own reflection y -> Δ - y), δ_G(-y) = 1 - e^{-y}·(1 - δ_G(y)) (the
identity δ_{P,Q}(x) = 1 - e^x + e^x·δ_{Q,P}(-x) of the hockey stick). δ_G is CKS Theorem 7
(`discrete_gaussian`), a rigorous bracket; the rest's masses carry the support
composition's error budget (`support_composition`). Atoms further than ``reach`` from ε
(where the Gaussian's zCDP δ is below the float range) cost no Theorem 7 sum: their δ_G
is bracketed by [0, 2^-1074] (or 1 minus that on the other side).

This is what makes a Gaussian of negligible ρ beside randomized responses and discrete
Laplaces exact instead of a basic-composition shift of the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.bounds import DeltaBound
from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_delta_bounds
from dp_pipeline.accounting.event_totals import event_rho
from dp_pipeline.accounting.families import Family, family_of
from dp_pipeline.accounting.outward import exp_down, exp_up, round_down, round_up
from dp_pipeline.accounting.support_composition import SupportLoss, support_loss
from dp_pipeline.accounting.zcdp import zcdp_to_delta

__all__ = [
    "EXACT_NEGLIGIBLE",
    "MAX_ATOMS",
    "exact_negligible",
    "gaussian_beside_support",
    "gaussians_of",
    "negligible_gaussians",
]

EXACT_NEGLIGIBLE = "support_exact + negligible gaussian, composed exactly"
_MAX_SHIFT = 64  # Theorem 7 maximised over the shifts 1..Δ (as `paths.single_coordinate`)

MAX_ATOMS = 4096  # rest atoms summed per δ (each near ε costs one Theorem 7 bracket)
_U = 2.0**-53
_TINY = 5e-324


def _float_down(value: Fraction) -> float:
    rounded = float(value)
    return rounded if Fraction(rounded) <= value else math.nextafter(rounded, -math.inf)


def _float_up(value: Fraction) -> float:
    rounded = float(value)
    return rounded if Fraction(rounded) >= value else math.nextafter(rounded, math.inf)


def _gaussian_at(
    gaussian: Callable[[float], tuple[float, float]], x: Fraction, reach: float
) -> tuple[float, float]:
    """(lower, upper) on δ_G(x) for any real x (module docstring); ``gaussian`` brackets
    δ_G at a float >= 0, and δ_G(y) <= 2^-1074 for y >= ``reach``."""
    if x >= 0:
        # δ_G decreases: the upper end at x rounded down, the lower end at x rounded up
        low_x, high_x = _float_down(x), _float_up(x)
        if low_x >= reach:
            return 0.0, _TINY
        return gaussian(high_x)[0], gaussian(low_x)[1]
    y = -x  # δ_G(-y) = 1 - e^{-y}(1 - δ_G(y)) increases with y
    low_y, high_y = _float_down(y), _float_up(y)
    if low_y >= reach:
        above_high = _TINY
        below_low = 0.0
    else:
        above_high = gaussian(high_y)[1]
        below_low = gaussian(low_y)[0]
    # upper: e^{-y} from below at y's upper float, (1 - δ_G) from below
    kept = round_down(exp_down(-high_y) * round_down(1.0 - above_high, 1), 2)
    upper = min(1.0, round_up(1.0 - kept, 2))
    kept = round_up(exp_up(-low_y) * round_up(1.0 - below_low, 1), 2)
    lower = max(0.0, round_down(1.0 - min(kept, 1.0), 2))
    return lower, upper


def gaussian_beside_support(
    rest: SupportLoss,
    gaussian: Callable[[float], tuple[float, float]],
    reach: float,
    method: str,
) -> Callable[[float], DeltaBound] | None:
    """δ(ε) of one discrete Gaussian coordinate composed with the exact finite-support
    composition ``rest`` (module docstring: exact up to the rigorous error budgets of
    Theorem 7 and of the rest's masses, rounded outward). ``gaussian(x)`` is the Gaussian
    alone's (lower, upper) at a float x >= 0; ``reach`` an ε where its δ is <= 2^-1074.
    None when the rest has over `MAX_ATOMS` atoms."""
    if len(rest.masses) > MAX_ATOMS:
        return None
    losses = [rest.offset + rest.gamma * int(w) for w in rest.positions]
    masses = np.asarray(rest.masses, dtype=np.float64)
    # each product within 1 ulp, each mass within the rest's relative error, the sum's
    # rounding as in the support composition (n terms, pairwise): charged on both sides
    relative = rest.relative + (2 * (math.log2(max(len(losses), 2)) + 24)) * _U

    def delta_of(epsilon: float) -> DeltaBound:
        eps = Fraction(epsilon)
        lows = np.empty(len(losses))
        highs = np.empty(len(losses))
        for i, loss in enumerate(losses):
            lows[i], highs[i] = _gaussian_at(gaussian, eps - loss, reach)
        low_total = float(np.sum(masses * lows))
        high_total = float(np.sum(masses * highs))
        lower = max(0.0, round_down(low_total * (1 - relative) - rest.absolute, 2))
        # the dropped mass may sit anywhere: δ_G <= 1 there
        upper = round_up(high_total * (1 + relative) + rest.absolute + rest.dropped, 2)
        return DeltaBound.clipped(lower, min(1.0, upper), method)

    return delta_of


def exact_negligible(gaussians, others, reach: float) -> Callable[[float], DeltaBound] | None:
    """The exact composition (`gaussian_beside_support`) of the events ``gaussians`` and
    ``others`` when ``gaussians`` is one discrete Gaussian coordinate (count 1, Δ <= 64)
    and ``others`` have an exact finite support of at most `MAX_ATOMS` atoms; None
    otherwise. ``reach``: an ε where the Gaussian's δ is <= 2^-1074."""
    if len(gaussians) != 1 or not others:
        return None
    (event,) = gaussians
    if family_of(event.mechanism) is not Family.DISCRETE_GAUSSIAN:
        return None
    if event.count != 1 or len(event.sensitivity) != 1 or event.sensitivity[0] > _MAX_SHIFT:
        return None
    rest = support_loss(list(others))
    if rest is None:
        return None
    sigma2, shift = event.mechanism.sigma2, event.sensitivity[0]

    def gaussian(x: float) -> tuple[float, float]:
        return discrete_gaussian_delta_bounds(sigma2, x, shift)

    return gaussian_beside_support(rest, gaussian, reach, EXACT_NEGLIGIBLE)


def negligible_gaussians(events, most: float) -> tuple[list, float, float]:
    """The discrete Gaussian events of smallest ρ whose total ρ moves ε by at most
    ``most`` (their zCDP δ at that shift t is below the float range, CKS Cor. 13), with
    that ρ rounded up and t: the longest such run, smallest ρ first; ([], 0, 0) if none."""
    gaussians = gaussians_of(events)
    chosen: list = []
    found, total = (0.0, 0.0), Fraction(0)
    for event in sorted(gaussians, key=event_rho):
        total += event.count * event_rho(event)
        # ρ rounded up: the zCDP conversions are then upper bounds for the exact ρ
        rho = math.nextafter(float(total), 1.0)
        # δ_zCDP(ρ, t) <= e^{-(t-ρ)²/(4ρ)} < 5e-324 once t >= ρ + 2·sqrt(800ρ)
        shift = 2 * rho + 2 * math.sqrt(800 * rho)
        if not 0 < shift <= most or zcdp_to_delta(rho, shift) > 5e-324:
            break
        chosen.append(event)
        found = (rho, shift)
    return chosen, *found


def gaussians_of(events) -> list:
    """The discrete Gaussian events of ``events``, in order."""
    return [e for e in events if family_of(e.mechanism) is Family.DISCRETE_GAUSSIAN]
