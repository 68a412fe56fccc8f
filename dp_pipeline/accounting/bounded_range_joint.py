"""Selections at several ε composed by one joint adaptive recursion over all their runs.

A release's selections may run at several ε (k_b runs of an ε_b-BR mechanism for each
b), interleaved in an order the release chooses, possibly from earlier outputs. This
module bounds every such adaptive composition by one recursion over the runs left of
each ε, instead of the product of one block per ε (`bounded_range_adaptive`, "Blocks at
several ε"), which lies 4-20% above the best interleaved strategy in δ for two runs at
ε = 1/2 and two at 1/5.

**The recursion** (hockey-stick form). For a vector a of runs left of each ε write U_a(x)
for the supremum of H_{e^x}(P‖Q) over all adaptive compositions of a_b ε_b-BR
mechanisms for every b, in any order, the order and each mechanism chosen from the
outputs so far. Then U_0(x) = (1 - e^x)_+ and

    U_a(x) <= max_{b: a_b > 0} T_{ε_b} U_{a - e_b}(x),
    T_ε W(x) = sup_{t ∈ [0, ε]} p_t W(x - ε + t) + (1 - p_t) W(x + t),

p_t = (e^ε - e^{ε-t})/(e^ε - 1) (DDR's two-point pair B_t). Proof, by induction on the
runs: the first run is at some ε_b (a data-independent choice; a randomized choice is a
mixture with data-independent weights, and H is jointly convex, so it is at most the
largest term); conditioning on its output o, the rest is an adaptive composition with
a - e_b runs left for each o, so H <= E_P[U_{a-e_b}(x - L_1)] <= T_{ε_b} U_{a-e_b}(x) by
DDR's argument for one step (`bounded_range_adaptive`, "The recursion": the convex φ of a
curve convex in α is largest on the two ends of the loss range, Dong, Durfee & Rogers
2020, Section 6). U_{a-e_b} is convex in α = e^x (a supremum of hockey-stick curves), as
every T_ε of a convex curve and every maximum of them are. The maximum over b at each x
covers every order, fixed or chosen adaptively, so the bound holds for any order the
release uses; for one ε it is DDR's recursion itself. An ε-BR mechanism is ε'-BR for
every ε' >= ε, so each ε_b may be raised to a lattice multiple ε'_b = n_b·h.

**Every float step charged.** On the lattice x_i = -K·h + i·h, K >= Σ k_b n_b, each T_ε is
the step of `bounded_range_adaptive` with ε = n·h (t on the same lattice, each t-cell
bounded in closed form, every weight and result raised by its float error), evaluated
for all states of one level at once; the maximum over b is exact. The lattice h and the
n_b are chosen (`joint_lattice`) to keep each raise ε'_b/ε_b - 1 small (a selection's ε
is a dyadic rational near the user's ε, so their ratios lie near small rationals) and
the estimated work within `WORK_BUDGET` (the states number Π(k_b + 1)).

**A dominating pair.** The upper bounds at the lattice points turn into P-masses μ with
D_μ >= U_k everywhere exactly as one block's (`bounded_range_adaptive.dominating_masses`),
and that measure composes with every other event of a release by the argument of
`bounded_range_adaptive` (draw the other events' dominating pairs first; the selections
then form an adaptive composition for each of their values). The family is closed under
exchanging the neighbours (t -> ε - t), so the same μ serves both directions.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.bounded_range_adaptive import MAX_RUNS, dominating_masses
from dp_pipeline.accounting.recursion_slack import STEP_SLACK, TINY, UNIT, WEIGHT_SLACK
from dp_pipeline.errors import DPValueError

__all__ = ["joint_cells", "joint_lattice", "joint_pair", "joint_recursion"]

MAX_GROUPS = 4  # distinct ε of one joint recursion at most
MAX_STATES = 4096  # states (runs left of each ε) at most
MAX_POINTS = 4097  # lattice points of the joint curve at most
MAX_CELLS = 512  # cells per ε at most
MIN_CELLS = 4  # cells of the smallest ε at least
WORK_BUDGET = 3.6e7  # estimated multiply-adds of the recursion (~0.35 s CPU)
MAX_EXCESS = 1.5e-2  # estimated relative excess in ε of the joint curve at most
SLACK = 1e-3  # the cheapest lattice within this much estimated excess of the least


def _half(counts: Sequence[int], cells: Sequence[int]) -> int:
    """K: the lattice spans -K·step..K·step, Σ k_b·cells_b rounded up to a multiple of 16
    (the curve is 0 above Σ k_b·ε'_b; 2K keeps divisors for the strided pairs)."""
    total = sum(k * n for k, n in zip(counts, cells, strict=True))
    return -(-total // 16) * 16


def _work(cells: Sequence[int], counts: Sequence[int]) -> float:
    """The recursion's multiply-adds, about: per state and ε with runs left, (cells + 1)
    times half the lattice (a level's states reach a part of it)."""
    points = 2 * _half(counts, cells) + 1
    states = math.prod(k + 1 for k in counts)
    rows = sum((n + 1) * k / (k + 1) for k, n in zip(counts, cells, strict=True))
    return states * rows * points / 2


def _excess(
    epsilons: Sequence[float], counts: Sequence[int], cells: Sequence[int], step: float
) -> float:
    """The estimated relative excess in ε of the joint curve: each ε raised to its lattice
    multiple (weighted by k·ε²) and the lattice's discretisation (measured: about
    0.1/cells for the smallest ε's cells)."""
    weights = [k * e * e for e, k in zip(epsilons, counts, strict=True)]
    raised = sum(
        w * (n * step / e - 1) for w, e, n in zip(weights, epsilons, cells, strict=True)
    ) / sum(weights)
    return raised + 0.1 / min(cells)


@functools.lru_cache(maxsize=64)
def joint_lattice(
    groups: tuple[tuple[Fraction, int], ...],
) -> tuple[Fraction, tuple[int, ...]] | None:
    """(step, cells) of the joint recursion of ``groups`` ((ε, runs) pairs, ε increasing,
    at least two): each ε raised to cells_b·step >= ε_b (an ε-BR mechanism is ε'-BR for
    every ε' >= ε): the cheapest (`_work`) within `SLACK` of the least estimated excess
    (`_excess`) within the work and size budgets; None when no lattice fits or the excess
    exceeds `MAX_EXCESS`."""
    epsilons = [float(e) for e, _ in groups]
    counts = [k for _, k in groups]
    if (
        not 2 <= len(groups) <= MAX_GROUPS
        or math.prod(k + 1 for k in counts) > MAX_STATES
        or sum(counts) > MAX_RUNS
    ):
        return None
    found: list[tuple[float, float, list[int]]] = []
    for eps in epsilons:
        for n in range(1, MAX_CELLS + 1):
            h = eps / n
            cells = [math.ceil(e / h * (1 - 1e-12)) for e in epsilons]
            h = max(e / c for e, c in zip(epsilons, cells, strict=True))
            if min(cells) < MIN_CELLS:
                continue
            if (
                max(cells) > MAX_CELLS
                or 2 * _half(counts, cells) + 1 > MAX_POINTS
                or _work(cells, counts) > WORK_BUDGET
            ):
                break
            found.append((_excess(epsilons, counts, cells, h), _work(cells, counts), cells))
    if not found or min(found)[0] > MAX_EXCESS:
        return None
    # the cheapest lattice within `SLACK` of the least estimated excess
    least = min(found)[0]
    best = min((work, score, cells) for score, work, cells in found if score <= least + SLACK)
    exact = [e for e, _ in groups]
    step = max(e / c for e, c in zip(exact, best[2], strict=True))
    return step, tuple(math.ceil(e / step) for e in exact)


def _step(
    cur: np.ndarray,
    pad: int,
    n: int,
    eps: float,
    h: float,
    low: int,
    high: int,
    live: np.ndarray,
    lower: bool,
) -> np.ndarray:
    """T_ε of the extended curves ``cur`` (one per row, ``pad`` cells each side) at the
    lattice indices low..high-1, for one run at ε = n·h; ``live[s]``: the first index of
    row s where the new curve is 0 (module docstring). The step of
    `bounded_range_adaptive` with every float error charged the same way, one t-cell at a
    time (arrays of one row per state stay in cache)."""
    m = n
    local = cur[:, pad - m + low : pad + high + m]
    size = high - low
    t = np.arange(m + 1, dtype=np.float64) * h
    one_minus_e = -math.expm1(-eps)
    p = -np.expm1(-t) / one_minus_e
    q = -np.expm1(-(eps - t)) * np.exp(-t) / one_minus_e
    if not lower:
        # the weights raised by their error and by the 4 ulps of the sum's rounding
        p, q = p * (WEIGHT_SLACK * (1 + 4 * UNIT)), q * (WEIGHT_SLACK * (1 + 4 * UNIT))
        u0 = math.exp(-h)
        width = (1 - u0) / (4 * u0) * WEIGHT_SLACK**3
        coef_a = 1 / one_minus_e * WEIGHT_SLACK
        coef_b = math.exp(-eps) / one_minus_e * WEIGHT_SLACK
        drop = local[:, :-1] - local[:, 1:]
        span = drop.shape[1] - m
        excess = np.maximum(coef_a * drop[:, :span] - coef_b * drop[:, m:], 0.0)
        excess += 8 * UNIT * (coef_a * local[:, :span] + coef_b * local[:, m:-1])
        excess *= width
    rows = local.shape[0]
    best = np.zeros((rows, size))
    ends = np.empty((rows, size))
    previous = np.empty((rows, size))
    scratch = np.empty((rows, size))
    for r in range(m + 1):
        np.multiply(local[:, r : r + size], p[r], out=ends)
        np.multiply(local[:, m + r : m + r + size], q[r], out=scratch)
        ends += scratch
        if lower:
            np.maximum(best, ends, out=best)
        elif r:
            # the cell [r - 1, r]: the larger end plus its 1/u-below-chord term
            np.maximum(previous, ends, out=scratch)
            scratch += excess[:, r - 1 : r - 1 + size]
            np.maximum(best, scratch, out=best)
        ends, previous = previous, ends
    if lower:
        return best
    best *= STEP_SLACK
    positive = np.arange(low, high)[None, :] < np.asarray(live)[:, None]
    best = np.where(positive, np.maximum(best, TINY), best)
    return np.minimum(best, 1.0)


@functools.lru_cache(maxsize=16)
def joint_recursion(
    groups: tuple[tuple[Fraction, int], ...],
    step: Fraction,
    cells: tuple[int, ...],
    lower: bool = False,
) -> np.ndarray:
    """Ū_k on the lattice x_i = -K·step + i·step, i = 0..2K, K >= Σ k_b·cells_b (`_half`;
    read-only):
    an upper bound of the optimal adaptive curve of the runs ``groups`` ((ε_b, k_b) pairs,
    each ε_b <= cells_b·step) in any order at every point (module docstring); with
    ``lower`` the recursion over lattice t at ε'_b = cells_b·step (an adaptive strategy's
    value at the raised ε, up to float rounding: a reference, not a lower bound at ε_b)."""
    if any(e > n * step for (e, _), n in zip(groups, cells, strict=True)):
        raise DPValueError("each epsilon must lie at or below its cells times the step")
    counts = [k for _, k in groups]
    h = float(step)
    K = _half(counts, cells)
    total = 2 * K + 1
    pad = max(cells)
    offsets = np.arange(-pad, total + pad) - K
    x = offsets.astype(np.float64) * h
    base = np.zeros(total + 2 * pad)
    neg = offsets < 0
    base[neg] = -np.expm1(x[neg]) * (1 + (8 + 4 * np.abs(x[neg])) * UNIT)
    base = np.minimum(base, 1.0)
    floor = base
    states = [(0,) * len(counts)]
    curves = base[None, :].copy()
    for level in range(1, sum(counts) + 1):
        new_states = [
            s for s in itertools.product(*(range(k + 1) for k in counts)) if sum(s) == level
        ]
        index = {s: i for i, s in enumerate(states)}
        reach = np.array([sum(a * n for a, n in zip(s, cells, strict=True)) for s in new_states])
        top = int(reach.max())
        low, high = K - top, K + top + 1
        best = np.zeros((len(new_states), high - low))
        for b in range(len(counts)):
            rows = [i for i, s in enumerate(new_states) if s[b] > 0]
            if not rows:
                continue
            prev = [index[(*s[:b], s[b] - 1, *s[b + 1 :])] for s in (new_states[r] for r in rows)]
            eps = float(cells[b] * step)
            live = K + reach[rows]
            value = _step(curves[prev], pad, cells[b], eps, h, low, high, live, lower)
            best[rows] = np.maximum(best[rows], value)
        out = np.repeat(floor[None, :], len(new_states), axis=0)
        out[:, pad + low : pad + high] = best
        out[:, pad + high :] = 0.0
        states, curves = new_states, out
    result = curves[0, pad : pad + total].copy()
    result.flags.writeable = False
    return result


def joint_pair(
    groups: tuple[tuple[Fraction, int], ...], stride: int = 1
) -> tuple[Fraction, Fraction, np.ndarray] | None:
    """The dominating pair of the selections ``groups`` ((ε, runs) pairs) composed
    adaptively in any order (module docstring): (offset, step, P-masses), the loss
    offset + step·j with P-mass masses[j]; every ``stride``-th point of the recursion's
    lattice (stride must divide the lattice's 2K cells). None when `joint_lattice` finds
    no lattice for them."""
    lattice = joint_lattice(groups)
    if lattice is None:
        return None
    step, cells = lattice
    top = _half([k for _, k in groups], cells)
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1 or 2 * top % stride:
        raise DPValueError("stride must be an integer >= 1 dividing the lattice's cells")
    return -top * step, step * stride, _joint_masses(groups, step, cells, stride).copy()


def joint_cells(groups: tuple[tuple[Fraction, int], ...]) -> int | None:
    """The lattice cells 2K of the joint pair of ``groups`` (None without a lattice)."""
    lattice = joint_lattice(groups)
    if lattice is None:
        return None
    return 2 * _half([k for _, k in groups], lattice[1])


@functools.lru_cache(maxsize=32)
def _joint_masses(
    groups: tuple[tuple[Fraction, int], ...], step: Fraction, cells: tuple[int, ...], stride: int
) -> np.ndarray:
    upper = joint_recursion(groups, step, cells)[::stride].copy()
    top = _half([k for _, k in groups], cells)
    return dominating_masses(upper, -top * step, step * stride)
