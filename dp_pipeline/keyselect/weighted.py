"""A weighted policy for max_cells > 1: each unit spreads a fixed norm over its own keys.

After bounding, unit u holds k_u <= m keys and gives each the integer weight w(k_u);
key k's total is W_k = Σ_{u holds k} w(k_u), and k is released iff W_k + Z_k >= τ.
This is the non-adaptive weighted Gaussian / Laplace policy of Gopi, Gulhane, Kulkarni,
Shen, Shokouhi, Yekhanin, "Differentially private set union" (ICML 2020), on an integer
lattice so the noise stays exact: with the weight scale S,

- Gaussian: w(k) = floor(sqrt(S²/k)), so k·w(k)² <= S² (one unit moves the totals by
  an L2 norm of at most S, whatever its number of keys);
- Laplace: w(k) = floor(S/k), so k·w(k) <= S (L1 norm at most S).

The uniform policy (`dp_pipeline.keyselect.plan`, every key +1) needs the noise for
sensitivity m (L1) or sqrt(m) (L2) even for units that hold one key; here a unit with few
keys gives each a large weight and one with many a small weight, at a noise set by S.
Everything runs in parallel: per-unit weights depend on the unit's own keys only, then
per-key sums.

Theorem. Let s = S (Laplace, L1) or S² (Gaussian, L2²) for add/remove, twice that for
replace; δ_c the count noise's profile at that sensitivity (`noise_profiles`);
p_k = P[w(k) + Z >= τ] and q = max_{1 <= k <= m} 1 - (1 - p_k)^k (a unit with k keys
creates at most k keys of total w(k)). Then δ_sel(ε) <= 1 - (1 - δ_c(ε))(1 - q): the
proof of `dp_pipeline.keyselect.plan` verbatim, since adding or removing a unit changes
no other unit's weights. For each weight value only its largest k matters (1 - (1-p)^k
grows with k), so q is a maximum over the distinct weights.

Accountant event (Laplace). The totals' noise is pure ε_c-DP with ε_c = s/b (L1
sensitivity s, scale b), and every pure ε_c-DP pair is a post-processing of randomized
response with ε_c (Kairouz, Oh, Viswanath 2015, "The composition theorem for
differential privacy", ICML, Section 2), whose loss pair is that of a discrete Laplace of
scale 1/ε_c moved by one. So `WeightedPlan.event` is that count noise plus the atom q,
the dominating pair of the proof above (the shared keys' totals, then the new keys).
The Gaussian policy has no such event: a unit with k keys moves k totals by w(k) each,
and the discrete Gaussian's loss pairs for different k are not dominated by one
coordinate vector the accountant composes (its δ stays the zCDP bound of `delta_at`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import isqrt

import numpy as np
import pandas as pd

from dp_pipeline.accounting.events import KeySelection, PrivacyEvent
from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect.counts import bounded_pairs, sorted_candidates
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.mechanism import SelectedKeys, release_decisions
from dp_pipeline.keyselect.noise_profiles import gaussian_count_delta, laplace_count_delta
from dp_pipeline.keyselect.plan import (
    MAX_THRESHOLD,
    any_release_upper,
    budget_too_small,
    check_selection_inputs,
    combined_delta,
    gaussian_sigma2,
    least_passing,
)
from dp_pipeline.keyselect.tails import GaussianTails, laplace_tail
from dp_pipeline.mechanisms import DiscreteLaplace
from dp_pipeline.rational import exact_rational

__all__ = [
    "GAUSSIAN_WEIGHT_SCALE",
    "LAPLACE_WEIGHT_SCALE",
    "WeightedPlan",
    "plan_weighted_selection",
    "select_weighted_keys",
    "unit_weights",
    "weighted_totals",
]

# S for the Gaussian: w(k) >= 1 up to k = S² = 1024 (> the max_cells limit); the noise
# σ grows with S, and the certified tail table with σ, so S stays small.
GAUSSIAN_WEIGHT_SCALE = 32
# S for the Laplace: w(k) = S // k loses at most 1/w(k) of the norm to rounding
# (about 25% at k = 1000, 2.5% at k = 100); its tails are closed forms, so S is free.
LAPLACE_WEIGHT_SCALE = 4096


def unit_weights(noise: str, max_cells: int) -> tuple[int, ...]:
    """(w(1), ..., w(m)): the integer weight of each key of a unit holding k keys."""
    if noise == "gaussian":
        square = GAUSSIAN_WEIGHT_SCALE**2
        return tuple(isqrt(square // k) for k in range(1, max_cells + 1))
    return tuple(LAPLACE_WEIGHT_SCALE // k for k in range(1, max_cells + 1))


@dataclass(frozen=True)
class WeightedPlan:
    """A weighted selection's weights, noise, threshold and δ (every δ an upper bound).

    ``weights[k - 1]`` is w(k); ``sensitivity`` is the L1 (Laplace) or L2² (Gaussian)
    bound one unit moves the totals by; ``new_keys_delta`` bounds q.
    """

    noise: str
    neighbouring: str
    epsilon: Fraction
    delta: Fraction
    max_cells: int
    weights: tuple[int, ...]
    sensitivity: int
    scale: Fraction | None
    sigma2: Fraction | None
    threshold: int
    new_keys_delta: Fraction
    noise_delta: Fraction
    delta_upper: Fraction
    policy: str = "weighted"
    truncation: None = None

    def delta_at(self, epsilon: object) -> Fraction:
        """Upper bound of δ_sel(ε) at any ε >= 0 (the module's theorem)."""
        eps = exact_rational(epsilon, "epsilon")
        if eps < 0:
            raise DPValueError(f"epsilon must be >= 0, got {epsilon!r}")
        if self.noise == "laplace":
            noise = laplace_count_delta(self.sensitivity / self.scale, eps)
        else:
            noise = gaussian_count_delta(self.sigma2, self.sensitivity, eps)
        return combined_delta(noise, self.new_keys_delta)

    def event(self) -> PrivacyEvent:
        """The weighted Laplace selection as one accountant event: randomized response with
        ε_c = ``sensitivity``/``scale`` (a discrete Laplace of scale 1/ε_c moved by one) plus
        an infinite-loss atom of mass ``new_keys_delta`` (module docstring); its δ(ε) is at
        most `delta_at`'s. Raises `DPValueError` for the Gaussian policy (no event)."""
        if self.scale is None:
            raise DPValueError(
                "the weighted Gaussian selection has no accountant event (a unit's k keys move "
                "k totals by w(k) each, which no single shift vector dominates); plan it "
                "with noise='laplace', or use plan_selection to compose it with other events"
            )
        noise = DiscreteLaplace(self.scale / self.sensitivity)
        return PrivacyEvent(KeySelection(noise, (1,), self.new_keys_delta), (1,), 1)


def _new_keys_upper(weights: tuple[int, ...], tail, threshold: int) -> Fraction:
    """Upper bound of q = max_k 1 - (1 - P[w(k) + Z >= τ])^k over the distinct weights."""
    largest_k: dict[int, int] = {}
    for k, weight in enumerate(weights, start=1):
        largest_k[weight] = k  # weights fall with k: the last k of each weight is the largest
    return max(any_release_upper(tail(threshold - w), k) for w, k in largest_k.items())


def plan_weighted_selection(
    *,
    noise: str,
    epsilon: object,
    delta: object,
    max_cells: int,
    neighbouring: str = "add_remove",
    noise_delta_share: object = Fraction(1, 2),
) -> WeightedPlan:
    """The least integer threshold whose weighted selection δ (upper bound) is <= delta.

    The parameters and their rules are those of `plan_selection` (same messages).
    """
    eps, dlt = check_selection_inputs(noise, epsilon, delta, max_cells, neighbouring)
    factor = 2 if neighbouring == "replace" else 1
    weights = unit_weights(noise, max_cells)
    if noise == "laplace":
        sensitivity = factor * LAPLACE_WEIGHT_SCALE
        scale, sigma2, noise_delta = Fraction(sensitivity) / eps, None, Fraction(0)

        def tail(k: int) -> Fraction:
            return laplace_tail(scale, k)[1]
    else:
        sensitivity = factor * GAUSSIAN_WEIGHT_SCALE**2
        sigma2, noise_delta = gaussian_sigma2(
            eps, dlt, max_cells, sensitivity, noise_delta_share, None
        )
        scale, tails = None, GaussianTails(sigma2)

        def tail(k: int) -> Fraction:
            return tails.tail(k)[1]

    def passes(threshold: int) -> bool:
        return combined_delta(noise_delta, _new_keys_upper(weights, tail, threshold)) <= dlt

    threshold = least_passing(passes, 1, MAX_THRESHOLD)
    if threshold is None:
        raise budget_too_small(eps, dlt, max_cells, f"the threshold would exceed {MAX_THRESHOLD}")
    q = _new_keys_upper(weights, tail, threshold)
    return WeightedPlan(
        noise=noise,
        neighbouring=neighbouring,
        epsilon=eps,
        delta=dlt,
        max_cells=max_cells,
        weights=weights,
        sensitivity=sensitivity,
        scale=scale,
        sigma2=sigma2,
        threshold=threshold,
        new_keys_delta=q,
        noise_delta=noise_delta,
        delta_upper=combined_delta(noise_delta, q),
    )


def weighted_totals(
    unit: np.ndarray, key: np.ndarray, n_keys: int, weights: tuple[int, ...]
) -> np.ndarray:
    """W_k for k in range(n_keys) from the kept (unit, key) pairs: exact int64 sums of
    w(k_u), k_u the number of pairs of unit u (at most max_cells = len(weights))."""
    per_unit = np.bincount(unit) if unit.size else np.zeros(0, dtype=np.int64)
    table = np.array((0, *weights), dtype=np.int64)
    totals = np.zeros(n_keys, dtype=np.int64)
    np.add.at(totals, key, table[per_unit[unit]])
    return totals


def select_weighted_keys(
    df: pd.DataFrame,
    *,
    key: str,
    privacy_unit: str,
    plan: WeightedPlan,
    selection_key: SelectionKey,
    salt: BoundingSalt,
    on_invalid: str = "drop",
) -> SelectedKeys:
    """Bound, weight, sum per key, and release the keys whose noisy total clears τ."""
    pairs = bounded_pairs(
        df,
        key=key,
        privacy_unit=privacy_unit,
        max_cells=plan.max_cells,
        salt=salt,
        selection_key=selection_key,
        on_invalid=on_invalid,
    )
    totals = weighted_totals(pairs.unit, pairs.key, len(pairs.uniques), plan.weights)
    keys, totals = sorted_candidates(pairs.uniques, totals)
    released = release_decisions(plan, selection_key, keys, totals)
    return SelectedKeys(keys=keys[released], threshold=plan.threshold, plan=plan)
