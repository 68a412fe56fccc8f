"""Tests of DP quantiles, median and top-k built on the base-2 exponential mechanism."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from counting_stream import CountingStream
from scipy import stats

from dp_pipeline import BaseTwoExponential, MasterKey
from dp_pipeline.query.quantile_grid import quantile_candidates, quantile_positions
from dp_pipeline.randomness import derive_stream
from dp_pipeline.selection.algorithms import (
    median_of,
    quantile_losses,
    quantile_mechanism,
    quantile_of,
    quantile_rank_error_bound,
    select_quantile,
    top_k_mechanism,
    top_k_of,
)

KEY = MasterKey(bytes(range(1, 33)))


def stream(*labels):
    return derive_stream(KEY, "test_selection", *labels)


def test_candidates_are_fixed_by_bounds_and_granularity():
    assert quantile_candidates((0, 1), "1/4") == [Fraction(i, 4) for i in range(5)]
    assert quantile_candidates((2, 3), "2/5") == [2, Fraction(12, 5), Fraction(14, 5)]


def test_dp_median_within_documented_error_bound_over_many_seeds():
    # Known data: a permutation of 0..199, so #{x < o} = o, #{x <= o} = o + 1 and the
    # rank loss of candidate o is max(0, o - 100, 99 - o), OPT = 0 (at 99 and 100).
    # Bound: P[loss >= t] <= beta.
    rng = np.random.default_rng(3)  # test data only
    values = rng.permutation(200)
    epsilon, beta = Fraction(1, 2), Fraction(1, 20)
    mechanism = quantile_mechanism(epsilon)
    t = quantile_rank_error_bound(mechanism, 201, beta)
    runs = 60
    picks = [
        median_of(values, (0, 200), 1, mechanism, stream("median", seed)) for seed in range(runs)
    ]
    losses = [max(0, o - 100, 99 - o) for o in picks]
    assert losses == [
        quantile_losses(np.append(np.ones(200, dtype=int), 0), "1/2")[o] for o in picks
    ]
    errors = [abs(o - 100) for o in picks]
    violations = sum(loss >= t for loss in losses)
    # Violations ~ Binomial(60, <= 1/20); P[>= 10] < 1e-3 (pinned false-positive rate).
    assert stats.binom.sf(9, runs, float(beta)) < 1e-3
    assert violations < 10
    # The bound is not vacuous: it is a small fraction of the 201 candidates.
    assert t < 40
    # Power: the errors are far below those of a uniform pick (mean |o - 100| ≈ 50).
    assert np.mean(errors) < 15


def test_dp_quantile_on_a_fractional_grid_and_fractional_rank():
    rng = np.random.default_rng(4)  # test data only
    values = rng.normal(50, 10, 1001)
    picks = [quantile_of(values, "0.9", (0, 100), "0.5", 1, stream("q90", s)) for s in range(5)]
    truth = np.quantile(values, 0.9)
    assert all(isinstance(p, float | int) for p in picks)
    assert all(abs(p - truth) < 3 for p in picks)
    assert all(2 * p == int(2 * p) for p in picks)  # on the 0.5 grid


def test_values_are_clamped_into_bounds():
    values = np.array([-1000.0] * 30 + [1000.0] * 31)
    picks = {median_of(values, (0, 10), 1, 2, stream("clamp", i)) for i in range(40)}
    # 30 values clamp to 0 and 31 to 10: 10 is the median (loss 0) and every other
    # candidate is half a rank from one (loss 1/2), so any grid point may come out ...
    assert picks <= set(range(11)) and len(picks) > 3
    counts = np.bincount(quantile_positions(values, (0, 10), 1)[0], minlength=11)
    assert list(counts) == [30] + [0] * 9 + [31]
    assert list(quantile_losses(counts, Fraction(1, 2))) == [Fraction(1, 2)] * 10 + [0]


def test_quantile_loss_ranks_tied_values_correctly():
    # 200 values at 30 and one at 100: 30 is the median. The plain |#{x < o} - q·n|
    # would give 30 the loss 100.5 and 31..100 the loss 99.5.
    counts = np.zeros(121, dtype=np.int64)
    counts[30], counts[100] = 200, 1
    losses = quantile_losses(counts, Fraction(1, 2))
    assert losses[30] == 0 and min(losses[:30]) == Fraction(201, 2)
    assert all(loss == Fraction(199, 2) for loss in losses[31:101])
    assert median_of(np.array([30.0] * 200 + [100.0]), (0, 120), 1, 2, stream("ties")) == 30


def test_dp_top_k_peeling_picks_the_clear_winners_in_order():
    counts = np.array([5, 900, 10, 700, 800, 0])
    labels = ["a", "b", "c", "d", "e", "f"]
    picked = top_k_of(counts, 3, 3, stream("topk"), candidates=labels)
    assert picked == ["b", "e", "d"]
    assert top_k_of(counts, 2, 3, stream("topk2")) == [1, 4]


def test_top_k_epsilon_split_is_stated_and_composes_below_epsilon():
    per_round = top_k_mechanism(1, 4)
    assert per_round.epsilon == Fraction(1, 4)
    assert 4 * per_round.pure_epsilon <= 1
    monotone = top_k_mechanism(1, 4, monotone=True)
    # monotone: c = 1 instead of 2, so η about doubles for the same ε.
    assert monotone.eta_bounds[0] > 1.9 * per_round.eta_bounds[1]


def test_dp_top_k_first_pick_follows_the_exponential_mechanism():
    # With k = 1 the pick is the exponential mechanism on -counts: χ² against it.
    counts = np.array([3, 5, 4, 0])
    mechanism = top_k_mechanism(1, 1)
    source = stream("topk-chi2")
    n = 1500
    picks = [top_k_of(counts, 1, 1, source)[0] for _ in range(n)]
    weights = np.array([float(mechanism.base) ** -c for c in counts])
    expected = n * weights / weights.sum()
    observed = np.bincount(picks, minlength=4)
    chi2 = np.sum((observed - expected) ** 2 / expected)
    assert chi2 < stats.chi2.isf(1e-4, 3)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda s: median_of([1.0], (0, 10), 1, 0, s), ValueError, "epsilon must be > 0"),
        (lambda s: median_of([1.0], (0, 10), 1, -2, s), ValueError, "epsilon must be > 0"),
        (lambda s: median_of([1.0], (10, 0), 1, 1, s), ValueError, r"bounds \(10, 0\) are rev"),
        (lambda s: median_of([1.0], (0, 10), 0, 1, s), ValueError, "granularity must be > 0"),
        (lambda s: median_of([1.0], (0, 10**9), "1/100", 1, s), ValueError, "coarser granul"),
        (lambda s: median_of([1.0, np.nan], (0, 1), 1, 1, s), ValueError, r"values\[1\] is NaN"),
        (lambda s: median_of([1.0], (0, np.inf), 1, 1, s), ValueError, "bounds upper must be fin"),
        (lambda s: quantile_of([1.0], 2, (0, 1), 1, 1, s), ValueError, "q must be in"),
        (
            lambda s: median_of([1.0], (0, 1), 1, BaseTwoExponential(1, monotone=True), s),
            ValueError,
            "not monotone",
        ),
        (lambda s: top_k_of([], 1, 1, s), ValueError, "counts_by_candidate is empty"),
        (lambda s: top_k_of([1, 2], 3, 1, s), ValueError, "k = 3 is larger than the number"),
        (lambda s: top_k_of([1, 2], 0, 1, s), ValueError, "k must be >= 1"),
        (lambda s: top_k_of([1.0, np.nan], 1, 1, s), ValueError, r"counts_by_candidate\[1\]"),
        (lambda s: top_k_of([1, 2], 1, 0, s), ValueError, "epsilon must be > 0"),
        (
            lambda s: top_k_of([1, 2], 1, 1, s, candidates=["a"]),
            ValueError,
            "candidates has 1 entries",
        ),
    ],
)
def test_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call(stream("bad"))


def _one_shot_first_pick_probability(counts: tuple[int, int], scale: float) -> float:
    """P[counts[0] + N0 >= counts[1] + N1], N0, N1 iid discrete Laplace (ties go to index 0)."""
    support = np.arange(-400, 401)
    q = np.exp(-1 / scale)
    pmf = (1 - q) / (1 + q) * q ** np.abs(support)
    difference = np.convolve(pmf, pmf[::-1])  # pmf of N1 - N0 on [-800, 800]
    values = np.arange(-800, 801)
    return float(difference[values <= counts[0] - counts[1]].sum())


def test_one_shot_top_k_noise_scale_is_delta1_over_epsilon():
    # k = 1 over counts (5, 4): the pick is index 0 iff 5 + N0 >= 4 + N1. Under
    # replace-one (monotone=False) Δ₁ = 2, so ε = 1 means scale 2: p0 ≈ 0.680;
    # a wiring error to scale 1 gives p0 ≈ 0.822, to scale 4 p0 ≈ 0.593. With
    # n = 3000 the acceptance region for scale 2 lies > 6 standard deviations
    # from the rejection thresholds of both wrong scales, so the power checks
    # fail with negligible probability.
    n = 3000
    source = stream("one-shot")
    picks = [top_k_of([5, 4], 1, 1, source, method="one_shot")[0] for _ in range(n)]
    first = picks.count(0)
    p0 = _one_shot_first_pick_probability((5, 4), 2.0)
    # Two-sided binomial test at false-positive rate 1e-4 (pinned).
    assert stats.binomtest(first, n, p0).pvalue > 1e-4
    # Power: the same count would be rejected for the neighbouring scales.
    for wrong in (1.0, 4.0):
        assert (
            stats.binomtest(first, n, _one_shot_first_pick_probability((5, 4), wrong)).pvalue < 1e-4
        )


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(1, 3), Fraction(9, 10)])
def test_quantile_keystream_does_not_depend_on_whether_q_n_is_an_integer(q):
    # q·n is an integer for some n and a fraction for others (n is data): the
    # rounding draws are fixed by the public denominator of q, so every data set
    # with the same candidates reads the same bytes under one key.
    candidates = list(range(30))
    mechanism = quantile_mechanism(1)
    rng = np.random.default_rng(5)  # test data only
    drawn = set()
    for n in (60, 61, 62, 90, 91):
        counts = np.bincount(rng.integers(0, 30, size=n), minlength=30)
        source = CountingStream(bytes(range(32)))
        select_quantile(counts, q, candidates, mechanism, source)
        drawn.add((source.drawn, source.random_bytes(16)))
    assert len(drawn) == 1
