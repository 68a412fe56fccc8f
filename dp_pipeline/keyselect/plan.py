"""Thresholds and δ of private key selection, exact: the plan a selection runs with.

Mechanism. Each privacy unit holds at most m = ``max_cells`` keys (keyed bounding);
c_k is the number of distinct units of key k; key k is released iff c_k + Z_k >= τ,
with Z_k independent exact discrete noise. Only keys present in the data are
candidates, so a key no unit holds is never released.

Theorem (the selection's privacy profile). Let s = m (add/remove neighbours) or 2m
(replace), δ_c(ε) the profile of the count noise on counts moved by at most s units of
L1 (Laplace) or L2² (Gaussian) (`noise_profiles`), p = P[1 + Z >= τ] the chance that
a key held by one unit only is released, and q = 1 - (1-p)^m. Then for every ε,

    δ_sel(ε) <= 1 - (1 - δ_c(ε))·(1 - q).

Proof. Neighbours D, D' share the keys held in both; on D at most m keys exist that D'
lacks (its unit's own keys, c = 1) and, for replace, at most m the other way. Write
each output law as P ⊗ V, Q ⊗ N (shared keys ⊗ the keys only one side has); V is
"nothing released" with probability 1 - q_V >= 1 - q, N likewise. For any event S
let T be the shared-key outputs x with (x, nothing else) in S. Then
P⊗V(S) <= (1-q_V)·P(T) + q_V and Q⊗N(S) >= (1-q_N)·Q(T), and with
P(T) <= e^ε·Q(T) + δ_c(ε) (post-processing) the difference P⊗V(S) - e^ε·Q⊗N(S) is
at most (1-q)·δ_c(ε) + q in each direction. (In the add direction q_N = 0 and the
bound holds with q_V <= q; in the remove direction q_V = 0 and P(T) - e^ε(1-q)Q(T)
<= (1-q)(P(T) - e^ε Q(T)) + q·P(T).)

For the accountant the selection is one event: the count noise (scale or σ², with
sensitivity s) together with an infinite-loss atom of mass q; `SelectionPlan.delta_at`
is its profile, every value an upper bound.

m = 1, add/remove, Laplace: the optimal mechanism (Desfontaines, Voss, Gipson,
Mandayam 2022, "Differentially private partition selection", PoPETs). Its release
probability π(n) = min(e^ε π(n-1) + δ, 1 - e^{-ε}(1 - π(n-1) - δ), 1) is exactly
thresholding with noise Lap_Z(1/ε) conditioned on |Z| <= K at τ = K + 1 (derived here,
the paper not being at hand: with P(z) ∝ α^|z|, α = e^{-ε}, and e^ε·P(z) = P(z-1)
for z >= 1, π(n) - e^ε·π(n-1) = P(K) = π(1) while n <= K + 1, the first branch of the
recursion with δ = P(K); the upper branch follows by the symmetry z -> -z). Its
profile is computed from π exactly (a single key changes: a pair of Bernoullis).

Any m, either neighbouring, Laplace: the same truncated geometric per key (PipelineDP's
per-key policy), scale s/ε and truncation K, threshold K + 1. For every count n,
π(n) <= e^{ε/s}·π(n-1) + P(K) and 1 - π(n-1) <= e^{ε/s}·(1 - π(n)) + P(K) (above;
π(0) = 0 covers a key only one neighbour has), so each key's binary output is
(ε/s, P(K))-DP in the count, and one unit moves at most s counts by one.

Theorem (the accountant event of a truncated plan). Every (ε₀, δ₀)-DP binary output is a
post-processing of the canonical pair "loss +∞ with mass δ₀, else randomized response
with ε₀" (Kairouz, Oh, Viswanath 2015, "The composition theorem for differential
privacy", ICML, Section 2: its operational interpretation of (ε, δ)-DP), and dominating
pairs compose (independent keys, each key's
draw from its own stream). The s keys a unit moves are therefore dominated by s such
pairs: an infinite-loss atom of mass q = 1 - (1 - P(K))^s and, given no atom, s
randomized responses with ε/s, which is the loss pair of a discrete Laplace of scale s/ε
moved by one (P[loss = ε/s] = P[Z <= 0] = e^{ε/s}/(1 + e^{ε/s})). `SelectionPlan.event`
is exactly that `KeySelection`; at the plan's ε its δ is q <= ``delta`` (s randomized
responses with ε/s are pure ε-DP). Keys no unit moves add nothing.

Which policy (``policy=None``, Laplace): both plans have noise of the same scale s/ε
and a symmetric noise, so a key with count c is released with probability at least 1/2
exactly when c >= threshold; the plan with the smaller threshold releases every count
at or above it with probability >= 1/2 where the other does not, and is the default
(the truncated geometric on a tie: its π reaches 1 at 2K + 1).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.accounting.events import KeySelection, PrivacyEvent
from dp_pipeline.errors import DPValueError, InternalError
from dp_pipeline.keyselect.budget import decimal_up, least_epsilon
from dp_pipeline.keyselect.exact_exp import DEFAULT_BITS, exp_bounds, exp_neg_multiples
from dp_pipeline.keyselect.noise_profiles import (
    gaussian_count_delta,
    laplace_count_delta,
    log_zcdp_delta_estimate,
)
from dp_pipeline.keyselect.rules import (
    MAX_CELLS_LIMIT,
    MAX_EPSILON,
    MAX_SIGMA2,
    MAX_THRESHOLD,
    MIN_DELTA,
    POLICIES,
    any_release_upper,
    budget_too_small,
    check_selection_inputs,
    combined_delta,
    least_passing,
)
from dp_pipeline.keyselect.tails import GaussianTails, laplace_tail, truncated_laplace_top_mass
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = [
    "MAX_CELLS_LIMIT",
    "MAX_EPSILON",
    "MAX_SIGMA2",
    "MAX_THRESHOLD",
    "MIN_DELTA",
    "POLICIES",
    "SelectionPlan",
    "any_release_upper",
    "budget_too_small",
    "check_selection_inputs",
    "combined_delta",
    "decimal_up",
    "gaussian_sigma2",
    "least_passing",
    "minimum_epsilon",
    "plan_selection",
]

# The truncated geometric's profile (s = 1) is summed over its 2K + 1 atoms.
MAX_TRUNCATION = 100_000


@dataclass(frozen=True)
class SelectionPlan:
    """A key selection's noise, threshold and privacy figures (every δ an upper bound).

    ``policy`` is ``"truncated_geometric"`` (Laplace truncated at ±K per key: optimal for
    m = 1 with add/remove, PipelineDP's per-key policy otherwise) or ``"threshold"``
    (untruncated noise). ``single_unit_release`` bounds p, the chance
    that a key held by one unit is released; ``new_keys_delta`` bounds q = 1-(1-p)^m
    (truncated geometric: 1-(1-p)^s, every key a unit moves has an atom);
    ``noise_delta`` bounds the count noise's δ_c(ε); ``delta_upper`` bounds
    δ_sel(ε) = 1 - (1-δ_c(ε))(1-q) and is at most ``delta``.
    """

    noise: str
    policy: str
    neighbouring: str
    epsilon: Fraction
    delta: Fraction
    max_cells: int
    scale: Fraction | None
    sigma2: Fraction | None
    truncation: int | None
    threshold: int
    single_unit_release: Fraction
    new_keys_delta: Fraction
    noise_delta: Fraction
    delta_upper: Fraction

    @property
    def count_sensitivity(self) -> int:
        """Counts one unit moves (each by one): m for add/remove, 2m for replace."""
        return self.max_cells * (2 if self.neighbouring == "replace" else 1)

    def delta_at(self, epsilon: object) -> Fraction:
        """Upper bound of the selection's δ_sel(ε) at any ε >= 0 (the module's theorem)."""
        eps = exact_rational(epsilon, "epsilon")
        if eps < 0:
            raise DPValueError(f"epsilon must be >= 0, got {epsilon!r}")
        if self.policy == "truncated_geometric" and self.count_sensitivity == 1:
            return _truncated_profile(self.scale, self.truncation, eps)
        if self.noise == "laplace":  # truncated with s > 1: s pairs (ε/s, P(K)), pure ε
            noise = laplace_count_delta(self.count_sensitivity / self.scale, eps)
        else:
            noise = gaussian_count_delta(self.sigma2, self.count_sensitivity, eps)
        return combined_delta(noise, self.new_keys_delta)

    def describe(self) -> str:
        """One line for a user at plan time (nothing of the data): the threshold, what a
        key needs to pass it, the policy and its certified figures, δ rounded up."""
        noise = f"scale {self.scale}" if self.scale is not None else f"sigma2 {self.sigma2}"
        truncation = f", truncated at ±{self.truncation}" if self.truncation is not None else ""
        return (
            f"key selection: threshold {self.threshold} distinct units (a key held by that "
            f"many or more is released with probability at least 1/2, a key held by one unit "
            f"with probability at most {decimal_up(self.single_unit_release)}); policy "
            f"{self.policy}, {self.noise} noise {noise}{truncation}; delta <= "
            f"{decimal_up(self.delta_upper)} at epsilon {self.epsilon}; max_cells "
            f"{self.max_cells}, {self.neighbouring}"
        )

    def event(self) -> PrivacyEvent:
        """The selection as one accountant event (`KeySelection`), every δ(ε) it gives an
        upper bound of the selection's.

        Threshold policy: its count noise on ``count_sensitivity`` keys, each count moved
        by one (one unit holds at most m keys), plus an infinite-loss atom of mass
        ``new_keys_delta`` (q): the module's first theorem. Truncated geometric: s keys,
        each the canonical (ε/s, P(K)) pair, i.e. a discrete Laplace of scale s/ε moved by
        one on each and an atom of mass ``new_keys_delta`` = 1 - (1 - P(K))^s (the module's
        theorem on the truncated plan's event; Kairouz, Oh, Viswanath 2015)."""
        noise: DiscreteGaussian | DiscreteLaplace
        if self.scale is not None:  # a Laplace plan has a scale, a Gaussian one σ²
            noise = DiscreteLaplace(self.scale)
        elif self.sigma2 is not None:
            noise = DiscreteGaussian(self.sigma2)
        else:
            raise InternalError("a selection plan has neither a scale nor a σ²")
        return PrivacyEvent(
            KeySelection(noise, (1,) * self.count_sensitivity, self.new_keys_delta), (1,), 1
        )


def plan_selection(
    *,
    noise: str,
    epsilon: object,
    delta: object,
    max_cells: int,
    neighbouring: str = "add_remove",
    noise_delta_share: object = Fraction(1, 2),
    sigma2: object = None,
    policy: str | None = None,
    max_units: int | None = None,
) -> SelectionPlan:
    """The smallest integer threshold whose selection δ (an upper bound) is <= ``delta``.

    Laplace: scale s/ε (s = m or 2m), pure ε for the counts, so all of ``delta`` is
    left to the keys only one neighbour has (``policy="threshold"``), or the truncated
    geometric per key (``policy="truncated_geometric"``: least K with
    1 - (1 - P[Z = K | |Z| <= K])^s <= δ, threshold K + 1; for m = 1 with add/remove
    the optimal mechanism). ``policy=None`` plans both and keeps the one with the smaller
    threshold (module docstring). Gaussian (threshold policy only): σ² is ``sigma2`` if
    given, else the least σ² on a grid of 1/1024 whose count-noise δ_c(ε) is at most
    ``noise_delta_share``·``delta``; the threshold then takes what is left.
    ``max_units`` (public knowledge, e.g. the population's size): the most distinct units
    a key can have; a plan whose threshold exceeds it could release no key and is
    refused, the message giving the threshold and `minimum_epsilon` for ``max_units``.
    Raises `DPValueError` naming the parameter and the rule, before anything is read.
    """
    plan = _plan(noise, epsilon, delta, max_cells, neighbouring, noise_delta_share, sigma2, policy)
    if max_units is None:
        return plan
    if isinstance(max_units, bool) or not isinstance(max_units, int) or max_units < 1:
        raise DPValueError(
            f"max_units={max_units!r}: must be a positive int (the most distinct units a key "
            f"can have) or None"
        )
    if plan.threshold <= max_units:
        return plan
    try:
        least = minimum_epsilon(
            max_units,
            noise=noise,
            delta=delta,
            max_cells=max_cells,
            neighbouring=neighbouring,
            noise_delta_share=noise_delta_share,
            sigma2=sigma2,
            policy=policy,
        )
        fix = (
            f"epsilon >= {decimal_up(least)} would release a key held by {max_units} units "
            f"with probability at least 1/2 (or raise delta, or lower max_cells)"
        )
    except DPValueError:
        fix = f"no epsilon up to {MAX_EPSILON} would; raise delta or lower max_cells"
    raise DPValueError(
        f"epsilon={plan.epsilon}, delta={float(plan.delta):.3g}, max_cells={max_cells}: budget "
        f"too small for key selection: its threshold is {plan.threshold} distinct units, above "
        f"max_units={max_units}, so no key could be released; {fix}"
    )


def _plan(noise, epsilon, delta, max_cells, neighbouring, noise_delta_share, sigma2, policy):
    """`plan_selection` without ``max_units``: the policies planned, the better kept."""
    eps, dlt = check_selection_inputs(noise, epsilon, delta, max_cells, neighbouring)
    if sigma2 is not None and noise != "gaussian":
        raise DPValueError(
            f"sigma2={sigma2!r}: applies to noise='gaussian' only; leave it out for {noise!r}"
        )
    if policy is not None and policy not in POLICIES:
        raise DPValueError(
            f"policy={policy!r}: must be one of {', '.join(map(repr, POLICIES))} or None "
            f"(the one with the smaller threshold)"
        )
    if policy == "truncated_geometric" and noise != "laplace":
        raise DPValueError(
            "policy='truncated_geometric': applies to noise='laplace' only (a truncated "
            "discrete Laplace per key); use policy='threshold' with noise='gaussian'"
        )
    sensitivity = max_cells * (2 if neighbouring == "replace" else 1)
    common = dict(
        noise=noise, neighbouring=neighbouring, epsilon=eps, delta=dlt, max_cells=max_cells
    )
    truncated = None
    if noise == "laplace" and policy != "threshold":
        truncated = _truncated_plan(eps, dlt, sensitivity, common)
        if truncated is not None and (policy is not None or sensitivity == 1):
            return truncated  # for s = 1 it never has the larger threshold
        if policy is not None:
            limit = MAX_TRUNCATION if sensitivity == 1 else MAX_THRESHOLD - 1
            raise budget_too_small(eps, dlt, max_cells, f"the truncation would exceed {limit}")
    try:
        threshold = _threshold_plan(eps, dlt, sensitivity, noise_delta_share, sigma2, common)
    except DPValueError:
        if truncated is None:
            raise
        return truncated
    if truncated is not None and truncated.threshold <= threshold.threshold:
        return truncated
    return threshold


def minimum_epsilon(
    units: int,
    *,
    noise: str,
    delta: object,
    max_cells: int,
    neighbouring: str = "add_remove",
    noise_delta_share: object = Fraction(1, 2),
    sigma2: object = None,
    policy: str | None = None,
) -> Fraction:
    """The least ε, on the grid of three significant decimal digits, whose plan (the other
    arguments those of `plan_selection`) has a threshold of at most ``units``: a key held
    by ``units`` distinct units is then released with probability at least 1/2 (both
    noises are symmetric, so π(threshold) = P[Z >= 0] >= 1/2). Plans only, no data.

    Raises `DPValueError` naming ``units`` when no ε up to `MAX_EPSILON` reaches it.
    """
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise DPValueError(f"units={units!r}: must be a positive int (distinct units per key)")
    arguments = dict(
        noise=noise,
        delta=delta,
        max_cells=max_cells,
        neighbouring=neighbouring,
        noise_delta_share=noise_delta_share,
        sigma2=sigma2,
        policy=policy,
    )

    def passes(eps: Fraction) -> bool:
        try:
            return plan_selection(epsilon=eps, **arguments).threshold <= units
        except DPValueError as error:  # a budget too small is a "no"; any other rule is not
            if "budget too small" not in str(error):
                raise
            return False

    least = least_epsilon(passes, Fraction(MAX_EPSILON))
    if least is None:
        raise DPValueError(
            f"units={units}: no epsilon up to {MAX_EPSILON} gives a threshold of at most "
            f"{units} distinct units at delta={float(Fraction(delta)):.3g}, "
            f"max_cells={max_cells}; raise delta or lower max_cells"
        )
    return least


def _threshold_plan(eps, dlt, sensitivity, share, sigma2, common: dict) -> SelectionPlan:
    """The untruncated policy: least τ with 1 - (1-δ_c)(1 - q(τ)) <= δ."""
    max_cells = common["max_cells"]
    if common["noise"] == "laplace":
        scale = Fraction(sensitivity) / eps
        noise_delta = Fraction(0)

        def tail(k: int) -> Fraction:
            return laplace_tail(scale, k)[1]

        sigma = None
    else:
        sigma, noise_delta = gaussian_sigma2(eps, dlt, max_cells, sensitivity, share, sigma2)
        tails = GaussianTails(sigma)

        def tail(k: int) -> Fraction:
            return tails.tail(k)[1]

        scale = None

    def passes(threshold: int) -> bool:
        return combined_delta(noise_delta, any_release_upper(tail(threshold - 1), max_cells)) <= dlt

    threshold = least_passing(passes, 1, MAX_THRESHOLD)
    if threshold is None:
        raise budget_too_small(eps, dlt, max_cells, f"the threshold would exceed {MAX_THRESHOLD}")
    p = tail(threshold - 1)
    q = any_release_upper(p, max_cells)
    return SelectionPlan(
        **common,
        policy="threshold",
        scale=scale,
        sigma2=sigma,
        truncation=None,
        threshold=threshold,
        single_unit_release=p,
        new_keys_delta=q,
        noise_delta=noise_delta,
        delta_upper=combined_delta(noise_delta, q),
    )


def _truncated_plan(
    eps: Fraction, dlt: Fraction, sensitivity: int, common: dict
) -> SelectionPlan | None:
    """The truncated geometric per key, scale s/ε: least K with
    1 - (1 - P[Z = K | |Z| <= K])^s <= δ, threshold K + 1 (None past `MAX_TRUNCATION`)."""
    scale = Fraction(sensitivity) / eps

    def passes(bound: int) -> bool:
        return any_release_upper(truncated_laplace_top_mass(scale, bound)[1], sensitivity) <= dlt

    # s = 1 sums its exact profile over the 2K + 1 atoms (`_truncated_profile`)
    bound = least_passing(passes, 1, MAX_TRUNCATION if sensitivity == 1 else MAX_THRESHOLD - 1)
    if bound is None:
        return None  # too wide: the untruncated plan takes over
    top = truncated_laplace_top_mass(scale, bound)[1]
    q = any_release_upper(top, sensitivity)
    return SelectionPlan(
        **common,
        policy="truncated_geometric",
        scale=scale,
        sigma2=None,
        truncation=bound,
        threshold=bound + 1,
        single_unit_release=top,
        new_keys_delta=q,
        noise_delta=Fraction(0),
        delta_upper=q,
    )


def gaussian_sigma2(eps, dlt, max_cells, sensitivity, share, sigma2) -> tuple[Fraction, Fraction]:
    """(σ², δ_c(ε) upper bound): ``sigma2`` checked, or the least σ² on a 1/1024 grid
    whose count noise (L2² sensitivity ``sensitivity``) has δ_c(ε) <= share·δ."""
    if sigma2 is not None:
        chosen = positive_rational(sigma2, "sigma2")
        if chosen > MAX_SIGMA2:
            raise DPValueError(f"sigma2={sigma2!r}: must be at most 2**20 to be certified")
        noise_delta = gaussian_count_delta(chosen, sensitivity, eps)
        if noise_delta >= dlt:
            raise DPValueError(
                f"sigma2={sigma2!r}: the count noise alone has delta {float(noise_delta):.3g} "
                f">= delta={float(dlt):.3g} at epsilon={eps}; raise sigma2 or leave it out"
            )
        return chosen, noise_delta
    part = exact_rational(share, "noise_delta_share")
    if not 0 < part < 1:
        raise DPValueError(f"noise_delta_share={share!r}: must be strictly between 0 and 1")
    target = part * dlt
    # A float guess of ρ (bisection on the log of the bound), then certified exactly.
    low, high, log_target = 1e-12, 1e6, math.log(target)
    for _ in range(200):
        middle = math.sqrt(low * high)
        if log_zcdp_delta_estimate(middle, float(eps)) <= log_target:
            low = middle
        else:
            high = middle
    chosen = Fraction(math.ceil(sensitivity / (2 * low) * 1024), 1024)
    for _ in range(64):
        if chosen > MAX_SIGMA2:
            raise budget_too_small(
                eps, dlt, max_cells, "the Gaussian noise would need sigma2 above 2**20"
            )
        noise_delta = gaussian_count_delta(chosen, sensitivity, eps)
        if noise_delta <= target:
            return chosen, noise_delta
        chosen = Fraction(math.ceil(chosen * 1025), 1024)
    raise budget_too_small(eps, dlt, max_cells, "no certifiable sigma2 found")


def _truncated_profile(scale: Fraction, bound: int, eps: Fraction) -> Fraction:
    """Upper bound of the truncated geometric's δ(ε): max over n of both Bernoulli
    hockey-sticks, π(n+1) - e^ε π(n) and (1-π(n)) - e^ε (1-π(n+1)), for n = 0..2K+1.

    π(n) = c·Σ_{z=K+1-n}^{K} α^|z| with c = (1-α)/(1+α-2α^{K+1}), bracketed with every
    weight's bracket (`exp_neg_multiples`), so each π(n) has a lower and upper end.
    """
    weights = exp_neg_multiples(1 / scale, list(range(bound + 2)), DEFAULT_BITS)
    unit = 1 << DEFAULT_BITS
    a_lo, a_hi = Fraction(weights[1][0], unit), Fraction(weights[1][1], unit)
    top_lo, top_hi = Fraction(weights[-1][0], unit), Fraction(weights[-1][1], unit)
    c_lo = (1 - a_hi) / (1 + a_hi - 2 * top_lo)
    c_hi = (1 - a_lo) / (1 + a_lo - 2 * top_hi)
    pis = [(Fraction(0), Fraction(0))]
    sum_lo = sum_hi = 0
    for n in range(1, 2 * bound + 2):
        z = abs(bound + 1 - n)
        sum_lo += weights[z][0]
        sum_hi += weights[z][1]
        pis.append((min(Fraction(1), c_lo * sum_lo / unit), min(Fraction(1), c_hi * sum_hi / unit)))
    pis.append((Fraction(1), Fraction(1)))
    growth = exp_bounds(eps)[0] if eps <= DEFAULT_BITS // 2 else Fraction(2) ** (DEFAULT_BITS // 2)
    worst = Fraction(0)
    for (lo0, _), (_, hi1) in itertools.pairwise(pis):
        worst = max(worst, hi1 - growth * lo0, (1 - lo0) - growth * (1 - hi1))
    return min(Fraction(1), worst)
