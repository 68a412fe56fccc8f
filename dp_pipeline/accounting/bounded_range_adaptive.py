"""k runs of an ε-bounded-range mechanism by their optimal adaptive privacy curve.

Dong, Durfee & Rogers (2020, "Optimal differential privacy composition for exponential
mechanisms", Section 6) give the optimal privacy curve of k adaptively chosen ε-BR
mechanisms as a recursion over the worst-case t of each run, t allowed to depend on
everything released before. This module evaluates that recursion with every float step
charged, and turns its upper bound into a pair of distributions that dominates every such
composition, so that the block composes with the other events of a release.

**The recursion** (hockey-stick form). Write δ_k(x) for the supremum of
H_{e^x}(P‖Q) = E_P[(1 - e^{x - L})_+] over all adaptive compositions of k ε-BR
mechanisms (the run i may be any ε-BR mechanism chosen from the outputs of runs 1..i-1).
Then δ_0(x) = (1 - e^x)_+ and

    δ_k(x) = sup_{t ∈ [0, ε]} p_t δ_{k-1}(x - ε + t) + (1 - p_t) δ_{k-1}(x + t),
    p_t = (e^ε - e^{ε-t}) / (e^ε - 1),

the two-point pair B_t (losses ε - t and -t, P-masses p_t and 1 - p_t). Proof of "<=":
condition on the first output o: the rest is an adaptive (k-1)-composition for each o,
so H <= E_P[δ_{k-1}(x - L_1)] = E_Q[φ(R_1)] with φ(r) = r·W(α/r), W(α) = δ_{k-1}(log α)
convex in α (a supremum of hockey-stick divergences), so φ is convex (its perspective);
R_1 = e^{L_1} has Q-mean 1 on [e^{-t}, e^{ε-t}] for some t, and a convex function's mean
at a fixed mean is largest on the two ends: B_t. Proof of ">=": B_t with t chosen from
the loss so far reaches it. This is DDR's adaptive optimum; it lies above their
non-adaptive optimum sup_t δ(B_t^{⊗k}) (Section 5; the tests compare with both).

**Every float step charged.** On the lattice x_i = -kε + i·h, h = ε/M, with t on the
same lattice, each cell t ∈ [t_a, t_a + h] is bounded in closed form: φ is convex, so on
the cell it lies below the chord through its two lattice values; with u = e^{t_a - t}
that bound is G(u) = K0 + K1·u + K2/u, whose maximum over the cell is at most the larger
of its two ends (the lattice values of the recursion's objective) plus
max(0, -K2)·(1 - e^{-h})²/(4e^{-2h}) (1/u lies below its chord by at most that). The
cell's ends and that term are sums of non-negative products computed with each weight
raised by its float error; each step's result is raised by 32 ulps. The result δ̄_k is an
upper bound at every lattice point; between them δ_k (convex in α = e^x) lies below the
chord in α of the two neighbouring bounds. No bound is allowed below 2^-900 where δ_j
may be positive (x < jε), so no subnormal number (whose rounding is not relative) enters.

**Lattice size.** M = `cells_per_run` cells per ε: 512, halved while k·M > 2048, at least
32; the recursion's work is ~2(kM)² and the pair has 2kM + 1 points (the MGF inversion
keeps every stride-th point, at most ~513). Measured against the recursion restricted to
lattice t (a lower bound on δ_k): within 0.9% for 3 <= k <= 30 where δ >= 1e-6, 1.7% for
k = 2 (δ = 1e-6 at the edge of its range), ~4% for k = 60..128 (M = 32). More than
`MAX_RUNS` runs of one ε are cut into blocks of at most `MAX_RUNS` runs (below).

**A dominating pair.** For a loss measure μ on the lattice write
D_μ(x) = Σ_j μ_j (1 - e^{x - x_j})_+, linear in α between lattice points. The masses of
the convex piecewise-linear interpolation of δ̄_k (its second differences in α) are
computed in floats, clipped at 0, and scaled by the largest ratio δ̄_k(x_i)/D_μ(x_i)
(D_μ bounded below, by a direct convolution with its float error charged) and 1/Σμ, so
that D_μ >= δ̄_k at every lattice point and at α = 0 (points whose bound is below 2^-800
get P-mass at the top loss kε instead, where a float ratio would be meaningless). Then
D_μ >= δ_k everywhere (both sides linear in α between the points; for x <= -kε,
δ_k = 1 - e^x and D_μ is affine in α above it at both ends). μ sums to 1 + ~1e-11: a
measure, not a distribution, which is all the argument below needs.
Composition with the other events: every other event of a release has a fixed dominating
pair (G_j), so by Blackwell's theorem each is a post-processing of a draw Z_j from G_j,
drawn independently of what came before; drawing every Z_j first and then running the
ε-BR runs (which may read all of them) is a post-processing-equivalent sequential
composition: first ⊗G_j, then, for each value of the Z's, an adaptive k-composition of
ε-BR mechanisms. The hockey-stick of that is E_{⊗G}[H(x - L_G)] <= E_{⊗G}[δ_k(x - L_G)]
<= E_{⊗G}[D_μ(x - L_G)], which is exactly what the composition paths compute from the
P-masses μ (their δ is linear in μ with non-negative coefficients). The family of
compositions is closed under exchanging the neighbours (t -> ε - t), so the same μ
serves both directions. A mixture
of ε-BR mechanisms (the randomized rounding of `BaseTwoExponential`) is covered: revealing
its mixing draw, independent of the data, only adds information, and then each run is
ε-BR with t chosen adaptively.

**Blocks at several ε, and blocks of one ε.** A release's selections may run at several
ε, interleaved in any order (even one chosen from earlier outputs), and more than
`MAX_RUNS` runs of one ε are cut into blocks. Each block enters by its own pair μ_b, and
the product of the blocks' pairs bounds the whole: write δ^b_a for the optimal adaptive
curve of a runs of block b (δ^b_0 = (1 - e^x)_+) and U(a_1, ..., a_n) for the optimal
adaptive curve of a_b runs of each block b, in any order. U <= δ^1_{a_1} ⊞ ... ⊞
δ^n_{a_n}, the curve of the product of pairs G^b_{a_b} whose curves are δ^b_{a_b} (each a
supremum of hockey-stick curves, convex in α with the right ends, so such a pair exists:
Zhu, Dong & Wang 2022), by induction on the runs. If the first run is one of block b (at
its ε), conditioning on its output as above gives U <= T_ε U' with U' the curve of the
rest and T_ε W(x) = sup_t p_t W(x - ε + t) + (1 - p_t) W(x + t), monotone in W. By the
induction U' <= E_G[δ^b_{a_b - 1}(x - L_G)] with G the product of the other blocks'
pairs, and T_ε moves inside that expectation as an upper bound (a supremum of an
expectation is at most the expectation of the supremum): T_ε U' <= E_G[T_ε
δ^b_{a_b - 1}(x - L_G)] = E_G[δ^b_{a_b}(x - L_G)], the curve of the product with
G^b_{a_b}. Then δ^b <= D_{μ_b} for every block, one at a time (each side an expectation
over the other blocks' pairs, non-negative in the replaced curve), gives U <= the curve of
the product of the measures μ_b, which the composition paths compute; with the fixed
pairs G_j of the other events as above. This is not the optimal curve of the whole: the
product of the blocks' curves lies above the joint recursion over the runs left of each ε
(two runs at ε = 1/2 and two at 1/5: 4-20% in δ above the best interleaved strategy found
by brute force). Selections at 2 to 4 distinct ε within its budget take that joint
recursion instead (`bounded_range_joint`, on a common lattice of the ε raised to multiples
of one step; its work grows with the product of the counts); the others form one block
per ε (`adaptive_blocks` in `bounded_range`).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from dp_pipeline.accounting.recursion_slack import STEP_SLACK, TINY, UNIT, WEIGHT_SLACK
from dp_pipeline.errors import DPValueError, InternalError

__all__ = [
    "BLOCK_RUNS",
    "MAX_RUNS",
    "adaptive_delta_bounds",
    "adaptive_pair",
    "cells_per_run",
    "dominating_masses",
    "lattice_losses",
]

MAX_RUNS = 128  # runs of one block at most
BLOCK_RUNS = 64  # beyond MAX_RUNS runs of one ε: blocks of this many (and one of the rest)
_SMALL = 2.0**-800  # points whose bound is below this are covered by the top loss's mass


def cells_per_run(count: int) -> int:
    """Lattice cells per ε: 512, halved while count·cells exceeds 2048, at least 32 (the
    pair's support is 2·count·cells + 1 points, the recursion's work ~2·(count·cells)²)."""
    cells = 512
    while cells > 32 and count * cells > 2048:
        cells //= 2
    return cells


def _check(epsilon, count, cells):
    if not isinstance(epsilon, Fraction) or epsilon <= 0:
        raise DPValueError(f"epsilon must be a positive Fraction, got {epsilon!r}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RUNS:
        raise DPValueError(f"count must be an integer in 1..{MAX_RUNS}, got {count!r}")
    if isinstance(cells, bool) or not isinstance(cells, int) or cells < 2:
        raise DPValueError(f"cells must be an integer >= 2, got {cells!r}")


@functools.lru_cache(maxsize=64)
def _recursion(epsilon: Fraction, count: int, cells: int, lower: bool):
    """δ̄_k on the lattice x_i = -kε + i·ε/cells, i = 0..2k·cells (read-only float array):
    an upper bound at every point, or with ``lower`` the recursion restricted to lattice
    t (the value of an adaptive strategy, a lower bound up to float rounding)."""
    m = cells
    eps = float(epsilon)
    h = float(epsilon / m)
    n = 2 * count * m + 1
    # extended index e = i + m covers x from -(k+1)ε to (k+1)ε; x = j·h with j an exact
    # integer, so each float node is within 2 ulps of its exact value (no cancellation)
    offsets = np.arange(-m, n + m) - count * m
    x = offsets.astype(np.float64) * h
    base = np.zeros(n + 2 * m)
    neg = offsets < 0
    # (1 - e^x)_+ raised by expm1's ulp and the node's rounding (relative effect <= 2 ulps)
    base[neg] = -np.expm1(x[neg]) * (1 + (8 + 4 * np.abs(x[neg])) * UNIT)
    base = np.minimum(base, 1.0)
    floor = base.copy()  # δ_j(x) = 1 - e^x for x <= -jε: the padding below the lattice
    t = np.arange(m + 1, dtype=np.float64) * h
    one_minus_e = -math.expm1(-eps)
    p = -np.expm1(-t) / one_minus_e  # P-mass of the loss ε - t
    q = -np.expm1(-(eps - t)) * np.exp(-t) / one_minus_e  # P-mass of the loss -t
    if not lower:
        p, q = p * WEIGHT_SLACK, q * WEIGHT_SLACK
    p, q = p[:, None], q[:, None]
    u0 = math.exp(-h)
    # the 1/u-below-chord term: (1-u0)²/(4u0²) times u0/(1-u0) from K2's factor
    width = (1 - u0) / (4 * u0) * WEIGHT_SLACK**3
    coef_a = 1 / one_minus_e * WEIGHT_SLACK
    coef_b = math.exp(-eps) / one_minus_e * WEIGHT_SLACK  # 1/(e^ε - 1)
    cur = base
    inner = slice(m, m + n)
    for step_no in range(1, count + 1):
        # row r of the windows is cur[r : r + n]: at t = r·h, A = δ_{j-1}(x - ε + t) is
        # row r and B = δ_{j-1}(x + t) row m + r
        windows = np.lib.stride_tricks.sliding_window_view(cur, n)
        # the objective at the lattice t: ends[r] at t = r·h, r = 0..m
        ends = p * windows[: m + 1] + q * windows[m : 2 * m + 1]
        if lower:
            best = ends.max(axis=0)
        else:
            # -K2 ∝ (A0 - A1)/(1 - e^{-ε}) - (B0 - B1)/(e^ε - 1) depends on r + i only: a
            # window of one array; the differences' float error charged against the values
            drop = cur[:-1] - cur[1:]
            excess = np.maximum(coef_a * drop[: len(drop) - m] - coef_b * drop[m:], 0.0)
            excess += 8 * UNIT * (coef_a * cur[: len(drop) - m] + coef_b * cur[m:-1])
            excess = np.lib.stride_tricks.sliding_window_view(width * excess, n)[:m]
            best = (np.maximum(ends[:-1], ends[1:]) * (1 + 4 * UNIT) + excess).max(axis=0)
            best *= STEP_SLACK
            # no subnormal values (whose float error is not relative): wherever δ_j may
            # be positive (x < jε, an integer test) the bound is at least TINY
            live = (count + step_no) * m
            best[:live] = np.maximum(best[:live], TINY)
            best = np.minimum(best, 1.0)
        nxt = floor.copy()  # below -kε every δ_j is the exact 1 - e^x (raised)
        nxt[inner] = best
        nxt[m + n :] = 0.0
        cur = nxt
    result = cur[inner].copy()
    result.flags.writeable = False
    return result


def lattice_losses(offset: Fraction, step: Fraction, size: int) -> np.ndarray:
    """The floats nearest offset + step·j, j = 0..size-1 (exact integer arithmetic: the
    division of two Python integers is correctly rounded)."""
    common = offset.denominator * step.denominator // math.gcd(offset.denominator, step.denominator)
    start = offset.numerator * (common // offset.denominator)
    increment = step.numerator * (common // step.denominator)
    return np.array([(start + increment * j) / common for j in range(size)])


def adaptive_delta_bounds(epsilon: Fraction, count: int, cells: int | None = None):
    """(x, lower, upper) on the lattice x_i = -kε + i·ε/cells: DDR's optimal adaptive
    δ_k(x) of ``count`` ε-BR runs lies within [lower, upper] (lower: the recursion over
    lattice t, exact up to float rounding; upper: every step charged; module docstring)."""
    cells = cells_per_run(count) if cells is None else cells
    _check(epsilon, count, cells)
    upper = _recursion(epsilon, count, cells, False)
    lower = _recursion(epsilon, count, cells, True)
    step = epsilon / cells
    x = lattice_losses(-count * epsilon, step, len(upper))
    return x, lower.copy(), upper.copy()


@functools.lru_cache(maxsize=64)
def _pair(epsilon: Fraction, count: int, cells: int, stride: int):
    """The P-masses on every ``stride``-th lattice point (read-only; module docstring)."""
    upper = _recursion(epsilon, count, cells, False)[::stride].copy()
    return dominating_masses(upper, -count * epsilon, epsilon * stride / cells)


def dominating_masses(upper: np.ndarray, offset: Fraction, step: Fraction) -> np.ndarray:
    """P-masses μ on the losses offset + step·j (read-only) with D_μ >= ``upper`` at every
    point and D_μ(x) >= 1 - e^x below the lattice (module docstring, "A dominating pair"):
    ``upper`` holds upper bounds of a curve convex in α = e^x at those points, 0 at the
    last point, 1 - e^x or more at and below the first, at least 2^-900 where positive."""
    n = len(upper)
    h = float(step)
    x = lattice_losses(offset, step, n)
    alpha = np.exp(x)
    # slopes of the piecewise-linear interpolation in α, from (0, 1) through the points
    nodes_a = np.concatenate(([0.0], alpha))
    nodes_d = np.concatenate(([1.0], upper))
    slopes = np.diff(nodes_d) / np.diff(nodes_a)
    slopes = np.concatenate((slopes, [0.0]))
    q = np.maximum(np.diff(slopes), 0.0)  # Q-mass at each lattice loss
    mu = q * alpha
    # D_μ(x_i) = Σ_{j>i} μ_j (1 - e^{-(j-i)h}), bounded below (non-negative terms)
    kernel = -np.expm1(-h * np.arange(n, dtype=np.float64)) * (1 - 8 * UNIT)
    # a direct convolution (no FFT): sums of non-negative terms, n ulps at most
    profile = np.convolve(mu[::-1], kernel)[:n][::-1] * (1 - (2 * n + 8) * UNIT)
    total = math.fsum(mu.tolist()) * (1 - 4 * UNIT)
    large = upper >= _SMALL
    ratio = float(np.max(upper[large] / profile[large])) if np.any(large) else 1.0
    scale = max(1.0, ratio, 1 / total) * (1 + 4 * UNIT)
    mu = mu * scale
    # points with a tiny bound: P-mass η at the top loss adds η(1 - e^{x_i - kε}) there
    small = ~large & (upper > 0)
    if np.any(small):
        if upper[-1] > 0:  # δ_k(kε) = 0 exactly; the recursion keeps it 0
            raise InternalError("the bound at the top loss must be 0")
        gaps = kernel[::-1][small]  # 1 - e^{-(n-1-i)h}, bounded below
        mu[-1] += float(np.max(upper[small] / gaps)) * (1 + 4 * UNIT)
    mu.flags.writeable = False
    return mu


def adaptive_pair(epsilon: Fraction, count: int, stride: int = 1, cells: int | None = None):
    """The dominating pair of ``count`` adaptively composed ε-BR runs: (offset, step,
    P-masses), the loss offset + step·j with P-mass masses[j], step = stride·ε/cells,
    j = 0..2·count·cells/stride (exact rational losses; masses whose D_μ bounds DDR's δ_k
    at every x, module docstring; they sum to 1 up to ~1e-10). A ``stride`` > 1 keeps
    every stride-th point of the recursion's lattice (a power of two up to ``cells``):
    fewer points, a chord over a wider cell."""
    cells = cells_per_run(count) if cells is None else cells
    _check(epsilon, count, cells)
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1 or cells % stride:
        raise DPValueError(f"stride must be an integer >= 1 dividing {cells}, got {stride!r}")
    step = epsilon * stride / cells
    return -count * epsilon, step, _pair(epsilon, count, cells, stride).copy()
