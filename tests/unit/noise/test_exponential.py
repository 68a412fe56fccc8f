"""Tests of the exact base-2 exponential mechanism (Ilvento 2020).

Statistical tests use fixed keys (deterministic), pinned false-positive rates
and a stated power: a base off by 5% (|O| = 10) or 3% (|O| = 1000, by level)
must fail the same test with the same sample.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from counting_stream import CountingStream
from scipy import stats

from dp_pipeline import BaseTwoExponential, MasterKey
from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms.exponential import DEFAULT_UTILITY_DENOMINATOR
from dp_pipeline.mechanisms.exponential_base import choose_base, ln_bounds
from dp_pipeline.noise.exponential import exponential_sample_scaled, round_ups
from dp_pipeline.noise.weight_tree import (
    PREFIX_BITS,
    PrefixWeights,
    WeightTree,
    locate_by_linear_scan,
    weights_for,
)
from dp_pipeline.randomness import derive_stream

KEY = MasterKey(bytes(range(32)))
ALPHA = 1e-4  # false-positive rate of every goodness-of-fit test below
MPMATH_DPS = 60  # decimal digits: tests/conftest.py sets them for each test


def stream(*labels):
    return derive_stream(KEY, "test_exponential", *labels)


def exact_pmf(base: Fraction, utilities) -> np.ndarray:
    """P(o) ∝ base**u(o) for integer utilities, exact integer weights, correctly rounded floats."""
    utilities = [int(u) for u in utilities]
    top = max(utilities)
    weights = [base.numerator**u * base.denominator ** (top - u) for u in utilities]
    total = sum(weights)
    return np.array([w / total for w in weights])  # int / int is correctly rounded


def rounded_pmf(base: Fraction, utilities: list[Fraction]) -> np.ndarray:
    """Exact pmf under independent randomized rounding: enumerate every rounding."""
    fractional = [i for i, u in enumerate(utilities) if u.denominator != 1]
    pmf = np.zeros(len(utilities))
    for ups in itertools.product((0, 1), repeat=len(fractional)):
        rounded = [math.floor(u) for u in utilities]
        probability = Fraction(1)
        for i, up in zip(fractional, ups, strict=True):
            frac = utilities[i] - math.floor(utilities[i])
            rounded[i] += up
            probability *= frac if up else 1 - frac
        pmf += float(probability) * exact_pmf(base, rounded)
    return pmf


def chi2_statistic(counts: np.ndarray, pmf) -> float:
    expected = counts.sum() * np.asarray(pmf, dtype=float)
    return float(np.sum((counts - expected) ** 2 / expected))


def chi2_power(pmf, alternative, n: int) -> float:
    """Power of the level-ALPHA χ² test of ``pmf`` when samples follow ``alternative``."""
    p = np.asarray(pmf, dtype=float)
    q = np.asarray(alternative, dtype=float)
    df = p.size - 1
    noncentrality = n * np.sum((q - p) ** 2 / p)
    return float(stats.ncx2.sf(stats.chi2.isf(ALPHA, df), df, noncentrality))


# ----------------------------------------------------------------- parameters

EPSILONS = ["1/1000", "1/10", "1/2", 1, 3, 10, 50]


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize(("monotone", "sensitivity"), [(False, 1), (True, 1), (False, "3/2")])
def test_eta_is_the_largest_not_above_target(epsilon, monotone, sensitivity):
    mechanism = BaseTwoExponential(epsilon, utility_sensitivity=sensitivity, monotone=monotone)
    x, y, z = mechanism.base_numerator, mechanism.base_denominator_bits, mechanism.base_power
    factor = 1 if monotone else 2
    # The randomly rounded levels move by ceil(Δu) (module docstring), so the
    # target is ε/(c·ceil(Δu)): 2 for Δu = 3/2.
    levels = math.ceil(Fraction(sensitivity))
    assert mechanism.level_sensitivity == levels
    target = mpmath.mpf(Fraction(epsilon).numerator) / Fraction(epsilon).denominator
    target /= factor * levels
    # Independent check (mpmath, 60 digits): η·ln2 = z·ln(2**y/x) <= ε/(c·ceil(Δu)) ...
    eta_ln2 = z * mpmath.log(mpmath.mpf(2**y) / x)
    assert eta_ln2 <= target
    # ... and the just-larger base numerator's twin (x - 1) would exceed it.
    if x > 1:
        assert z * mpmath.log(mpmath.mpf(2**y) / (x - 1)) > target
    # pure ε is an upper bound on c·ceil(Δu)·η·ln2, tight to 2**-60, never above the target ε.
    reported = mechanism.pure_epsilon
    exact = factor * eta_ln2 * levels
    assert mpmath.mpf(reported.numerator) / reported.denominator >= exact
    assert mpmath.mpf(reported.numerator) / reported.denominator - exact < mpmath.mpf(2) ** -60
    assert reported <= mechanism.epsilon
    assert mechanism.base == Fraction(x, 2**y) ** z
    # With base_bits = 8 the chosen η is within 2% of the target (1/(x·τ) with x >= 128).
    assert eta_ln2 >= target * mpmath.mpf("0.98")


def test_ln_bounds_match_mpmath():
    for r in [Fraction(4, 3), Fraction(2), Fraction(256, 155), Fraction(10**6, 7)]:
        low, high = ln_bounds(r, 100)
        truth = mpmath.log(mpmath.mpf(r.numerator) / r.denominator)
        assert mpmath.mpf(low.numerator) / low.denominator <= truth
        assert truth <= mpmath.mpf(high.numerator) / high.denominator
        assert high - low <= Fraction(1, 2**100)


def test_choose_base_examples():
    # ε = 1, not monotone: target ln-ratio 1/2; x = ceil(2**8·e**-0.5) = 156 -> 39/64.
    assert choose_base(Fraction(1, 2), 8) == (39, 6, 1)
    # Tiny ε needs more than base_bits bits (x = 2**y would mean η = 0).
    x, y, z = choose_base(Fraction(1, 10**6), 8)
    assert y > 8 and x < 2**y and z == 1
    assert choose_base(Fraction(1, 2), 12)[1] >= 10


def test_for_base_gives_the_requested_base_and_its_epsilon():
    mechanism = BaseTwoExponential.for_base(1, 1, 1)
    assert mechanism.base == Fraction(1, 2)
    assert mechanism.pure_epsilon >= 2 * Fraction(math.log(2))  # 2·η·ln2 with η = 1
    assert float(mechanism.pure_epsilon) == pytest.approx(2 * math.log(2), abs=1e-15)
    monotone = BaseTwoExponential.for_base(3, 2, 1, monotone=True)
    assert float(monotone.pure_epsilon) == pytest.approx(math.log(4 / 3), abs=1e-15)


def test_privacy_loss_pmfs_is_randomized_response_at_epsilon():
    mechanism = BaseTwoExponential("7/10")
    p, q = mechanism.privacy_loss_pmfs()
    assert p.shape == q.shape == (2,)
    assert p.sum() == pytest.approx(1) and q.sum() == pytest.approx(1)
    np.testing.assert_array_equal(q, p[::-1])
    # The loss log(p/q) is not below the (rounded-up) exact ε.
    assert math.log(p[0] / q[0]) >= float(mechanism.pure_epsilon) - 1e-15
    assert math.log(p[0] / q[0]) == pytest.approx(float(mechanism.pure_epsilon), rel=1e-12)


def test_mechanism_is_a_frozen_value():
    mechanism = BaseTwoExponential(1)
    with pytest.raises(AttributeError):
        mechanism.epsilon = Fraction(2)
    assert mechanism == BaseTwoExponential("1")
    assert mechanism.name == "base2_exponential"


# ------------------------------------------------------------ exact locating


def test_tree_descent_agrees_with_the_literal_linear_scan():
    rng = np.random.default_rng(7)  # test data only
    for a, shift, levels in [(3, 2, 1), (39, 6, 13), (1, 1, 8), (25, 5, 31), (131, 8, 64)]:
        counts = [int(c) for c in rng.integers(0, 4, size=levels)]
        counts[0] += 1
        tree = WeightTree(counts, a, shift)
        total = tree.total
        draws = range(total) if total <= 2000 else [int(rng.integers(0, 2**62)) % total]
        draws = list(draws) + [0, total - 1] + [(total * i) // 97 for i in range(97)]
        for draw in draws:
            expected = locate_by_linear_scan(counts, a, shift, draw)
            assert tree.locate(draw) == expected
            assert tree.locate(draw, constant_work=False) == expected  # optimized descent


def test_cumulative_sums_locate_every_draw_as_the_tree_and_the_literal_scan():
    rng = np.random.default_rng(11)  # test data only
    for a, shift, levels in [(3, 2, 1), (3, 2, 2), (39, 6, 13), (1, 1, 8), (845, 10, 262)]:
        counts = [int(c) for c in rng.integers(0, 3, size=levels)]
        counts[rng.integers(0, levels)] += 1
        prefix, tree = PrefixWeights(counts, a, shift), WeightTree(counts, a, shift)
        assert prefix.total == tree.total and prefix.level_count == levels
        total = tree.total
        draws = range(total) if total <= 2000 else [int(rng.integers(0, 2**62)) % total]
        draws = list(draws) + [0, total - 1] + [(total * i) // 97 for i in range(97)]
        for draw in draws:
            expected = locate_by_linear_scan(counts, a, shift, draw)
            assert prefix.locate(draw) == expected == tree.locate(draw)


def test_the_layout_depends_on_the_public_level_count_and_shift_only():
    assert isinstance(weights_for([0] * 261 + [1], 845, 10), PrefixWeights)
    assert isinstance(weights_for([1] + [0] * 261, 845, 10), PrefixWeights)
    wide = int((PREFIX_BITS // 10) ** 0.5) + 1
    assert isinstance(weights_for([1] * wide, 845, 10), WeightTree)


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(9, 10), Fraction(1, 3)])
def test_scaled_utilities_sample_what_the_fractions_sample(q):
    mechanism = BaseTwoExponential("1/2", tail_bits=16)
    rng = np.random.default_rng(5)  # test data only
    for trial in range(30):
        counts = rng.integers(0, 6, size=40)
        n = int(counts.sum())
        through = np.cumsum(counts)
        below = through - counts
        pairs = zip(below.tolist(), through.tolist(), strict=True)
        losses = [max(Fraction(0), b - q * n, q * n - t) for b, t in pairs]
        denominator = (q * n).denominator
        numerators = np.array([int(u * denominator) for u in losses], dtype=np.int64)
        for bound in (q.denominator, 2 * q.denominator):
            labels = ("scaled", str(q), trial, bound)
            expected = mechanism.sample(
                np.array(losses, dtype=object), stream(*labels), utility_denominator=bound
            )
            got = exponential_sample_scaled(
                mechanism, numerators, denominator, stream(*labels), utility_denominator=bound
            )
            assert got == expected


def test_scaled_utilities_refuse_what_is_not_an_int64_vector():
    mechanism = BaseTwoExponential(1)
    with pytest.raises(InternalError, match="non-empty 1-D int64 array"):
        exponential_sample_scaled(mechanism, np.array([1.5, 2.0]), 2, stream("bad"))
    with pytest.raises(ValueError, match="denominator must be >= 1"):
        exponential_sample_scaled(mechanism, np.array([1, 2]), 0, stream("bad"))
    with pytest.raises(ValueError, match="does not divide utility_denominator=2"):
        exponential_sample_scaled(
            mechanism, np.array([1, 2]), 3, stream("bad"), utility_denominator=2
        )


# --------------------------------------------------------------- χ² of the sampler


def test_chi2_ten_outcomes_integer_utilities():
    mechanism = BaseTwoExponential("1/4", utility_bounds=(0, 9))
    utilities = np.arange(10)
    n = 4000
    pmf = exact_pmf(mechanism.base, utilities.tolist())
    draws = mechanism.sample(utilities, stream("chi2-10"), size=n)
    counts = np.bincount(draws, minlength=10)
    threshold = stats.chi2.isf(ALPHA, 9)
    assert chi2_statistic(counts, pmf) < threshold
    for factor in (Fraction(105, 100), Fraction(95, 100)):  # a base off by 5% must fail
        wrong = exact_pmf(mechanism.base * factor, utilities.tolist())
        assert chi2_power(wrong, pmf, n) > 0.99
        assert chi2_statistic(counts, wrong) > threshold


def test_chi2_ten_outcomes_rounded_utilities():
    texts = ["0", "1/2", "5/4", "2", "11/4", "4", "11/2", "7", "17/2", "9"]
    utilities = [Fraction(v) for v in texts]
    mechanism = BaseTwoExponential("1/4", utility_bounds=(0, 9))
    n = 4000
    pmf = rounded_pmf(mechanism.base, utilities)
    draws = mechanism.sample(np.array(utilities, dtype=object), stream("chi2-10r"), size=n)
    counts = np.bincount(draws, minlength=10)
    threshold = stats.chi2.isf(ALPHA, 9)
    assert chi2_statistic(counts, pmf) < threshold
    wrong = rounded_pmf(mechanism.base * Fraction(105, 100), utilities)
    assert chi2_power(wrong, pmf, n) > 0.99
    assert chi2_statistic(counts, wrong) > threshold
    # The same utilities as floats take the same exact path.
    floats = np.array([float(u) for u in utilities])
    float_draws = mechanism.sample(floats, stream("chi2-10r"), size=200)
    np.testing.assert_array_equal(float_draws, draws[:200])


@pytest.mark.parametrize("rounded", [False, True])
def test_chi2_thousand_outcomes(rounded):
    mechanism = BaseTwoExponential("1/10", utility_bounds=(0, 16))
    utilities = [Fraction(o % 16) for o in range(1000)]
    if rounded:
        for i in (3, 500, 998):
            utilities[i] += Fraction(1, 2)
    n = 4000
    pmf = rounded_pmf(mechanism.base, utilities)
    array = np.array(utilities, dtype=object) if rounded else np.arange(1000) % 16
    draws = mechanism.sample(array, stream("chi2-1000", int(rounded)), size=n)
    counts = np.bincount(draws, minlength=1000)
    # Expected counts >= 2.6 per cell: with 999 degrees of freedom the χ²
    # approximation is accurate well below the textbook 5 (Koehler & Larntz 1980).
    assert pmf.min() * n > 2.5
    assert chi2_statistic(counts, pmf) < stats.chi2.isf(ALPHA, 999)
    # Power, on the 16 utility levels: a base off by 3% must fail.
    level = np.array([int(u) for u in utilities])
    by_level = np.bincount(level, weights=counts, minlength=16)
    level_pmf = np.bincount(level, weights=pmf, minlength=16)
    wrong = rounded_pmf(mechanism.base * Fraction(103, 100), utilities)
    wrong_level = np.bincount(level, weights=wrong, minlength=16)
    threshold = stats.chi2.isf(ALPHA, 15)
    assert chi2_statistic(by_level, level_pmf) < threshold
    assert chi2_power(wrong_level, level_pmf, n) > 0.99
    assert chi2_statistic(by_level, wrong_level) > threshold


# ---------------------------------------------- discrete Laplace via u(o) = |f - o|


def dkw_threshold(n: int) -> float:
    """Dvoretzky-Kiefer-Wolfowitz (Massart 1990): P[sup|F_n - F| > t] <= 2·exp(-2nt²)."""
    return math.sqrt(math.log(2 / ALPHA) / (2 * n))


def test_simulated_discrete_laplace_matches_exact_discrete_laplace():
    # u(o) = |0 - o| on the grid -20..20: P(o) ∝ 2**(-η|o|), the discrete Laplace
    # Lap_Z(1/(η ln 2)) truncated to the grid.
    mechanism = BaseTwoExponential(1, utility_bounds=(0, 20), monotone=False)
    grid = np.arange(-20, 21)
    n = 6000
    draws = grid[mechanism.sample(np.abs(grid), stream("laplace"), size=n)]
    pmf = exact_pmf(mechanism.base, np.abs(grid).tolist())
    empirical = np.searchsorted(np.sort(draws), grid, side="right") / n
    ks = np.max(np.abs(empirical - np.cumsum(pmf)))
    assert ks < dkw_threshold(n)
    # Power: a discrete Laplace whose scale is 25% larger is rejected.
    scale = 1 / (-math.log(float(mechanism.base)))
    wider = np.exp(-np.abs(grid) / (1.25 * scale))
    wider /= wider.sum()
    assert np.max(np.abs(empirical - np.cumsum(wider))) > dkw_threshold(n)


def test_rounded_laplace_is_close_to_the_naive_float_mechanism():
    # f(d) = 0.3, u(o) = |f - o|: every utility is fractional and randomly rounded.
    # The naive float mechanism samples P(o) ∝ 2**(-η|f-o|) in floating point.
    # Ilvento (2020, Section 4.1) reports KS ≈ 0.02 between the two; we pin
    # 0.05 and check the distance to a twice-as-wide naive Laplace is larger.
    mechanism = BaseTwoExponential(1, utility_bounds=(0, 21))
    grid = np.arange(-20, 21)
    utilities = np.abs(0.3 - grid)
    n = 3000
    draws = grid[mechanism.sample(utilities, stream("rounded-laplace"), size=n)]
    empirical = np.searchsorted(np.sort(draws), grid, side="right") / n
    eta = -math.log2(float(mechanism.base))
    naive = 2.0 ** (-eta * utilities)
    naive /= naive.sum()
    ks = np.max(np.abs(empirical - np.cumsum(naive)))
    assert ks < 0.05
    wide = 2.0 ** (-eta * utilities / 2)
    wide /= wide.sum()
    assert np.max(np.abs(empirical - np.cumsum(wide))) > 0.1


# ------------------------------------------------------------------ timing defence


def timing_utilities():
    """Ilvento (2020, Section 4): 256 outcomes, η = 1; total weights 128.5 vs 128."""
    u0 = np.ones(256, dtype=np.int64)
    u0[0] = 0
    return u0, np.ones(256, dtype=np.int64)


def test_timing_defence_pass_counts():
    u0, u1 = timing_utilities()
    runs = 400
    # k = 1 (no defence): u1 never rejects; u0 rejects with probability 255/512.
    bare = BaseTwoExponential.for_base(1, 1, 1, utility_bounds=(0, 1), min_passes=1)
    stream0, stream1 = stream("k1", "u0"), stream("k1", "u1")
    passes0 = [bare.sample_with_passes(u0, stream0)[1] for _ in range(runs)]
    passes1 = [bare.sample_with_passes(u1, stream1)[1] for _ in range(runs)]
    assert set(passes1) == {1}
    # Geometric with success 257/512: mean 512/257 ≈ 1.99; pinned far from 1.
    assert np.mean(passes0) > 1.5
    # Default k = 20: both run exactly k passes (differs with probability < 2**-20 each run).
    defended = BaseTwoExponential.for_base(1, 1, 1, utility_bounds=(0, 1))
    assert defended.min_passes == 20
    stream0, stream1 = stream("k20", "u0"), stream("k20", "u1")
    passes0 = [defended.sample_with_passes(u0, stream0)[1] for _ in range(runs)]
    passes1 = [defended.sample_with_passes(u1, stream1)[1] for _ in range(runs)]
    assert passes0 == passes1 == [20] * runs
    # They also consume the same amount of keystream: next bytes of twin streams agree.
    twin0, twin1 = stream("same"), stream("same")
    defended.sample(u0, twin0)
    defended.sample(u1, twin1)
    assert twin0.random_bytes(16) == twin1.random_bytes(16)


def test_optimized_variant_stops_at_first_acceptance():
    u0, _ = timing_utilities()
    fast = BaseTwoExponential.for_base(1, 1, 1, utility_bounds=(0, 1), optimized=True)
    source = stream("opt")
    passes = [fast.sample_with_passes(u0, source)[1] for _ in range(200)]
    assert min(passes) == 1 and np.mean(passes) < 3


# ------------------------------------------- randomized rounding: ε and keystream


def exact_rounded_pmf(base: Fraction, utilities: list[Fraction]) -> list[Fraction]:
    """The exact output distribution: every rounding enumerated, exact weights."""
    fractional = [i for i, u in enumerate(utilities) if u.denominator != 1]
    pmf = [Fraction(0)] * len(utilities)
    for ups in itertools.product((0, 1), repeat=len(fractional)):
        rounded = [math.floor(u) for u in utilities]
        probability = Fraction(1)
        for i, up in zip(fractional, ups, strict=True):
            frac = utilities[i] - math.floor(utilities[i])
            rounded[i] += up
            probability *= frac if up else 1 - frac
        weights = [base**r for r in rounded]
        total = sum(weights)
        for o, weight in enumerate(weights):
            pmf[o] += probability * weight / total
    return pmf


def max_ratio(p: list[Fraction], q: list[Fraction]) -> Fraction:
    return max(max(a / b, b / a) for a, b in zip(p, q, strict=True))


def log_of(value: Fraction):
    return mpmath.log(mpmath.mpf(value.numerator) / value.denominator)


def neighbours(utilities, sensitivity: Fraction, monotone: bool, step: Fraction):
    """Every utility vector within ``sensitivity`` of ``utilities`` on a grid of ``step``."""
    moves = [step * k for k in range(-int(sensitivity / step), int(sensitivity / step) + 1)]
    for delta in itertools.product(moves, repeat=len(utilities)):
        if monotone and not (min(delta) >= 0 or max(delta) <= 0):
            continue
        yield [u + d for u, d in zip(utilities, delta, strict=True)]


# (base (x, y, z), Δu, monotone, a neighbouring pair whose exact ratio exceeds
# the naive e**(c·Δu·η·ln2) that ignored the rounding). The first pair is the
# one reported against the old rule: 137/17 ≈ 8.06 against a declared e**ε = 4.
ROUNDING_CASES = [
    ((1, 4, 1), Fraction(1, 2), True, ([0, Fraction(3, 2)], [0, 2])),
    # Not monotone, base 1/4: 163/40 ≈ 4.08 against the naive e**ε = 4 (<= 16).
    ((1, 2, 1), Fraction(1, 2), False, ([Fraction(1, 2), Fraction(3, 2)], [0, 2])),
    # Δu = 3/2, monotone, base 1/16: 4883/68 ≈ 71.8 against the naive 2**6 = 64 (<= 256).
    ((1, 4, 1), Fraction(3, 2), True, ([0, Fraction(1, 2)], [0, 2])),
]


@pytest.mark.parametrize(("base", "sensitivity", "monotone", "pair"), ROUNDING_CASES)
def test_declared_epsilon_bounds_the_exact_ratio_for_non_integer_sensitivity(
    base, sensitivity, monotone, pair
):
    mechanism = BaseTwoExponential.for_base(
        *base, utility_sensitivity=sensitivity, monotone=monotone
    )
    factor = 1 if monotone else 2
    eta_ln2 = base[2] * mpmath.log(mpmath.mpf(2 ** base[1]) / base[0])
    declared = mpmath.mpf(mechanism.pure_epsilon.numerator) / mechanism.pure_epsilon.denominator
    assert mechanism.level_sensitivity == math.ceil(sensitivity)
    assert declared >= factor * eta_ln2 * math.ceil(sensitivity)
    # The twin: the pair's exact ratio is above what the old rule (Δu, not
    # ceil(Δu)) declared, and within the declared ε.
    u, v = ([Fraction(x) for x in side] for side in pair)
    assert all(abs(a - b) <= sensitivity for a, b in zip(u, v, strict=True))
    ratio = max_ratio(exact_rounded_pmf(mechanism.base, u), exact_rounded_pmf(mechanism.base, v))
    naive = factor * eta_ln2 * sensitivity.numerator / sensitivity.denominator
    assert log_of(ratio) > naive
    assert log_of(ratio) <= declared
    # Every neighbour of every vector on a small grid (two outcomes, quarter steps).
    grid = [Fraction(k, 4) for k in range(9)]
    worst = Fraction(1)
    for start in itertools.product(grid, repeat=2):
        p = exact_rounded_pmf(mechanism.base, list(start))
        for other in neighbours(start, sensitivity, monotone, Fraction(1, 4)):
            worst = max(worst, max_ratio(p, exact_rounded_pmf(mechanism.base, other)))
    assert log_of(worst) <= declared


def test_epsilon_built_mechanism_uses_the_rounded_sensitivity():
    # Asking for ε ≈ ln 4 at Δu = 1/2 (monotone) now picks η·ln2 <= ln 4 (not 2·ln 4),
    # and the reported pair stays within the requested ε.
    epsilon = Fraction(1386294361, 10**9)  # just below ln 4
    mechanism = BaseTwoExponential(epsilon, utility_sensitivity="1/2", monotone=True)
    assert mechanism.pure_epsilon <= epsilon
    ratio = max_ratio(
        exact_rounded_pmf(mechanism.base, [Fraction(0), Fraction(3, 2)]),
        exact_rounded_pmf(mechanism.base, [Fraction(0), Fraction(2)]),
    )
    assert log_of(ratio) <= mpmath.mpf(epsilon.numerator) / epsilon.denominator
    # The same ε with the integer Δu = 1 gives the same base: ceil(1/2) = 1.
    assert mechanism.base == BaseTwoExponential(epsilon, monotone=True).base


def bytes_drawn(mechanism, utilities, size=None, **options) -> tuple[int, bytes]:
    """(bytes read by one call, the next 16 bytes) on a fresh stream under one key."""
    source = CountingStream(bytes(range(32)))
    mechanism.sample(utilities, source, size, **options)
    drawn = source.drawn
    return drawn, source.random_bytes(16)


def same_size_data_sets(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(11)  # test data only
    whole = rng.integers(0, 30, size=n)
    return [
        whole,  # integers
        np.array([Fraction(int(w), 2) for w in whole], dtype=object),  # halves
        np.array([Fraction(int(w), 64) for w in rng.integers(0, 1900, n)], dtype=object),
        np.abs(0.3 - np.arange(n)),  # floats, every one fractional
        np.array([Fraction(int(w)) + Fraction(1, 2**64) for w in whole], dtype=object),
    ]


@pytest.mark.parametrize("bounds", [(0, 40), None])
def test_rounding_reads_the_same_keystream_for_every_data_set_of_a_size(bounds):
    mechanism = BaseTwoExponential(1, utility_bounds=bounds)
    n = 60
    results = [bytes_drawn(mechanism, data) for data in same_size_data_sets(n)]
    assert len(set(results)) == 1, results
    # One 64-bit word per outcome for the rounding, fractional or not, then the passes.
    alone = bytes_drawn(mechanism, np.arange(n), utility_denominator=1)[0]
    assert results[0][0] == alone + 8 * n
    # sample(size=...) redraws the rounding for every sample, integers included.
    sized = {bytes_drawn(mechanism, data, size=3) for data in same_size_data_sets(n)}
    assert len(sized) == 1


def test_rounding_keystream_with_a_non_binary_denominator_ignores_the_data():
    # utility_denominator = 10: rejection draws, whose count depends on the
    # keystream only, so one key reads the same bytes for tenths, halves, integers.
    mechanism = BaseTwoExponential(1, utility_bounds=(0, 40))
    rng = np.random.default_rng(12)  # test data only
    data_sets = [
        np.array([Fraction(int(w), 10) for w in rng.integers(0, 400, 50)], dtype=object),
        np.array([Fraction(int(w), 2) for w in rng.integers(0, 80, 50)], dtype=object),
        rng.integers(0, 40, 50),
    ]
    results = {bytes_drawn(mechanism, data, utility_denominator=10) for data in data_sets}
    assert len(results) == 1


class FixedWords:
    """Hands out given 64-bit words / uniform draws, to test the rounding thresholds."""

    def __init__(self, values) -> None:
        self.values = values

    def random_uint64(self, n):
        return np.array(self.values[:n], dtype=np.uint64)

    def uniform_below(self, bounds):
        return np.array(self.values[: len(bounds)], dtype=np.int64)


@pytest.mark.parametrize(
    ("remainder", "denominator", "bound", "words", "ups"),
    [
        # up iff V < frac·2**64: the boundary word is exactly frac·2**64.
        (1, 2, 2**64, [2**63 - 1, 2**63], [1, 0]),
        (3, 4, 2**64, [3 * 2**62 - 1, 3 * 2**62], [1, 0]),
        (1, 2**64, 2**64, [0, 1], [1, 0]),
        (0, 1, 2**64, [0, 2**64 - 1], [0, 0]),  # integers never round up
        (1, 3, 3, [0, 1, 2], [1, 0, 0]),  # probability exactly 1/3
        (2, 3, 6, [3, 4, 5], [1, 0, 0]),  # 2/3 = 4/6: up iff V < 4
    ],
)
def test_rounding_thresholds_are_exact(remainder, denominator, bound, words, ups):
    remainders = np.full(len(words), remainder, dtype=np.int64)
    got = round_ups(remainders, denominator, bound, FixedWords(words))
    assert got.tolist() == ups


@pytest.mark.parametrize(
    ("utilities", "options", "message"),
    [
        (
            [0, Fraction(1, 3)],
            {},
            r"utilities\[1\] has denominator 3, which does not divide "
            r"utility_denominator=18446744073709551616",
        ),
        ([0, 1e-30], {}, r"utilities\[1\] has denominator \d+, which does not divide"),
        ([1, Fraction(1, 2)], {"utility_denominator": 1}, r"utilities\[1\] has denominator 2"),
        ([Fraction(1, 10)], {"utility_denominator": 4}, r"a multiple of 10 \(e\.g\. 20\)"),
    ],
)
def test_utilities_finer_than_the_rounding_precision_are_refused(utilities, options, message):
    source = CountingStream(bytes(32))
    with pytest.raises(ValueError, match=message) as raised:
        BaseTwoExponential(1).sample(np.array(utilities, dtype=object), source, **options)
    # The message states the rule and the fix, and nothing was drawn.
    assert "every utility must be a multiple of 1/utility_denominator" in str(raised.value)
    assert "pass a utility_denominator" in str(raised.value)
    assert source.drawn == 0


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "utility_denominator must be >= 1, got 0"),
        (True, TypeError, "utility_denominator must be a positive integer, got True"),
        (2.0, TypeError, "utility_denominator must be a positive integer, got 2.0"),
    ],
)
def test_bad_utility_denominator(value, error, message):
    with pytest.raises(error, match=message):
        BaseTwoExponential(1).sample(np.arange(3), stream("bad"), utility_denominator=value)


def test_default_utility_denominator_is_one_word():
    assert DEFAULT_UTILITY_DENOMINATOR == 2**64


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"epsilon": 0}, ValueError, "epsilon must be > 0"),
        ({"epsilon": -1}, ValueError, "epsilon must be > 0"),
        ({"epsilon": float("nan")}, ValueError, "epsilon must be finite"),
        ({"epsilon": 1, "utility_sensitivity": 0}, ValueError, "utility_sensitivity must be > 0"),
        ({"epsilon": 1, "utility_bounds": (5, 2)}, ValueError, r"utility_bounds \(5, 2\) are rev"),
        ({"epsilon": 1, "utility_bounds": (0.5, 2)}, TypeError, "utility_bounds lower must be an"),
        ({"epsilon": 1, "utility_bounds": 3}, TypeError, "utility_bounds must be a pair"),
        ({"epsilon": 1, "min_passes": 0}, ValueError, "min_passes must be >= 1"),
        ({"epsilon": 1, "monotone": "yes"}, TypeError, "monotone must be True or False"),
        ({"epsilon": 1, "exact_base": (4, 2, 1)}, ValueError, "exact_base needs x < 2"),
        ({"epsilon": "1/100", "exact_base": (1, 1, 1)}, ValueError, "above epsilon"),
    ],
)
def test_bad_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        BaseTwoExponential(**kwargs)


@pytest.mark.parametrize(
    ("utilities", "error", "message"),
    [
        ([], ValueError, "utilities is empty"),
        (np.array([1.0, float("nan"), 2.0]), ValueError, r"utilities\[1\] is nan"),
        (np.array([1.0, float("inf")]), ValueError, r"utilities\[1\] is inf"),
        (np.array([[1, 2]]), ValueError, "1-D"),
        (np.array(["a", "b"]), TypeError, "utilities must be numbers"),
        (np.array([1, None], dtype=object), TypeError, r"utilities\[1\] must be a number"),
    ],
)
def test_bad_utilities(utilities, error, message):
    with pytest.raises(error, match=message):
        BaseTwoExponential(1).sample(utilities, stream("bad"))


def test_too_wide_utility_range_is_refused_before_sampling():
    mechanism = BaseTwoExponential(1, utility_bounds=(0, 10**9))
    with pytest.raises(ValueError, match="narrow utility_bounds"):
        mechanism.sample(np.arange(3), stream("wide"))


def test_relative_clamp_keeps_far_outcomes_negligible():
    # Relative clamp: utilities are shifted by their minimum, so huge losses work,
    # and the best outcome wins essentially always against one far worse.
    mechanism = BaseTwoExponential(1)
    utilities = np.array([10**12 + 5, 10**12, 10**15])
    draws = mechanism.sample(utilities, stream("relative"), size=300)
    assert set(np.unique(draws)) <= {0, 1}
    assert np.mean(draws == 1) > 0.8
