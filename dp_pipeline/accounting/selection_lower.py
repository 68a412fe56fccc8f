"""Lower ends of δ(ε) for compositions with selections, from ε-BR mechanisms themselves.

The composition paths take every selection (ε-bounded-range run) by a dominating pair on
a lattice (`bounded_range`): its δ is above the exact worst case, both the continuous
curve and, for k runs, DDR's adaptive optimum. A lower end computed from that pair is a
lower bound of the discretised pair's δ, not of the worst case, and lay above the worst
case at most ε (one median at ε = 1/2: δ(0.49) 6.56e-5 against an exact 6.32e-5).

Here the lower end comes from mechanisms that are ε-BR themselves, so that their
composition is one the accounted class contains and its δ cannot exceed the worst case
(the supremum over ε-BR mechanisms that the upper end bounds):

- **one selection alone**: δ_BR(x) = (e^{ε/2} - e^{x/2})²/(e^ε - 1) (Dong, Durfee &
  Rogers 2020, §4), attained by the two-point pair B_t at t = (ε - x)/2, evaluated as
  e^x·expm1((ε - x)/2)²/expm1(ε) (no cancellation) and rounded down by its float error;
- **k runs at one ε alone**: the best over a grid of t of δ(B_t^{⊗k}), DDR's
  non-adaptive composition (§5), below their adaptive optimum (§6) that the upper end
  bounds;
- **any plan with selections**: the same plan with each ε-BR run replaced by B_{ε/2},
  whose losses ±ε/2 (P-mass e^{ε/2}/(1 + e^{ε/2}) on +ε/2) are randomized response at
  ε/2: an ε-BR mechanism (its loss range is ε), composed non-adaptively with the other
  events exactly as recorded. Its δ is a rigorous lower end, taken from one exact engine
  (the MGF inversion, else the finite-support composition: `twin_lower`).

The lower end is the larger of these where both apply; it is never taken from the
dominating lattice. It is a true lower bound but can be loose (B_{ε/2} is the worst pair
at x = 0 only; for x near kε the worst t is smaller): the gap says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.bounded_range import bounded_range_epsilon_of
from dp_pipeline.accounting.bounds import DeltaBound
from dp_pipeline.accounting.brackets import inversion_delta
from dp_pipeline.accounting.events import PrivacyEvent, PureDP
from dp_pipeline.accounting.outward import round_down
from dp_pipeline.accounting.paths import fft_composition, inversion_of
from dp_pipeline.accounting.support_composition import support_loss

__all__ = ["selection_twin", "single_selection_lower", "twin_lower", "with_selection_lower"]

_U = 2.0**-53
_T_GRID = 64  # pairs B_t tried for k runs of one ε alone, t = ε·j/64
_MAX_RUNS = 4096  # beyond, the twin alone gives the lower end (the sums cost k each)


def selection_twin(events: Sequence[PrivacyEvent]) -> list[PrivacyEvent] | None:
    """``events`` with every ε-BR run replaced by randomized response at ε/2 (the ε-BR pair
    B_{ε/2}; ε/2 rounded down to a float), or None if there is no selection."""
    twin, found = [], False
    for event in events:
        epsilon = bounded_range_epsilon_of(event.mechanism)
        if epsilon is None:
            twin.append(event)
            continue
        found = True
        # a float at most ε/2: the paths read pure ε as a float, and an RR(ε') with
        # ε' <= ε/2 is ε-BR too, where one rounded up would not be
        half = float(Fraction(epsilon) / 2)
        if Fraction(half) > Fraction(epsilon) / 2:
            half = math.nextafter(half, 0.0)
        twin.append(PrivacyEvent(PureDP(Fraction(half)), (1,), event.count))
    return twin if found else None


def twin_lower(twin: Sequence[PrivacyEvent]) -> Callable[[float], float] | None:
    """ε -> a rigorous lower end of the twin plan's δ(ε) from one exact engine, none of the
    fallbacks a tight upper end needs: its MGF inversion (with a smooth discrete Gaussian),
    else its exact finite-support composition when small, else its FFT path, else None.
    A loose inversion only gives a smaller lower end."""
    candidates = inversion_of(twin)
    if candidates:
        bracket = inversion_delta(candidates)
        return lambda epsilon: bracket(epsilon).lower
    exact = support_loss(twin)
    if exact is not None:
        return lambda epsilon: exact.delta_bound(epsilon).lower
    fft = fft_composition(twin)  # the lattice FFTs or the grid PLD: rigorous lower ends
    if fft is not None:
        return lambda epsilon: fft[0](epsilon).lower
    return None


def single_selection_lower(events: Sequence[PrivacyEvent]) -> Callable[[float], float] | None:
    """x -> a float <= the worst-case δ(x) of a plan of selections at one ε alone (module
    docstring: the closed form for one run, the best of `_T_GRID` two-point pairs B_t run
    k times for k runs), else None."""
    values = {bounded_range_epsilon_of(event.mechanism) for event in events}
    if len(values) != 1 or None in values:
        return None
    value = values.pop()
    runs = sum(event.count for event in events)
    epsilon = float(value)
    # the float ε may exceed the exact one by half an ulp: use the one below it (an
    # ε'-BR mechanism with ε' <= ε is ε-BR)
    if Fraction(epsilon) > value:
        epsilon = math.nextafter(epsilon, 0.0)
    if runs == 1:
        return lambda x: _one_run_lower(epsilon, x)
    if runs > _MAX_RUNS:
        return None
    return lambda x: _binomial_lower(epsilon, runs, x)


def _one_run_lower(epsilon: float, x: float) -> float:
    """A float <= δ_BR(x) (module docstring)."""
    if x >= epsilon:
        return 0.0
    if x <= -epsilon:
        return round_down(-math.expm1(x) * (1 - 4 * _U), 1)
    # ε - x rounded down (δ_BR falls with x): a smaller gap only lowers the value
    gap = epsilon - x
    if Fraction(gap) > Fraction(epsilon) - Fraction(x):
        gap = math.nextafter(gap, 0.0)
    root = math.expm1(gap / 2)  # gap/2 is exact; expm1 and each later step err by u
    value = math.exp(x) * root * root / math.expm1(epsilon)
    return round_down(value * (1 - 16 * _U), 2)  # 2 ulps: among subnormals too


def _binomial_lower(epsilon: float, runs: int, x: float) -> float:
    """A float <= max over t = ε·j/`_T_GRID` of δ(B_t^{⊗k})(x), DDR's non-adaptive
    composition (each B_t^{⊗k} is k runs of an ε-BR mechanism, so each is below the
    worst case). With i runs on the low loss -t: L_i = (k - i)ε - kt, P-mass
    C(k, i)·p^{k-i}(1 - p)^i, p = p_t = (e^ε - e^{ε-t})/(e^ε - 1). δ grows with p (mass
    moves to higher losses), so p is taken rounded down; each gap L_i - x is lowered by
    its float error; the masses' float error (their logs' u per operation, exp's, the
    sum's) is charged before the sum is rounded down."""
    k = runs
    i = np.arange(k + 1, dtype=np.float64)
    log_factorial = math.lgamma(k + 1)
    log_binomial = np.array(
        [math.lgamma(k + 1) - math.lgamma(j + 1) - math.lgamma(k - j + 1) for j in range(k + 1)]
    )
    best = 0.0
    expm1_eps = math.expm1(epsilon)
    for j in range(1, _T_GRID):
        t = epsilon * j / _T_GRID
        p = -math.expm1(-t) * math.exp(epsilon) / expm1_eps * (1 - 8 * _U)
        if not 0 < p < 1:
            continue
        losses = (k - i) * epsilon - k * t
        gaps = losses - x
        gaps -= 8 * _U * (np.abs(losses) + abs(x) + k * epsilon + 1)  # float error, lowered
        above = gaps > 0
        if not above.any():
            continue
        log_mass = log_binomial + (k - i) * math.log(p) + i * math.log1p(-p)
        terms = np.exp(log_mass[above]) * -np.expm1(-gaps[above])
        total = float(np.sum(terms))
        # each log mass errs by u per operation on magnitudes up to 3·log k! + k·|log p|
        # + k·|log(1 - p)|; exp, expm1, the product and the sum add (k + 10)u
        log_error = 4 * _U * (3 * log_factorial + k * (abs(math.log(p)) + abs(math.log1p(-p))) + 1)
        relative = 1.01 * (math.expm1(log_error) + (k + 10) * _U)
        best = max(best, total * (1 - relative))
    return round_down(best, 2 * (k + 1))  # a term among subnormals: one unit each


def with_selection_lower(
    delta_of: Callable[..., DeltaBound],
    twin: Callable[[], Callable[[float], float] | None],
    alone: Callable[[float], float] | None,
) -> Callable[..., DeltaBound]:
    """``delta_of`` (a `DeltaPath`) with its lower end replaced by the
    larger of the twin's (``twin()`` gives `twin_lower`'s function, built on first use)
    and the closed form's (module docstring), kept <= the upper end; the upper end and the
    method are ``delta_of``'s. Given ``decide`` (a δ the caller only compares with,
    `epsilon_search`), the lower end matters only where the upper end is above it: the
    twin is not evaluated where the upper end is at most ``decide``."""

    def bounded(epsilon: float, decide: float | None = None) -> DeltaBound:
        bound = delta_of(epsilon, decide=decide)
        lower = 0.0 if alone is None else alone(epsilon)
        needed = decide is None or (bound.upper > decide and not lower > decide)
        if needed:
            twin_of = twin()
            if twin_of is not None:
                lower = max(lower, twin_of(epsilon))
        return DeltaBound.clipped(lower, bound.upper, bound.method, bound.capped)

    return bounded
