"""Exact composition of finite-support privacy losses on their rational lattice ("support_exact").

A discrete Laplace of scale b with shift Δ has the loss -Δ/b + (2/b)·K, K = 0..Δ; pure
ε₀-DP has its randomized response, -ε₀ + 2ε₀·K, K in {0, 1}; a selection (ε-bounded
range) its dominating lattice, -ε + (2ε/256)·K for a single run at its ε
(`bounded_range`), the measure of DDR's adaptive block -kε + (ε/cells)·K for k runs
(`bounded_range_adaptive`, every block of `bounded_range.adaptive_blocks`); a discrete Gaussian
N_Z(0, σ²) with shift μ has μ²/(2σ²) + (μ/σ²)·y, kept here for |y| <= R = ⌈39σ⌉ + 2 (the
mass beyond, < e^{-760}, is a dropped mass). Every offset and step is an exact rational,
so the composed loss is C + γ·w exactly, with C the sum of the offsets, γ the rational gcd
of the steps and w an integer. Its pmf is computed by direct convolution: outer products
of non-negative masses merged by exact integer position, never an FFT, so each computed
mass is within a relative error R of its exact value (plus an absolute underflow term A)
whatever its size, and δ keeps its relative precision down to the float range.

A selection's ε is a dyadic rational with a large numerator, so its lattice and another
event's (a Laplace's 2/b, a Gaussian's μ/σ², another ε's) rarely share a step that keeps
the positions within int64. Then each selection's offset and step are rounded UP to
multiples of a grid g (the others' gcd halved until g <= step/2^20): the loss o + s·K
becomes o' + s'·K with o' >= o and s' >= s, so every loss moves up (by at most
(K + 1)·g, under 1/100 of a cell s for the at most 8193 points of a block) with its
P-mass. The δ computed here,
Σ m_w (1 - e^{ε - L_w})_+ over the product of the P-measures, only grows when any loss
grows, and before the rounding it bounds every adaptive composition (the symmetric
dominating pairs of `bounded_range`; the product of the blocks' measures,
`bounded_range_adaptive`), so the rounded composition bounds it too (its lower bound is
that of the rounded measure). Two selections' blocks at different ε on that grid rarely
share a step either: their product support (~10^7 points for two blocks of a few runs)
is then over the point cap, and the accountant takes the lattice FFT or the grid PLD;
selections at 2-4 distinct ε that form one joint block (`bounded_range_joint`) enter as
one measure on one rational lattice.

Error budget (every term a bound, charged in `SupportLoss.delta_bound`):

- inputs: each discrete Laplace mass within 4(Δ + 4)·u of itself (the budget of
  `discrete_laplace_loss_pmf`), a single selection's within `bounded_range.mass_error`,
  an adaptive block's exact (the float measure is the certified object), the
  randomized response's 1/(1 + e^{∓ε₀}) within 2u, each
  discrete Gaussian mass e^{-y²/(2σ²)}/Z within 8u·(max y²/(2σ²) + 2) + 2(2R + 1)·u
  (the exponent's error and the direct sum Z); u = 2^-53;
- a merge of two pmfs: a product of two masses is one rounding and the k <= min(n_a, n_b)
  products landing on one position are summed (in any order: exact zeros of a dense
  layout add nothing, exactly), all terms non-negative, so the
  result is within R_a + R_b + (k + 1)·u of its exact value (first order, rounded up
  by a factor 1 + 1e-6); a product below the normal range errs by at most 2^-1074 more,
  charged to A;
- masses below 2^-1000 after a merge are pruned: their total is dropped mass D, as are
  the discrete Gaussians' tails; the kept part is a sub-probability measure whose
  δ-contribution is at most the true one, and the dropped outcomes add at most D;
- δ(ε) = Σ_{w > w*} m_w·(1 - e^{-t_w}) with w* = (ε - C)/γ decided in exact rationals and
  t_w = γ·(f + j) formed from positive floats (f the exact first gap in units of γ, j an
  integer) within 3u, so each factor is within 6u (condition number <= 1), and numpy's
  pairwise sum adds (log2 n + 20)·u (`_summed`): lower = S·(1 - R') - A,
  upper = S·(1 + R') + A + D with R' = R + `_summed`(n). Near
  δ = 1 the complement 1 - δ = E[min(1, e^{ε-L})] gives the sharper lower bound.

The composition is built only while it stays small (`support_merge`: 2^23 products per merge,
`_MAX_POINTS` distinct losses, positions within int64): otherwise `support_loss` returns
None and the accountant takes its other paths. The copies of one component are merged
on its own lattice and every merge is binned on the gcd of its gaps (dense where the
positions share a step: one direct convolution where both sides are dense on it, else
rows of one side's dense copies by the other's residues modulo its step); the work and
sizes are predicted from the supports before any merge, so a composition far over the
caps is refused at once (only the time changes: the masses are the same sums, up to
their order, within the budget above).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.bounded_range import (
    adaptive_blocks,
    block_measure,
    block_points,
)
from dp_pipeline.accounting.bounds import DeltaBound, Method
from dp_pipeline.accounting.discrete_laplace import discrete_laplace_loss_pmf
from dp_pipeline.accounting.events import pure_epsilon_of, randomized_response_masses
from dp_pipeline.accounting.families import Family, family_of
from dp_pipeline.accounting.lattice import fraction_gcd
from dp_pipeline.accounting.support_merge import (
    Budget,
    Pmf,
    TooLargeError,
    errors,
    merge,
    self_power,
)

__all__ = ["METHOD", "SupportLoss", "gaussian_masses", "support_loss"]

METHOD = Method.SUPPORT_EXACT.value
_U = 2.0**-53
_TINY = 2.0**-1074
_PRUNE = 2.0**-1000
_MAX_POINTS = 1 << 20  # distinct losses kept after a merge
_MAX_WORK = 1 << 24  # products over the whole composition (time: about 0.4 s)
_MAX_GAUSSIAN_POINTS = 4096  # a discrete Gaussian's support: 2⌈39σ⌉ + 5 points (σ² <= ~2700)
_MAX_POSITION = 1 << 62
_SELECTION_GRID = 1 << 20  # a selection's lattice step rounded up to 1/this of itself


@dataclass(frozen=True)
class _Part:
    offset: Fraction
    step: Fraction
    ks: np.ndarray  # int64 values of K
    masses: np.ndarray
    relative: float
    dropped: float
    count: int
    absolute: float = 0.0  # a mass error not relative to the mass itself
    gaussian: bool = False  # the copies' pruned support grows as √count, not as count


def _laplace_part(scale: Fraction, shift: int, count: int) -> _Part:
    values, masses = discrete_laplace_loss_pmf(scale, shift)
    return _Part(
        -Fraction(shift) / scale,
        2 / scale,
        np.asarray(values, dtype=np.int64),
        np.asarray(masses, dtype=np.float64),
        4 * (shift + 4) * _U,
        0.0,
        count,
    )


def _pure_part(epsilon0: Fraction, count: int) -> _Part:
    low, high = randomized_response_masses(float(epsilon0))
    # past ε₀ = 700 the small mass (< e^{-700}) is 0: an absolute error on both masses
    absolute = 2 * math.exp(-700) if low == 0 else 0.0
    return _Part(
        -epsilon0,
        2 * epsilon0,
        np.array([0, 1]),
        np.array([low, high]),
        2 * _U,
        0.0,
        count,
        absolute,
    )


def gaussian_masses(
    sigma2: Fraction, prune: float = _PRUNE
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The masses of N_Z(0, σ²) for |y| <= ⌈39σ⌉ + 2 that are >= ``prune`` (contiguous y):
    (ys, masses, relative error of each mass, dropped mass), the budget of the module
    docstring (the truncated and pruned tails are the dropped mass). With ``prune`` below
    the normal range, a kept mass may also err by 2^-1074 absolute (for the caller)."""
    s2 = float(sigma2)
    limit = math.ceil(39 * math.sqrt(s2)) + 2
    ys = np.arange(-limit, limit + 1, dtype=np.int64)
    log_weights = -(ys.astype(np.float64) ** 2) / (2 * s2)
    weights = np.exp(log_weights)
    total = math.fsum(weights)  # Z minus its tail, which is below e^{-760}·Z
    masses = weights / total
    # Σ_{|y| > R} e^{-y²/(2σ²)} <= 2 e^{-(R+1)²/(2σ²)} / (1 - e^{-(2R+3)/(2σ²)}), and Z >= 1
    dropped = (
        2 * math.exp(-((limit + 1) ** 2) / (2 * s2)) / -math.expm1(-(2 * limit + 3) / (2 * s2))
    )
    # the masses divide by the truncated Z, larger than the exact ratio by at most
    # dropped/Z <= dropped: a relative error, charged with the float errors
    relative = 8 * _U * (float(np.max(-log_weights)) + 2) + 2 * len(ys) * _U + dropped
    keep = masses >= prune
    dropped += float(math.fsum(masses[~keep])) * (1 + relative) + _TINY * len(ys)
    return ys[keep], masses[keep], relative, dropped


def _gaussian_part(sigma2: Fraction, shift: int, count: int, prune: float) -> _Part:
    ys, masses, relative, dropped = gaussian_masses(sigma2, prune)
    return _Part(
        Fraction(shift * shift) / (2 * sigma2),
        Fraction(shift) / sigma2,
        ys,
        masses,
        relative,
        dropped,
        count,
        _TINY * len(ys) if prune < 2.0**-1022 else 0.0,  # subnormal masses: absolute
        gaussian=True,
    )


def _parts(events, max_gaussian_points: int, prune: float) -> list[_Part] | None:
    counts: Counter = Counter()
    selections = False
    for event in events:
        mechanism = event.mechanism
        family = family_of(mechanism)
        if family is Family.SELECTION:
            selections = True  # every selection at once, in its ε's blocks (below)
            continue
        if family is Family.DISCRETE_GAUSSIAN:
            if 2 * math.ceil(39 * math.sqrt(float(mechanism.sigma2))) + 5 > max_gaussian_points:
                return None
            kind, value = "dg", mechanism.sigma2
        elif family is Family.DISCRETE_LAPLACE:
            kind, value = "dl", mechanism.scale
        elif family is Family.PMF_PAIR:
            return None  # float losses log(p/q): not on an exact lattice
        else:
            pure = pure_epsilon_of(mechanism)
            if pure is None:
                return None
            if pure > 0:
                counts[("rr", Fraction(pure), 1)] += event.count
            continue
        for shift in event.sensitivity:
            if shift:
                counts[(kind, value, shift)] += event.count
    parts = []
    for (kind, value, shift), count in counts.items():
        if kind == "dg":
            parts.append(_gaussian_part(value, shift, count, prune))
        elif kind == "dl":
            if shift + 1 > _MAX_POINTS:
                return None
            parts.append(_laplace_part(value, shift, count))
        else:
            parts.append(_pure_part(value, count))
    if selections:
        # selections at several ε share no lattice: their supports multiply (checked
        # before any measure is built; a calibration asks again at every candidate ε)
        spans: dict = {}
        for epsilon, runs, copies in adaptive_blocks(events):
            spans[epsilon] = spans.get(epsilon, 0) + copies * block_points(epsilon, runs)
        if math.prod(span + 1 for span in spans.values()) > 4 * _MAX_POINTS:
            return None
        parts.extend(_selection_parts(events, parts))
    return parts or None


def _selection_parts(events, others: list[_Part]) -> list[_Part]:
    """The selections' blocks (`bounded_range.adaptive_blocks`): each its dominating
    measure on its own rational lattice, or, when the common lattice with the ``others``
    would leave int64, with offset and step rounded UP to multiples of a grid g
    (module docstring)."""
    raw = []
    for epsilon, runs, copies in adaptive_blocks(events):
        # an adaptive or joint block's measure is the float masses themselves (relative 0)
        offset, step, masses, relative = block_measure(epsilon, runs)
        raw.append((offset, step, masses, relative, copies))
    steps = [p.step for p in others] + [r[1] for r in raw]
    gamma = fraction_gcd(steps)
    reach = sum(p.count * (p.step / gamma) * int(np.max(np.abs(p.ks))) for p in others)
    reach += sum(r[4] * (r[1] / gamma) * (len(r[2]) - 1) for r in raw)
    grid = None
    if reach >= _MAX_POSITION // 4:
        finest = min(r[1] for r in raw)
        grid = fraction_gcd([p.step for p in others]) if others else finest
        while grid > finest / _SELECTION_GRID:
            grid /= 2
    parts = []
    for offset, step, masses, relative, copies in raw:
        if grid is not None:  # losses only move up: δ only grows (module docstring)
            offset = math.ceil(offset / grid) * grid
            step = math.ceil(step / grid) * grid
        ks = np.arange(len(masses), dtype=np.int64)
        keep = masses > 0
        parts.append(_Part(offset, step, ks[keep], np.asarray(masses)[keep], relative, 0.0, copies))
    return parts


def _predicted_work(parts: list[_Part], multipliers: list[int], sparse_weight: int) -> float:
    """The work `support_loss` would charge, predicted from the supports' sizes and spans
    alone (no pruning: an over-estimate of the merged sizes), so that a composition far
    over its budget is refused before any merge (merges by sorting are the slow ones);
    infinite when its final size is predicted over 4x the point cap (`_predicted_points`:
    such a composition would fail that cap only after its sorts)."""
    work = 0.0
    sizes = []  # (points, span in units of γ, a lattice step of the positions)
    for part, n in zip(parts, multipliers, strict=True):
        points, span = len(part.ks), int(part.ks[-1] - part.ks[0])
        total_points, total_span = points, span
        for _ in range(part.count - 1):  # dense merges on the part's own lattice
            work += total_points * points
            total_span += span
            total_points = min(total_points * points, total_span + 1)
        sizes.append((total_points, total_span * n, n))
    while len(sizes) > 1:
        sizes.sort()
        (a, span_a, step_a), (b, span_b, step_b) = sizes[0], sizes[1]
        step = math.gcd(step_a, step_b) or 1
        span = span_a + span_b
        count = a * b
        separate = a == 1 or b == 1 or step_b > span_a or step_a > span_b
        sparse = not separate and span // step > 4 * count + 1024
        work += count * (sparse_weight if sparse else 1)
        sizes = [(min(count, span // step + 1), span, step), *sizes[2:]]
    if _predicted_points(parts, multipliers) > 4 * _MAX_POINTS:
        return math.inf
    return work


def _predicted_points(parts: list[_Part], multipliers: list[int]) -> float:
    """An estimate of the composition's kept points: each part's copies an arithmetic
    progression (step n, their pruned length: a discrete Gaussian's grows as √count),
    two progressions joined into one of step gcd where that is shorter than their
    product, and the product of the lengths that remain."""
    progressions: list[tuple[int, int]] = []  # (step, length)
    for part, n in zip(parts, multipliers, strict=True):
        length = len(part.ks)
        total = part.count * (length - 1) + 1
        if part.gaussian:  # its tails are pruned
            total = min(total, math.ceil(math.sqrt(part.count) * length) + 2)
        step, best = n, None
        for index, (other_step, other_length) in enumerate(progressions):
            common = math.gcd(step, other_step)
            joined = (step * (total - 1) + other_step * (other_length - 1)) // common + 1
            if joined < total * other_length and (best is None or joined < best[1]):
                best = (index, joined, common)
        if best is None:
            progressions.append((step, total))
        else:
            index, joined, common = best
            progressions[index] = (common, joined)
    points = 1.0
    for _, length in progressions:
        points *= length
    return points


@dataclass(frozen=True)
class SupportLoss:
    """The exact composed loss C + γ·w: masses at increasing integers w (module docstring)."""

    positions: np.ndarray
    masses: np.ndarray
    gamma: Fraction
    offset: Fraction
    relative: float
    absolute: float
    dropped: float

    @property
    def _top(self) -> int:
        return int(self.positions[-1])

    def delta_bound(self, epsilon: float, method: str = METHOD) -> DeltaBound:
        """Rigorous (lower, upper) on δ(ε) (error budget in the module docstring)."""
        threshold = (Fraction(epsilon) - self.offset) / self.gamma  # L_w > ε iff w > this
        # the first w above ε, kept within the support (w are int64; ε may be far outside)
        first = min(max(math.floor(threshold) + 1, int(self.positions[0])), self._top + 1)
        start = int(np.searchsorted(self.positions, first, side="left"))
        masses = self.masses[start:]
        gap = float(Fraction(first) - threshold)  # in (0, 1], exact then rounded
        t = float(self.gamma) * (gap + (self.positions[start:] - first).astype(np.float64))
        total = float(np.sum(masses * -np.expm1(-t)))
        relative = self.relative + _summed(len(masses))
        lower = max(0.0, total * (1 - relative) - self.absolute)
        upper = min(1.0, total * (1 + relative) + self.absolute + self.dropped)
        if total > 0.5:  # 1 - δ = E[min(1, e^{ε-L})]: the kept masses' share, plus D
            complement = float(np.sum(self.masses[:start])) + float(np.sum(masses * np.exp(-t)))
            complement = complement * (1 + relative) + self.absolute + self.dropped
            lower = max(lower, math.nextafter(1.0 - complement, 0.0))
        return DeltaBound(lower=min(lower, upper), upper=upper, method=method)


def _summed(n: int) -> float:
    """Relative error of S from n non-negative terms: each term within 6u (module docstring),
    and numpy's pairwise sum adds at most 16 sequential additions per block of 128 terms
    and one per halving above it, (log2 n + 20)·u; charged with a factor 2 to spare."""
    return 6 * _U + 2 * (math.log2(max(n, 2)) + 20) * _U


def support_loss(
    events,
    max_gaussian_points: int = _MAX_GAUSSIAN_POINTS,
    prune: float = _PRUNE,
    max_work: int = _MAX_WORK,
    sparse_weight: int = 1,
) -> SupportLoss | None:
    """The exact composition of ``events`` (`PrivacyEvent` values), or None when some
    event has no exact finite lattice support here (a discrete Gaussian's over
    ``max_gaussian_points``) or the composition is too large (over ``max_work``
    products in all, a product merged by sorting counted ``sparse_weight`` times).
    Masses below ``prune`` are dropped (their total is charged to the upper bound)."""
    parts = _parts(events, max_gaussian_points, prune)
    if parts is None:
        return None
    gamma = fraction_gcd([p.step for p in parts])
    offset = sum((p.count * p.offset for p in parts), Fraction(0))
    reach = 0
    multipliers = []
    for part in parts:
        multiplier = part.step / gamma
        n = multiplier.numerator  # an integer: γ divides every step
        reach += part.count * n * int(np.max(np.abs(part.ks)))
        if reach >= _MAX_POSITION or len(part.ks) == 0:
            return None
        multipliers.append(n)
    if _predicted_work(parts, multipliers, sparse_weight) > 2 * max_work:
        return None
    budget = Budget(prune, max_work, sparse_weight)
    try:
        powers = []
        for part, n in zip(parts, multipliers, strict=True):
            # the copies of one part on its own lattice (K), dense, then scaled to γ
            pmf = Pmf(part.ks, part.masses, part.relative, part.absolute, part.dropped)
            power = self_power(pmf, part.count, budget)
            powers.append(Pmf(power.positions * n, power.masses, *errors(power)))
        while len(powers) > 1:  # the two smallest first: intermediate supports stay small
            powers.sort(key=lambda p: len(p.masses))
            powers = [merge(powers[0], powers[1], budget), *powers[2:]]
    except TooLargeError:
        return None
    (result,) = powers  # every copy's dropped mass was added once per merge it entered
    return SupportLoss(
        positions=result.positions,
        masses=result.masses,
        gamma=gamma,
        offset=offset,
        relative=result.relative,
        absolute=result.absolute,
        dropped=result.dropped,
    )
