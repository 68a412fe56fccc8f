"""Bounded-range mechanisms (the exponential mechanism) by their exact privacy curve.

A mechanism M is ε-bounded-range (ε-BR; Durfee & Rogers 2019) if for neighbours x, x'
its privacy loss L(o) = log(M(x)(o)/M(x')(o)) has range sup_o L - inf_o L <= ε. The
exponential mechanism is ε-BR exactly where it is ε-DP: its loss is a constant plus
η·(u(x', o) - u(x, o)), and the utility differences lie in [-Δ, Δ] (in [0, Δ] when
monotone), which is how `BaseTwoExponential.pure_epsilon` is derived (Ilvento 2020,
Theorem 3.1; its ``bounded_range_epsilon`` is that same value). Peeling top-k runs it k
times at ε/k, each run ε/k-BR.

**Privacy curve of one ε-BR mechanism** (Dong, Durfee & Rogers 2020, "Optimal
differential privacy composition for exponential mechanisms", Section 4).
Both M(x) and M(x') are distributions, so L takes values >= 0 and <= 0; hence
L ∈ [-t, ε - t] for some t ∈ [0, ε]. With R = e^L under Q = M(x'), E_Q[R] = 1 and the
hockey-stick divergence H_α(P‖Q) = E_Q[(R - α)_+] is the mean of a convex function of R,
largest (for a fixed mean on [e^{-t}, e^{ε-t}]) when R sits on the two ends: the
two-point pair B_t with losses ε - t and -t, Q-masses q_t = (e^t - 1)/(e^ε - 1) and
1 - q_t. So for every α >= 0, H_α(M(x)‖M(x')) <= sup_t H_α(B_t); the family is closed
under swapping P and Q (t -> ε - t), so the same bound holds for (M(x'), M(x)). For
α = e^x, x ∈ [-ε, ε], the supremum is at e^{2t} = e^ε/α (the objective is concave in t):

    δ_BR(x) = (e^{ε/2} - e^{x/2})² / (e^ε - 1),   δ_BR(x) = 1 - e^x for x <= -ε,
                                                   δ_BR(x) = 0 for x >= ε

(`bounded_range_delta`; δ_BR(0) = tanh(ε/4)). It is convex in α and symmetric, so it is
the privacy profile of one pair of distributions (Zhu, Dong & Wang 2022, "Optimal
accounting of differential privacy via characteristic function": the pair
with Q[L > x] = -dδ/dα): the loss L ∈ [-ε, ε] with P-density e^{(ε+x)/2} / (2(e^ε - 1)).
This pair dominates every ε-BR mechanism for every α >= 0, and dominating pairs compose
under adaptive composition (Zhu, Dong & Wang 2022; equivalently the composition
theorem of f-DP, Dong, Roth & Su 2022). A mixture of ε-BR mechanisms with the same
mixing law under both neighbours (the randomized rounding of `BaseTwoExponential`) need
not be bounded-range, but H_α is jointly convex, so the mixture is dominated by the same
pair. Against randomized response at ε (what pure ε-DP gives: mean loss ≈ ε²/2) its
mean loss is ≈ ε²/6, so a few selections beside counts cost markedly less. The pair is
the least dominating one for ONE mechanism, not for a composition: its k-fold product
behaves like a Gaussian with ρ ≈ kε²/6, while every ε-BR mechanism is also ε²/8-zCDP
(Cesar & Rogers 2021), whose conversion the accountant applies as a cap.

**k runs of one ε: their optimal adaptive composition.** The runs of each ε (k of them;
beyond 128, blocks of 64 and one of the rest: `adaptive_blocks`; a block of 64 has the
same 32 cells per ε as one of 128, and costs a quarter of its recursion, 0.05 s, for
~0.3% more in ε) enter instead as blocks, each the
dominating pair of DDR's optimal adaptive composition of its ε-BR runs (their recursion
over t, `bounded_range_adaptive`, which states the theorem and why the blocks compose
with each other and with every other event): within 0.7% of DDR's non-adaptive optimum
in ε(1e-6) for k = 2..100 at ε = 1/2, where the k-fold one-run pair (with the zCDP cap)
was up to 10% above it. A single run at its ε keeps the one-run pair (the least
dominating pair of one run). Selections at 2 to 4 distinct ε (at most 128 runs in all,
within the work budget of `bounded_range_joint.joint_lattice`) form one joint block
instead: the adaptive recursion over the runs left of each ε, in any order
(`bounded_range_joint`, which states the induction).

**Discretisation, an upper bound.** The continuous loss is put on the lattice
s_j = -ε + j·h, h = 2ε/m, j = 0..m, by splitting the loss mass of each cell
[s_j, s_{j+1}] onto its two ends, keeping both its P-mass and its Q-mass (the
dominating-pair discretisation also used by `pld`: the original pair is the
post-processing that merges the two ends, so the split pair dominates it for every α
and under composition). In closed form, with c_0 = c_m = 1 and c_j = 2 otherwise,

    P[L = s_j] = c_j · tanh(h/4) · e^{jh/2} / (e^ε - 1),

symmetric (Q[L = s_j] = P[L = s_{m-j}]), summing to one. The losses are exact rationals
(ε and h are Fractions), so the pair joins the exact lattice FFT; each float mass is
within (8 + 2ε)·2^-53 relative of its exact value (`mass_error`), charged by the MGF
inversion as its ``mass_error``; the lattice FFT and the grid PLD take the masses raised
by that factor (δ only grows with each P-mass, so their upper bounds stay upper bounds;
their lower bounds move by about 1e-15 relative). Spreading each loss over a cell of
width h adds at most h²/4 to its variance, about 3/m² of the loss's own (m = `POINTS`).

**Reference.** For k identical ε-BR mechanisms alone, Dong, Durfee & Rogers (2020,
Section 5) give the optimal non-adaptive δ(ε_g) = sup_t δ(B_t^{⊗k})(ε_g); their adaptive
optimum lies above it (Section 6: adaptively chosen t gain up to ~9% in δ here), and so
does every sound bound (the tests compare both with mpmath).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np

from dp_pipeline.accounting.bounded_range_adaptive import (
    BLOCK_RUNS,
    MAX_RUNS,
    adaptive_pair,
    cells_per_run,
    lattice_losses,
)
from dp_pipeline.accounting.bounded_range_joint import joint_cells, joint_lattice, joint_pair
from dp_pipeline.accounting.inversion_terms import SupportGroup
from dp_pipeline.accounting.lattice import LatticeComponent
from dp_pipeline.accounting.pld import PrivacyLossDistribution
from dp_pipeline.errors import DPTypeError, DPValueError

__all__ = [
    "POINTS",
    "adaptive_blocks",
    "block_lattice",
    "block_measure",
    "block_pld",
    "block_points",
    "block_span",
    "block_support",
    "bounded_range_delta",
    "bounded_range_epsilon_of",
    "bounded_range_lattice",
    "bounded_range_losses",
    "bounded_range_pld",
    "bounded_range_support",
    "mass_error",
    "support_points",
]

POINTS = 256  # lattice cells per mechanism: the split adds ~3/m² relative loss variance
_UNIT = 2.0**-53
_INVERSION_SUPPORT = 512  # selection support points summed at every inversion node


def mass_error(epsilon: float) -> float:
    """Relative error bound of each float mass of `bounded_range_losses` (module docstring):
    tanh, exp, expm1 (one ulp each), the exponent's rounding (ε ulps), three products."""
    return (8 + 2 * epsilon) * _UNIT


def bounded_range_epsilon_of(mechanism) -> Fraction | None:
    """The bounded-range ε of a mechanism that states one (``bounded_range_epsilon``, a
    stored exact Fraction, e.g. `BaseTwoExponential`), else None."""
    value = getattr(mechanism, "bounded_range_epsilon", None)
    if value is None:
        return None
    if callable(value) or not isinstance(value, Fraction) or value <= 0:
        raise DPTypeError(
            f"{type(mechanism).__name__}.bounded_range_epsilon must be a stored positive "
            f"Fraction, got {value!r}"
        )
    return value


def bounded_range_delta(epsilon: float, x: float) -> float:
    """δ_BR(x) of one ε-BR mechanism (module docstring; DDR 2020 §4): the smallest δ such
    that every ε-BR mechanism is (x, δ)-DP, exact up to float rounding (a reference value,
    not used for a guarantee)."""
    if x >= epsilon:
        return 0.0
    if x <= -epsilon:
        return -math.expm1(x)
    root = math.exp(epsilon / 2) - math.exp(x / 2)
    return root * root / math.expm1(epsilon)


def bounded_range_losses(epsilon: Fraction, points: int = POINTS):
    """The dominating lattice of one ε-BR mechanism: (offset, step, P-masses), the loss
    offset + step·j with P-mass masses[j], j = 0..points (module docstring)."""
    if not isinstance(epsilon, Fraction) or epsilon <= 0:
        raise DPValueError(f"epsilon must be a positive Fraction, got {epsilon!r}")
    if isinstance(points, bool) or not isinstance(points, int) or points < 1:
        raise DPValueError(f"points must be an integer >= 1, got {points!r}")
    offset, step, masses, _ = _lattice(epsilon, points)
    return offset, step, masses.copy()


@functools.lru_cache(maxsize=256)
def _lattice(epsilon: Fraction, points: int):
    """(offset, step, masses, float losses), read-only: plans ask for the same ε often."""
    step = 2 * epsilon / points
    eps, h = float(epsilon), float(step)
    j = np.arange(points + 1, dtype=np.float64)
    # e^{jh/2}/(e^ε - 1) = e^{jh/2 - ε}/(1 - e^{-ε}): no overflow for a large ε
    masses = math.tanh(h / 4) * np.exp(j * (h / 2) - eps) / -math.expm1(-eps)
    masses[1:-1] *= 2
    # each loss the float nearest the exact rational offset + step·j (integer division)
    losses = lattice_losses(-epsilon, step, points + 1)
    masses.flags.writeable = False
    losses.flags.writeable = False
    return -epsilon, step, masses, losses


def bounded_range_lattice(epsilon: Fraction, count: int, points: int = POINTS):
    """The `LatticeComponent` of ``count`` runs of an ε-BR mechanism (masses rounded up)."""
    offset, step, _ = bounded_range_losses(epsilon, points)
    masses = _rounded_up(epsilon, points)
    return LatticeComponent(
        offset=offset, step=step, count=count, probabilities=tuple(masses.tolist())
    )


def _rounded_up(epsilon: Fraction, points: int) -> np.ndarray:
    """The float masses raised by their relative error bound (and the product's rounding)."""
    masses = _lattice(epsilon, points)[2]
    return masses * (1 + mass_error(float(epsilon)) + 2 * _UNIT)


def support_points(events) -> int:
    """Lattice cells per selection in the MGF inversion, whose cost grows with the summed
    support at every node: `POINTS` for one or two one-run pairs (a block counts twice:
    its support has 2·points + 1 losses), halved as they multiply, at least 64 (the split
    then adds ~7e-4 relative loss variance per run; the FFT paths keep `POINTS`)."""
    groups = sum(2 if runs > 1 else 1 for _, runs, _ in adaptive_blocks(events))
    points = POINTS
    while points > 64 and groups * points > _INVERSION_SUPPORT:
        points //= 2
    return points


def bounded_range_support(epsilon: Fraction, count: int, points: int = POINTS) -> SupportGroup:
    """The MGF inversion's `SupportGroup` of ``count`` runs of an ε-BR mechanism: float
    losses within one ulp of ε of the exact rationals, masses within `mass_error`."""
    bounded_range_losses(epsilon, points)  # checks the arguments
    _, _, masses, losses = _lattice(epsilon, points)
    eps = float(epsilon)
    return SupportGroup(
        masses=masses,
        losses=losses,
        count=count,
        loss_error=2 * _UNIT * eps,
        mass_error=mass_error(eps),
    )


def bounded_range_pld(epsilon: Fraction, step: float, points: int = POINTS):
    """The grid `PrivacyLossDistribution` (symmetric) of one ε-BR mechanism (masses
    rounded up)."""
    bounded_range_losses(epsilon, points)
    losses = _lattice(epsilon, points)[3]
    return PrivacyLossDistribution.from_losses(losses, _rounded_up(epsilon, points), 0.0, step)


# ----------------------------------------------------------------- the adaptive block


def adaptive_blocks(events) -> tuple[tuple[Any, int, int], ...]:
    """The selections of ``events`` as blocks (ε, runs, copies), increasing in ε: for each
    bounded-range ε with k runs in all, one block of its k runs when k <= `MAX_RUNS`,
    else k // `BLOCK_RUNS` copies of a block of `BLOCK_RUNS` runs and one block of the
    remaining runs. A block of runs >= 2 enters as the pair of DDR's optimal adaptive
    composition (`bounded_range_adaptive`), one of a single run as the one-run pair; the
    blocks compose with each other and with every other event (module docstring of
    `bounded_range_adaptive`, "Blocks at several ε"). Selections at 2 to 4 distinct ε
    (at most `MAX_RUNS` runs in all) for which `bounded_range_joint.joint_lattice` finds
    a lattice form instead one joint block (groups, runs, 1), groups the (ε, k) pairs
    increasing in ε: the joint adaptive recursion over all their runs in any order
    (`bounded_range_joint`)."""
    counts: dict[Fraction, int] = {}
    for event in events:
        value = bounded_range_epsilon_of(event.mechanism)
        if value is not None and event.count > 0:
            counts[value] = counts.get(value, 0) + event.count
    groups = tuple((epsilon, counts[epsilon]) for epsilon in sorted(counts))
    if len(groups) >= 2 and joint_lattice(groups) is not None:
        return ((groups, sum(counts.values()), 1),)
    blocks: list[tuple[Any, int, int]] = []
    for epsilon in sorted(counts):
        runs = counts[epsilon]
        if runs > MAX_RUNS:
            copies, runs = divmod(runs, BLOCK_RUNS)
            blocks.append((epsilon, BLOCK_RUNS, copies))
        if runs:
            blocks.append((epsilon, runs, 1))
    return tuple(blocks)


def block_span(epsilon: Any, runs: int, copies: int = 1) -> float:
    """The width of a block's loss range over its copies, about (2·Σ k·ε)."""
    if isinstance(epsilon, tuple):
        return 2 * copies * sum(k * float(e) for e, k in epsilon) * 1.01
    return 2 * copies * runs * float(epsilon)


def block_points(epsilon: Any, runs: int) -> int:
    """The lattice cells of one block's measure (`block_measure`)."""
    if isinstance(epsilon, tuple):
        cells = joint_cells(epsilon)
        if cells is None:
            raise DPValueError("the joint block has no lattice")
        return cells
    return 2 * runs * cells_per_run(runs) if runs > 1 else POINTS


def block_measure(epsilon: Any, runs: int) -> tuple[Fraction, Fraction, np.ndarray, float]:
    """(offset, step, P-masses, relative mass error) of one block: the one-run pair's
    lattice for a single run, the adaptive block's or the joint block's measure (exact:
    the float masses are the certified measure)."""
    if isinstance(epsilon, tuple):
        pair = joint_pair(epsilon)
        if pair is None:
            raise DPValueError("the joint block has no lattice")
        return (*pair, 0.0)
    if runs == 1:
        offset, step, masses = bounded_range_losses(epsilon)
        return offset, step, masses, mass_error(float(epsilon))
    return (*adaptive_pair(epsilon, runs), 0.0)


def _joint_stride(groups: Any, points: int) -> int:
    """The least stride dividing the joint lattice's cells that leaves at most
    2·points + 1 points (the top and bottom points always kept)."""
    cells = block_points(groups, 0)
    return next(s for s in range(1, cells + 1) if cells % s == 0 and cells // s <= 2 * points)


def block_lattice(epsilon: Fraction, runs: int, copies: int = 1) -> LatticeComponent:
    """The `LatticeComponent` of ``copies`` adaptive blocks of ``runs`` runs (the one-run
    pair for a single run)."""
    if runs == 1:
        return bounded_range_lattice(epsilon, copies)
    offset, step, masses, _ = block_measure(epsilon, runs)
    return LatticeComponent(
        offset=offset, step=step, count=copies, probabilities=tuple(masses.tolist())
    )


def block_support(
    epsilon: Fraction, count: int, points: int = POINTS, copies: int = 1
) -> SupportGroup:
    """The MGF inversion's `SupportGroup` of ``copies`` adaptive blocks of ``count`` runs,
    on at most 2·points + 1 losses (every stride-th point of its lattice: a coarser chord,
    still dominating); the masses are the measure itself (no float error), each loss
    within 2 ulps of kε. A single run: the one-run pair (`bounded_range_support`)."""
    if count == 1:
        return bounded_range_support(epsilon, copies, points)
    if isinstance(epsilon, tuple):
        pair = joint_pair(epsilon, _joint_stride(epsilon, points))
        if pair is None:
            raise DPValueError("the joint block has no lattice")
        offset, step, masses = pair
        reach = float(-offset)
    else:
        cells = cells_per_run(count)
        stride = 1
        while stride < cells and 2 * count * cells // stride > 2 * points:
            stride *= 2
        offset, step, masses = adaptive_pair(epsilon, count, stride)
        reach = float(count * epsilon)
    losses = lattice_losses(offset, step, len(masses))
    return SupportGroup(
        masses=masses,
        losses=losses,
        count=copies,
        loss_error=2 * _UNIT * reach,
        mass_error=0.0,
    )


def block_pld(epsilon: Fraction, count: int, step: float, copies: int = 1):
    """The grid `PrivacyLossDistribution` (symmetric: the block's family is closed under
    exchanging the neighbours) of ``copies`` adaptive blocks of ``count`` runs (the one-run
    pair for a single run)."""
    if count == 1:
        part = bounded_range_pld(epsilon, step)
        return part.self_compose(copies) if copies > 1 else part
    offset, lattice_step, masses, _ = block_measure(epsilon, count)
    losses = lattice_losses(offset, lattice_step, len(masses))
    part = PrivacyLossDistribution.from_losses(losses, masses, 0.0, step)
    return part.self_compose(copies) if copies > 1 else part
