"""ε(δ) from a rigorous δ(ε) bracket: the two ends searched by safeguarded regula falsi.

Every end returned is certified by a direct evaluation of the bracket function: the upper
end is an ε with δ_upper(ε) <= δ (rounded up 4 ulps), the lower end an ε with
δ_lower(ε) > δ (or 0). Only their tightness relies on the bounds being non-increasing in ε,
as the true δ(ε) is: the upper end is within ``rtol`` = 1e-7 relative of the smallest ε
with δ_upper(ε) <= δ and the lower end within 1e-7 of the largest with δ_lower(ε) > δ.

A δ evaluation of a large composition is the expensive part, so the search saves them:
the closed-form starting ε (the zCDP conversion) is nudged up by a relative 2^-30 at a
time, growing, when its own rounding leaves it just infeasible; when the bound at the
start came from that closed form (``probe``), the start itself is usually the answer and
one evaluation 1e-7 below it settles the bracket; the steps are regula falsi on log δ
(Illinois), or by decades and then geometric means where the bound is 0 at the high end
and the bracket spans more than a factor 1,000 (a lower bound that vanishes above some ε
gives the secant nothing); where the secant of two feasible trials says nothing (a
staircase's flat step: the composed loss of a coarse lattice), the trials go down from the
loss's scale (``spread``), doubling, instead of halfway at once; the lower search starts
from the largest ε the upper one saw with δ_lower > δ.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dp_pipeline.accounting._checks import round_up
from dp_pipeline.accounting.bounds import DeltaBound, EpsilonBound

__all__ = ["RTOL", "epsilon_from_delta_function"]

RTOL = 1e-7  # relative width of the final bracket of each end
_FIRST_GROWTH = 2.0**-30  # first relative step up from an infeasible starting ε


def epsilon_from_delta_function(
    delta_bound_of: Callable[[float], DeltaBound],
    delta: float,
    high: float,
    method: str,
    probe: Callable[[DeltaBound], bool] | None = None,
    spread: float | None = None,
    decide: bool = False,
) -> EpsilonBound:
    """EpsilonBound from a δ(ε) bound function (both ends non-increasing in ε).

    upper: an ε with δ_upper(ε) <= δ (the guarantee), within ~1e-7 relative of the
    smallest such; lower: an ε with δ_lower(ε) > δ, so the true ε(δ) is above it (or 0).
    ``high``: a starting ε expected to be feasible (raised until it is); ``probe(bound)``:
    whether the bound at the start says the answer is likely the start itself (then ε is
    tried 1e-7 below it first); ``spread``: a scale of how far below the start the answer
    may be (the loss's standard deviation; the first trial below the start is then at
    most 2·spread below it, not 10%). Evaluations are shared between the two searches, and
    ε = 0 is evaluated only when the searches come near it. With ``decide``, the bound
    function is called as ``delta_bound_of(ε, decide=δ)``: it may then return, instead of
    its tightest bracket, a looser rigorous one that puts its upper end on the same side of
    δ (one with lower > δ or upper <= δ, or with upper > δ where δ(ε) > δ is known): the
    ends stay certified, the lower end may stay lower than the tightest bracket would put
    it, and the secant steps see the looser value.
    """
    seen: dict = {}

    def bound_at(eps: float) -> DeltaBound:
        if eps not in seen:
            seen[eps] = delta_bound_of(eps, decide=delta) if decide else delta_bound_of(eps)
        return seen[eps]

    growth = _FIRST_GROWTH
    while bound_at(high).upper > delta:
        high = high * (1 + growth) + growth
        growth = min(16 * growth, 1.0)  # from the 4th step on, as fast as doubling
    first_trial = step = None
    if probe is not None and probe(bound_at(high)):
        first_trial = high * (1 - 0.5 * RTOL)
    elif spread is not None and 0 < 2 * spread < 0.1 * high:
        step = 2 * spread
        first_trial = high - step
    upper, feasible = _solve(
        lambda eps: bound_at(eps).upper,
        delta,
        high,
        feasible_end=True,
        first_trial=first_trial,
        flat_step=step,
    )
    # the lower end starts from the largest ε seen with δ_lower > δ (δ_lower <= δ_upper:
    # none above the upper end); ε seen with δ_lower <= δ say nothing below them, as a
    # loose bracket there may have δ_lower = 0
    below = [eps for eps, b in seen.items() if eps < feasible and b.lower > delta]
    # from the last feasible ε evaluated (``upper`` is it rounded up: not evaluated)
    # a lower bound that is positive at the feasible end is searched like the upper one,
    # from the loss's scale down (one that is 0 there gives the steps nothing to go by)
    if step is not None and not (0 < step < 0.1 * feasible and bound_at(feasible).lower > 0):
        step = None
    lower, _ = _solve(
        lambda eps: bound_at(eps).lower,
        delta,
        feasible,
        feasible_end=False,
        low=max(below) if below else None,
        first_trial=None if step is None else feasible - step,
        flat_step=step,
    )
    return EpsilonBound(lower=min(lower, upper), upper=upper, method=method)


def _solve(
    delta_of,
    delta: float,
    high: float,
    feasible_end: bool,
    rtol: float = RTOL,
    low: float | None = None,
    first_trial: float | None = None,
    flat_step: float | None = None,
):
    """Bracket [low, high] of δ_of(ε) = δ (δ_of non-increasing, δ_of(high) <= δ); returns
    the feasible end (δ_of <= δ, rounded up 4 ulps) or the infeasible end (δ_of > δ, 0.0
    if none), and the final feasible end as evaluated.

    ``low``: an ε known to have δ_of(low) > δ, if any; otherwise one is looked for below
    ``high`` (from ``first_trial`` if given, else 0.9·high, then secant steps on log δ,
    each at least 5% of the way down), and ε = 0 is tried once the search has come below
    a quarter of ``high``. ``flat_step``: where the secant of two feasible trials points
    below half of ``high`` or nowhere (a staircase's flat step), the next trial is twice
    that far below, the step doubling each time (at most halfway down), rather than
    halfway down at once.
    """
    target = math.log(delta)

    def excess(eps: float) -> float:
        value = delta_of(eps)
        return math.log(value) - target if value > 0 else -math.inf

    f_high = excess(high)
    if low is None:
        start = high
        trial = 0.9 * high if first_trial is None else first_trial
        while True:
            if trial <= 0.25 * start:
                low, f_low = 0.0, excess(0.0)
                if f_low <= 0:
                    return 0.0, 0.0
                break
            f_trial = excess(trial)
            if f_trial > 0:
                low, f_low = trial, f_trial
                break
            # both feasible: extrapolate the secant of log δ to its crossing, overshooting
            previous, f_previous = high, f_high
            high, f_high = trial, f_trial
            slope = (f_previous - f_high) / (previous - high)
            trial = 0.5 * high
            if math.isfinite(slope) and slope < 0:
                guess = high - 1.5 * f_high / slope
                trial = min(0.95 * high, max(guess, trial))
            if trial == 0.5 * high and flat_step is not None and math.isfinite(f_high):
                # the secant says nothing useful (a staircase's flat step): go down from
                # the known scale of the loss, doubling, rather than halfway at once
                flat_step *= 2
                trial = max(high - flat_step, trial)
    else:
        f_low = excess(low)
    side = 0
    for _ in range(200):
        if high - low <= rtol * high + 1e-300:
            break
        if math.isfinite(f_low) and math.isfinite(f_high) and f_low != f_high:
            trial = high - f_high * (high - low) / (f_high - f_low)
            margin = 0.1 * (high - low) if side == 0 else 0.25 * rtol * high
            trial = min(max(trial, low + margin), high - margin)
        elif f_high == -math.inf and high > 1e3 * low:
            # δ = 0 at the high end says nothing of where δ rises (a lower bound's
            # support ends there): search by decades, then geometrically, not by halves
            trial = 1e-2 * high if low == 0 else math.sqrt(low * high)
        else:
            trial = 0.5 * (low + high)
        if not low < trial < high:
            trial = 0.5 * (low + high)
        value = excess(trial)
        if value <= 0:
            high, f_high = trial, value
            if side == 1:
                f_low /= 2
            side = 1
        else:
            low, f_low = trial, value
            if side == -1:
                f_high /= 2
            side = -1
    return (round_up(high) if feasible_end else low), high
