"""DP selection with the exact base-2 exponential mechanism: quantiles, median, top-k.

Pure functions: they take values or counts as numpy arrays and a
`SecureStream`, and return the selected outcome. The engines (pandas, Spark)
compute the same inputs and call these on the driver.

Quantile (Smith 2011, "Privacy-preserving statistical estimation with optimal
convergence rates", Section 3; the exponential-mechanism quantile of OpenDP
and Tumult): the candidates are the grid ``lo, lo + g, lo + 2g, ... <= hi``,
fixed from the public ``bounds`` and ``granularity`` before the data is
seen; the values are clamped into ``bounds`` and binned to the largest
candidate not above them; each candidate ``o`` gets the rank loss
``u(o) = max(0, #{x < o} - q·n, q·n - #{x <= o})`` (n = number of values):
0 exactly when ``o`` is a q-quantile of the binned data, else how many ranks
it is away from being one. (The plain ``|#{x < o} - q·n|`` misranks tied
values: with 200 values at 30 and one at 100 it prefers 31..100 to 30.)
Adding a value moves ``#{x < o}`` and ``#{x <= o}`` by 0 or 1 and ``q·n`` by
``q``, so each term moves by at most ``max(q, 1 - q) <= 1``; replacing one
(n fixed) moves each count by at most 1. So Δu = 1 under both relations,
not monotone, and ``ε = 2·η·ln2``. A privacy unit holding up to ``m`` values
(after bounding) moves ``#{x < o}`` by some ``a`` in ``[0, m]`` and ``q·n`` by
``q·m'`` (m' <= m its values), so each term moves by at most ``m``: Δu = m, as
``checked_quantile_mechanism(mechanism, m)`` requires; replacing a unit's
values by at most m others moves each term by at most m too. When ``q·n`` is not an integer the loss
is a fraction and the mechanism rounds it at random (Ilvento 2020, Lemma
3.5: no privacy cost because Δu = 1 is an integer, so ``ceil(Δu) = Δu``).
Every loss is a multiple of ``1/denominator(q)`` whatever ``n`` is, so that
public denominator fixes the rounding's keystream (one draw per candidate,
fractional or not). OpenDP's quantile score treats ties similarly.

Accuracy (McSherry-Talwar 2007, Theorem 6, with base ``2**-η``): let
``OPT = min_o u(o)``. Each candidate with ``u(o) >= OPT + t`` weighs at most
``2**(-η(t-2))`` times the best candidate (randomized rounding moves each
loss by less than 1), so ``P[u(output) >= OPT + t] <= m·2**(-η(t-2))`` for
``m`` candidates, as long as ``t`` is within the relative clamp (always for
the default tail of 64 bits). See `quantile_rank_error_bound`.

Top-k, two documented methods (``method=``), both pure ε-DP and exact:

- ``"peeling"`` (default; Durfee & Rogers 2019, "Practical differentially
  private top-k selection with pay-what-you-get composition", Section 3):
  k rounds, each selecting one of the not-yet-selected candidates with loss
  ``-count`` by the exponential mechanism at ``ε/k``, so the k selections
  compose to at most ε (basic composition of pure DP). Counts are Δu =
  (largest contribution of one unit to one count)-sensitive; they are
  monotone under add/remove (``monotone=True`` halves the cost per round),
  not under replace-one. Needs only the per-count bound Δ∞; costs grow with k.
  (Peeling with the exponential mechanism is the same distribution as the
  one-shot Gumbel-max top-k of Durfee & Rogers; we sample it exactly
  instead of adding float Gumbel noise.)
- ``"one_shot"`` (noisy histogram): add discrete Laplace noise of scale
  ``Δ₁/ε`` to every candidate's count and report the k largest noisy counts
  (ties to the earlier candidate). The noisy histogram is ε-DP by the
  discrete Laplace mechanism (Ghosh, Roughgarden & Sundararajan 2009;
  Canonne, Kamath & Steinke 2020 Section 2) and the top k are post-processing,
  so ε does NOT grow with k, and the noisy counts of the winners are free to
  publish. Δ₁ = (max candidates one unit touches)·Δ∞, doubled under
  replace-one. Prefer it when one unit touches fewer than about k candidates
  (e.g. one category per person, the census "most common categories" case);
  prefer peeling when units touch many candidates. We do not implement the
  (ε, δ) one-shot Laplace top-k of Qiao, Su & Zhang (2021): its analysis is
  approximate-DP only and its constants are float-heavy.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dp_pipeline.errors import DPTypeError, DPValueError, InternalError
from dp_pipeline.mechanisms.additive import DiscreteLaplace
from dp_pipeline.mechanisms.exponential import BaseTwoExponential
from dp_pipeline.noise.exponential import exponential_sample_scaled
from dp_pipeline.query.quantile_grid import (
    TOP_K_METHODS,
    check_positive_int,
    quantile_candidates,
    quantile_positions,
)
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = [
    "checked_quantile_mechanism",
    "median_of",
    "one_shot_scale",
    "one_shot_top_k",
    "peel_top_k",
    "quantile_losses",
    "quantile_mechanism",
    "quantile_of",
    "quantile_rank_error_bound",
    "select_quantile",
    "top_k_mechanism",
    "top_k_of",
]


def quantile_mechanism(epsilon, *, utility_sensitivity=1, **options) -> BaseTwoExponential:
    """The mechanism `quantile_of` uses at ``epsilon``: not monotone, Δu = 1 when each
    unit holds one value (``utility_sensitivity`` = the values one unit may hold in the data)."""
    return BaseTwoExponential(
        epsilon, utility_sensitivity=utility_sensitivity, monotone=False, **options
    )


def top_k_mechanism(
    epsilon, k: int, *, utility_sensitivity=1, monotone: bool = False, **options
) -> BaseTwoExponential:
    """The per-round mechanism of `top_k_of`: ε/k each, composed k times to at most ε."""
    check_positive_int(k, "k")
    epsilon = positive_rational(epsilon, "epsilon")
    return BaseTwoExponential(
        epsilon / k, utility_sensitivity=utility_sensitivity, monotone=monotone, **options
    )


def quantile_rank_error_bound(mechanism: BaseTwoExponential, candidates: int, beta) -> int:
    """Rank error ``t`` with ``P[u(output) >= OPT + t] <= beta`` (see the module docstring).

    ``t = 2 + ceil(log2(candidates / beta) / η)``, using a lower bound on η.
    The argument needs ``t`` inside the relative clamp (a candidate with loss
    ``>= OPT + t`` keeps a clamped loss ``>= OPT + t`` only while ``t <= gap``);
    a ``beta`` so small that ``t`` exceeds `BaseTwoExponential.relative_gap`
    is refused (raise ``tail_bits``).
    """
    beta = positive_rational(beta, "beta")
    eta_low, _ = mechanism.eta_bounds
    # log2(candidates/beta) <= bit_length(ceil(candidates/beta))
    log2_ratio = math.ceil(Fraction(candidates) / beta).bit_length()
    bound = 2 + math.ceil(log2_ratio / eta_low)
    if mechanism.utility_bounds is None and bound > mechanism.relative_gap(candidates):
        raise DPValueError(
            f"beta={beta} is below what the relative clamp resolves (tail_bits="
            f"{mechanism.tail_bits}); use a larger beta or a mechanism with more tail_bits"
        )
    return bound


def select_quantile(bucket_counts, q, candidates, mechanism, stream):
    """The exponential-mechanism ``q``-quantile from the number of values at each grid position.

    ``bucket_counts[j]`` is the number of values whose `quantile_positions`
    is ``j`` (one entry per candidate); then ``#{x < c_j} = Σ_{i<j} bucket_counts[i]``
    and ``n = Σ bucket_counts``. Returns the index of the selected candidate.
    This is the step both engines run on the driver after aggregating.
    """
    q_exact = exact_rational(q, "q")
    if not 0 <= q_exact <= 1:
        raise DPValueError(f"q must be in [0, 1], got {q!r}")
    counts = np.asarray(bucket_counts, dtype=np.int64)
    if counts.shape != (len(candidates),):
        raise InternalError(
            f"{counts.shape} bucket counts for {len(candidates)} quantile candidates"
        )
    # Every loss is a multiple of 1/denominator(q) (q·n is), whatever n is: that
    # public denominator fixes the rounding's draws, not the data's parity.
    scaled = scaled_quantile_losses(counts, q_exact)
    if scaled is not None:
        numerators, denominator = scaled
        return exponential_sample_scaled(
            mechanism, numerators, denominator, stream, utility_denominator=q_exact.denominator
        )
    losses = quantile_losses(counts, q_exact)
    return int(mechanism.sample(losses, stream, utility_denominator=q_exact.denominator))


def scaled_quantile_losses(bucket_counts, q: Fraction) -> tuple[np.ndarray, int] | None:
    """The losses of `quantile_losses` as ``(int64 numerators, d)`` with ``q·n = p/d``,
    or None when ``d·n`` could overflow int64 (then the Fractions are used)."""
    counts = np.asarray(bucket_counts, dtype=np.int64)
    target = q * int(counts.sum())
    numerator, denominator = target.numerator, target.denominator
    if int(counts.sum()) * denominator >= 2**62:
        return None
    through = np.cumsum(counts)
    below = through - counts
    scaled = np.maximum(
        0, np.maximum(below * denominator - numerator, numerator - through * denominator)
    )
    return scaled.astype(np.int64), denominator


def quantile_losses(bucket_counts, q) -> np.ndarray:
    """The rank loss of every grid candidate (see the module docstring), exact.

    ``u_j = max(0, below_j - q·n, q·n - through_j)`` with ``below_j = Σ_{i<j} counts_i``
    and ``through_j = below_j + counts_j``: int64 when ``q·n`` is an integer, else an
    object array of `Fraction`.
    """
    counts = np.asarray(bucket_counts, dtype=np.int64)
    through = np.cumsum(counts).astype(np.int64)
    below = through - counts
    target = exact_rational(q, "q") * int(counts.sum())
    if target.denominator == 1:
        whole = int(target)
        return np.maximum(0, np.maximum(below - whole, whole - through))
    # The same Fractions from exact integers: d·u_j = max(0, d·below_j - p, p - d·through_j)
    # with q·n = p/d (|d·through_j| <= d·n, far below 2**63 for any real n and q).
    numerator, denominator = target.numerator, target.denominator
    if int(counts.sum()) * denominator >= 2**62:
        return np.array(
            [
                max(Fraction(0), b - target, target - t)
                for b, t in zip(below.tolist(), through.tolist(), strict=True)
            ],
            dtype=object,
        )
    scaled = np.maximum(
        0, np.maximum(below * denominator - numerator, numerator - through * denominator)
    )
    return np.array([Fraction(int(u), denominator) for u in scaled.tolist()], dtype=object)


def quantile_of(values, q, bounds, granularity, mechanism, stream):
    """The ``q``-quantile of ``values`` from the grid of `quantile_candidates`, ε-DP.

    ``mechanism`` is a `BaseTwoExponential` (Δu >= 1, not monotone) or an ε,
    which becomes `quantile_mechanism(ε)`; its `pure_epsilon` is what the
    release spends. Values are binned by `quantile_positions` (clamped into
    ``bounds``) and the candidate is chosen by `select_quantile`. Returns the
    selected candidate (int on an integer grid, else float). Raises before
    drawing anything on: NaN in ``values``, ``q`` outside [0, 1], reversed or
    non-finite ``bounds``, non-positive ``granularity``, an unsuitable mechanism.
    """
    q_exact = exact_rational(q, "q")
    if not 0 <= q_exact <= 1:
        raise DPValueError(f"q must be in [0, 1], got {q!r}")
    candidates = quantile_candidates(bounds, granularity)
    mechanism = checked_quantile_mechanism(mechanism)
    data = _finite_values(values)
    positions, _ = quantile_positions(data, bounds, granularity)
    bucket_counts = np.bincount(positions, minlength=len(candidates))
    chosen = candidates[select_quantile(bucket_counts, q_exact, candidates, mechanism, stream)]
    return int(chosen) if chosen.denominator == 1 else float(chosen)


def median_of(values, bounds, granularity, mechanism, stream):
    """`quantile_of` at ``q = 1/2``."""
    return quantile_of(values, Fraction(1, 2), bounds, granularity, mechanism, stream)


def peel_top_k(counts, k: int, mechanism: BaseTwoExponential, stream) -> list[int]:
    """Indices of ``k`` candidates chosen by peeling: ``k`` exponential-mechanism rounds on -count.

    Each round runs ``mechanism`` (its ``epsilon`` is the per-round share) on
    the losses ``-counts`` of the candidates not yet chosen. Indices in
    selection order.
    """
    counts = np.asarray(counts)
    # Integer counts (a property of the dtype, not of the values) need no
    # rounding draws; float counts get the default fixed-precision rounding.
    options = {"utility_denominator": 1} if np.issubdtype(counts.dtype, np.integer) else {}
    remaining = np.arange(counts.size)
    selected = []
    for _ in range(k):
        pick = int(mechanism.sample(-counts[remaining], stream, **options))
        selected.append(int(remaining[pick]))
        remaining = np.delete(remaining, pick)
    return selected


def one_shot_top_k(noisy_counts, k: int) -> list[int]:
    """Indices of the ``k`` largest noisy counts (ties: the earlier candidate first).

    Pure post-processing of a noisy histogram: no privacy cost beyond the
    noisy counts themselves (see the module docstring).
    """
    noisy = np.asarray(noisy_counts)
    order = np.argsort(-noisy, kind="stable")
    return [int(i) for i in order[:k]]


def one_shot_scale(epsilon, l1_sensitivity) -> Fraction:
    """Discrete Laplace scale giving pure ``epsilon``-DP to a histogram of L1 sensitivity Δ₁.

    ``scale = Δ₁ / ε`` exactly (Ghosh-Roughgarden-Sundararajan 2009 / CKS 2020
    Section 2: the discrete Laplace with ``P[x] ∝ exp(-|x|/scale)`` is
    ``Δ₁/scale``-DP for integer vectors of L1 sensitivity Δ₁).
    """
    epsilon = positive_rational(epsilon, "epsilon")
    return Fraction(l1_sensitivity) / epsilon


def top_k_of(
    counts_by_candidate,
    k: int,
    epsilon,
    stream,
    *,
    candidates=None,
    utility_sensitivity=1,
    monotone: bool = False,
    method: str = "peeling",
    max_candidates: int = 1,
) -> list:
    """The ``k`` candidates with the largest counts, ε-DP, by ``method``.

    ``counts_by_candidate`` is a 1-D array of counts over a public candidate
    list (``candidates``, same length, default the indices). Returns the
    selected candidates in selection order.

    ``method="peeling"``: k exponential-mechanism rounds at ε/k each; one unit
    changes every count by at most ``utility_sensitivity``. Total pure ε:
    ``k`` times the ``pure_epsilon`` of `top_k_mechanism` (at most ``epsilon``).

    ``method="one_shot"``: discrete Laplace noise at `one_shot_scale`
    (Δ₁ = ``max_candidates · utility_sensitivity``, doubled when not
    ``monotone``, i.e. under replace-one) on every count, then the k largest;
    pure ε exactly ``epsilon`` whatever ``k``. One unit must touch at most
    ``max_candidates`` counts (the caller guarantees it; the engines enforce it).
    """
    check_positive_int(k, "k")
    if method not in TOP_K_METHODS:
        raise DPValueError(f"method must be one of {TOP_K_METHODS}, got {method!r}")
    check_positive_int(max_candidates, "max_candidates")
    counts = np.asarray(counts_by_candidate)
    if counts.ndim != 1:
        raise DPValueError(f"counts_by_candidate must be 1-D, got shape {counts.shape}")
    if counts.size == 0:
        raise DPValueError("counts_by_candidate is empty: top-k needs at least one candidate")
    if k > counts.size:
        raise DPValueError(f"k = {k} is larger than the number of candidates ({counts.size})")
    labels = np.arange(counts.size) if candidates is None else np.asarray(candidates)
    if labels.shape != counts.shape:
        raise DPValueError(
            f"candidates has {labels.size} entries but counts_by_candidate has {counts.size}"
        )
    if np.issubdtype(counts.dtype, np.floating):
        bad = np.flatnonzero(~np.isfinite(counts))
        if bad.size:
            raise DPValueError(
                f"counts_by_candidate[{bad[0]}] is {counts[bad[0]]}; counts must be finite"
            )
    elif not np.issubdtype(counts.dtype, np.integer):
        raise DPTypeError(f"counts_by_candidate must be numbers, got dtype {counts.dtype}")
    if method == "peeling":
        mechanism = top_k_mechanism(
            epsilon, k, utility_sensitivity=utility_sensitivity, monotone=monotone
        )
        chosen = peel_top_k(counts, k, mechanism, stream)
    else:
        if not np.issubdtype(counts.dtype, np.integer):
            raise DPTypeError("one_shot top-k needs integer counts (exact discrete Laplace noise)")
        sensitivity = positive_rational(utility_sensitivity, "utility_sensitivity")
        if sensitivity.denominator != 1:
            raise DPValueError(
                f"one_shot top-k needs an integer utility_sensitivity, got {utility_sensitivity!r}"
            )
        l1 = max_candidates * sensitivity * (1 if monotone else 2)
        noise = DiscreteLaplace(one_shot_scale(epsilon, l1)).sample(counts.size, stream)
        chosen = one_shot_top_k(counts.astype(np.int64) + noise, k)
    return [labels[i].item() for i in chosen]


def checked_quantile_mechanism(mechanism, values_per_unit: int = 1) -> BaseTwoExponential:
    """``mechanism`` if it fits a quantile whose units hold up to ``values_per_unit`` values
    (rank-loss sensitivity Δu = ``values_per_unit``; see the module docstring), or
    `quantile_mechanism` at ``mechanism`` taken as an ε."""
    if not isinstance(mechanism, BaseTwoExponential):
        return quantile_mechanism(mechanism, utility_sensitivity=values_per_unit)
    if mechanism.monotone:
        raise DPValueError(
            "the quantile rank loss is not monotone; pass a BaseTwoExponential with "
            "monotone=False (or just an epsilon)"
        )
    if mechanism.utility_sensitivity < values_per_unit:
        raise DPValueError(
            f"the quantile rank loss has sensitivity {values_per_unit} (the rows one unit "
            f"keeps in a group), but the mechanism declares utility_sensitivity="
            f"{mechanism.utility_sensitivity}; use >= {values_per_unit}"
        )
    return mechanism


def _finite_values(values) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise DPValueError(f"values must be 1-D, got shape {array.shape}")
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        try:
            array = array.astype(float)
        except (TypeError, ValueError):
            raise DPTypeError(f"values must be numbers, got dtype {array.dtype}") from None
    if array.dtype == bool:
        raise DPTypeError("values must be numbers, got booleans")
    array = array.astype(float)
    bad = np.flatnonzero(np.isnan(array))
    if bad.size:
        raise DPValueError(
            f"values[{bad[0]}] is NaN; drop or impute missing values before a DP quantile"
        )
    return array
