"""Exact samplers: pmf fit, power, agreement with the scalar reference and between paths.

Statistical tests use fixed keys (every run draws the same samples) and pin
their threshold so that a correct sampler fails with probability <= 1e-4 per
test over the choice of key (ALPHA; the pmf test splits it between its two
statistics, see `pmf_pvalue`).

Power (sample sizes). The pmf test is a chi-square test on all cells (for
broad distortions) plus a Bonferroni max-cell binomial test (for one
distorted cell). A cell of mass p0 whose mass is off by a relative δ (other
cells rescaled) shifts its count by δ·n·p0·(1 - p0) against a standard
deviation sqrt(n·p0·(1 - p0)): z = δ·sqrt(n·p0·(1 - p0)). The max-cell test
rejects at |z| >= z_crit (two-sided α/2 over k cells: 4.6 for k = 12, 4.75 for
k = 23, 5.2 for k = 250), so power 80% needs z >= z_crit + 0.84, 98% z >= z_crit + 2.05.

* Default CI size: `test_pmf_test_detects_a_one_percent_error_in_one_cell`
  draws N_CELL = 2·10^6 for σ² = 1 and scale 1, where the cell {0} has
  p0(1 - p0) ≈ 0.24: z = 0.01·sqrt(2e6·0.24) = 6.9 -> power Φ(6.9 - 4.75) = 98%
  against a 1% error of that cell (it checks that ±1% both fail). The other
  default-size pmf tests (N_PMF = 10^6) detect a 2.1% error of a cell of mass 0.1.
* The issue's full target (1% of any cell of mass >= 1e-3, up to ~250
  cells) needs n >= ((5.2 + 0.84)/0.01)² / 1e-3 ≈ 3.7·10^8 per parameter:
  run with DP_SAMPLER_TEST_SCALE=370 (N_PMF = 10^6 · scale); see
  `test_power_statement`.
"""

from __future__ import annotations

import itertools
import os
from fractions import Fraction
from math import isqrt, sqrt

import numpy as np
import pytest
from exact_pmf import GaussianMass, LaplaceMass
from reference_samplers import bernoulli_exp as ref_bernoulli_exp
from reference_samplers import discrete_gaussian as ref_discrete_gaussian
from reference_samplers import discrete_laplace as ref_discrete_laplace
from scipy import stats

from dp_pipeline import DiscreteGaussian, DiscreteLaplace, MasterKey
from dp_pipeline.noise import bernoulli_exp, discrete_gaussian, discrete_laplace
from dp_pipeline.noise._exp_digits import floor_scaled_exp_neg, geometric_exp_neg_one
from dp_pipeline.noise.bernoulli_exp import bernoulli_exp_fraction_prefixed, bernoulli_exp_quotient
from dp_pipeline.noise.uniform import bernoulli_ratio, uniform_below, uniform_below_big
from dp_pipeline.randomness import derive_stream

KEY_HEX = "5a" * 16 + "c3" * 16
KEY = MasterKey.from_hex(KEY_HEX)
ALPHA = 1e-4
# Samples per pmf test; DP_SAMPLER_TEST_SCALE multiplies them (default 1) for
# deeper one-off runs. The default keeps this file inside its CI time budget.
SCALE = int(os.environ.get("DP_SAMPLER_TEST_SCALE", "1"))
N_PMF = 1_000_000 * SCALE
MIN_EXPECTED = 20


def stream(*labels):
    return derive_stream(KEY, "test_noise", *labels)


# ---------------------------------------------------------------- helpers


def cells_for(mass, width: int, n: int):
    """Symmetric integer cells of ``width`` with expected count >= MIN_EXPECTED; tails pooled.

    Returns (edges, probabilities): cell i is [edges[i-1], edges[i] - 1], with the
    two tails (-inf, edges[0] - 1] and [edges[-1], inf) first and last.
    """
    half = width // 2
    # Central cell [-half, width - half - 1], then outwards in steps of width.
    upper = [width - half]
    while n * mass.mass(upper[-1], upper[-1] + width - 1) >= MIN_EXPECTED:
        upper.append(upper[-1] + width)
    if n * mass.mass(upper[-1], None) < MIN_EXPECTED and len(upper) > 1:
        upper.pop()
    lower = [-half - (upper[i] - upper[0]) for i in range(len(upper))]
    edges = sorted(set(lower + upper))
    probabilities = [mass.mass(None, edges[0] - 1)]
    for left, right in itertools.pairwise(edges):
        probabilities.append(mass.mass(left, right - 1))
    probabilities.append(mass.mass(edges[-1], None))
    return np.array(edges, dtype=np.int64), np.array(probabilities)


def max_cell_pvalue(counts: np.ndarray, probabilities: np.ndarray) -> float:
    """Bonferroni-corrected exact two-sided binomial p-value of the most extreme cell."""
    n = int(counts.sum())
    probabilities = probabilities / probabilities.sum()
    lower = stats.binom.cdf(counts, n, probabilities)
    upper = stats.binom.sf(counts - 1, n, probabilities)
    two_sided = np.minimum(1.0, 2 * np.minimum(lower, upper))
    return float(min(1.0, two_sided.min() * counts.size))


def pmf_pvalue(samples, mass, width):
    """min(chi-square p, max-cell p) scaled by 2: a correct sampler gives < ALPHA w.p. <= ALPHA.

    Both statistics are compared with ALPHA/2 (union bound).
    """
    edges, probabilities = cells_for(mass, width, samples.size)
    counts = np.bincount(
        np.searchsorted(edges, samples.astype(np.int64), side="right"),
        minlength=probabilities.size,
    )
    expected = probabilities / probabilities.sum() * counts.sum()
    chi_square = float(stats.chisquare(counts, expected).pvalue)
    return 2 * min(chi_square, max_cell_pvalue(counts, probabilities))


def two_sample_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square homogeneity test on the pooled support (tails merged to >= 20 expected)."""
    a = np.asarray(a.astype(np.int64))
    b = np.asarray(b.astype(np.int64))
    both = np.concatenate([a, b])
    values, counts = np.unique(both, return_counts=True)
    # Merge rare values outwards from the centre so every pooled cell has >= 40 draws.
    edges, run = [], 0
    for value, count in zip(values, counts, strict=True):
        run += count
        if run >= 40:
            edges.append(value + 1)
            run = 0
    edges = np.array(edges[:-1], dtype=np.int64)  # a short last run joins its neighbour
    table = np.array(
        [
            np.bincount(np.searchsorted(edges, x, side="right"), minlength=edges.size + 1)
            for x in (a, b)
        ]
    )
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0
    return float(stats.chi2_contingency(table).pvalue)


# ---------------------------------------------------------------- pmf tests

GAUSSIAN_CASES = [
    (Fraction(1, 4), 1),
    (Fraction(1), 1),
    (Fraction(7, 3), 1),
    (Fraction(100), 1),
    (Fraction(10**6), 50),  # σ = 1000: cells of width σ/20
    (Fraction(10**12), 50_000),  # σ = 10^6: cells of width σ/20
]
# σ² = 10^12 accepts on exact Python ints (2pqt² > 2^63), about 20x slower: fewer samples.
SLOW_GAUSSIAN = {Fraction(10**12): 5}


@pytest.mark.parametrize("sigma2, width", GAUSSIAN_CASES, ids=lambda v: str(v))
def test_discrete_gaussian_pmf(sigma2, width):
    n = N_PMF // SLOW_GAUSSIAN.get(sigma2, 1)
    samples = discrete_gaussian(sigma2, n, stream("dg-pmf", str(sigma2)))
    assert samples.dtype == np.int64 and samples.size == n
    assert pmf_pvalue(samples, GaussianMass(sigma2), width) > ALPHA


LAPLACE_CASES = [(Fraction(1, 2), 1), (Fraction(1), 1), (Fraction(7, 2), 1), (Fraction(1000), 50)]


@pytest.mark.parametrize("scale, width", LAPLACE_CASES, ids=lambda v: str(v))
def test_discrete_laplace_pmf(scale, width):
    samples = discrete_laplace(scale, N_PMF, stream("dl-pmf", str(scale)))
    assert samples.dtype == np.int64 and samples.size == N_PMF
    assert pmf_pvalue(samples, LaplaceMass(scale), width) > ALPHA


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(7, 3), Fraction(100), Fraction(10**6)])
def test_gaussian_tail_beyond_four_sigma(sigma2):
    n = N_PMF
    samples = discrete_gaussian(sigma2, n, stream("dg-tail", str(sigma2)))
    # |x| > 4σ  <=>  x² > 16σ² (exact integer comparison on x² q > 16 p)
    p, q = sigma2.numerator, sigma2.denominator
    cutoff = isqrt(16 * p // q)  # largest integer c with c² <= 16σ² (floor), tail is |x| > c
    while (cutoff + 1) ** 2 * q <= 16 * p:
        cutoff += 1
    while cutoff**2 * q > 16 * p:
        cutoff -= 1
    mass = GaussianMass(sigma2)
    tail = 2 * mass.mass(cutoff + 1, None)
    hits = int(np.count_nonzero(np.abs(samples) > cutoff))
    assert stats.binomtest(hits, n, tail).pvalue > ALPHA


# Draws per γ: a 1% relative error of p = e^{-γ} is z = 0.01·sqrt(n·p/(1 - p)) sd away;
# z >= 4.73 (p < 1e-4 two-sided, 80% power) needs n >= 2.2e5·(1 - p)/p: 3.9e5 at γ = 1,
# 2.5e6 at γ = 5/2. γ = 20 (p = 2e-9) cannot be tested for 1%: it checks the whole-part path.
BERNOULLI_EXP_DRAWS = {Fraction(5, 2): 2_500_000}


@pytest.mark.parametrize(
    "gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(20)]
)
def test_bernoulli_exp_binomial(gamma):
    n = BERNOULLI_EXP_DRAWS.get(gamma, 500_000)
    draws = bernoulli_exp(gamma, n, stream("bexp", str(gamma)))
    assert draws.dtype == bool and draws.size == n
    p = float(np.exp(-float(gamma)))
    hits = int(draws.sum())
    if gamma == 0:
        assert hits == n
    else:
        assert stats.binomtest(hits, n, p).pvalue > ALPHA


# ---------------------------------------------------------------- power


@pytest.mark.parametrize("sigma2", [Fraction(100)])
def test_gaussian_pmf_test_has_power(sigma2):
    """The true σ² passes; samples drawn with σ² 3% too large or too small fail."""
    width = GAUSSIAN_CASES[[c[0] for c in GAUSSIAN_CASES].index(sigma2)][1]
    mass = GaussianMass(sigma2)
    n = N_PMF
    for factor, should_pass in [
        (Fraction(1), True),
        (Fraction(103, 100), False),
        (Fraction(97, 100), False),
    ]:
        samples = discrete_gaussian(
            sigma2 * factor, n, stream("dg-power", str(sigma2), str(factor))
        )
        assert (pmf_pvalue(samples, mass, width) > ALPHA) == should_pass, factor


@pytest.mark.parametrize("scale", [Fraction(7, 2)])
def test_laplace_pmf_test_has_power(scale):
    width = dict(LAPLACE_CASES)[scale]
    mass = LaplaceMass(scale)
    for factor, should_pass in [
        (Fraction(1), True),
        (Fraction(103, 100), False),
        (Fraction(97, 100), False),
    ]:
        samples = discrete_laplace(
            scale * factor, N_PMF, stream("dl-power", str(scale), str(factor))
        )
        assert (pmf_pvalue(samples, mass, width) > ALPHA) == should_pass, factor


N_CELL = 2_000_000


def thin(samples: np.ndarray, in_cell: np.ndarray, rate: float, seed: int) -> np.ndarray:
    """Drop each sample where ``in_cell`` with probability ``rate`` (test data only)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return samples[~(in_cell & (rng.random(samples.size) < rate))]


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_pmf_test_detects_a_one_percent_error_in_one_cell(kind):
    """Samples whose cell {0} has 1% more or 1% less mass fail; the true samples pass.

    The distorted samples are exact samples, thinned (an i.i.d. sample of the
    renormalised distribution): dropping zeros at rate e = 0.01/(1 - 0.99·p0)
    gives P[0] = 0.99·p0; dropping non-zeros at rate 1 - (1/1.01 - p0)/(1 - p0)
    gives 1.01·p0. Power >= 98% at N_CELL (module docstring): p0 = 0.40 for
    N_Z(0, 1) (9 cells), 0.46 for Lap_Z(1) (23 cells).
    """
    if kind == "gaussian":
        mass = GaussianMass(Fraction(1))
        samples = discrete_gaussian(1, N_CELL * SCALE, stream("cell-power", kind))
    else:
        mass = LaplaceMass(Fraction(1))
        samples = discrete_laplace(1, N_CELL * SCALE, stream("cell-power", kind))
    p0 = float(mass.mass(0, 0))
    zero = samples == 0
    fewer = thin(samples, zero, 0.01 / (1 - 0.99 * p0), seed=1)
    more = thin(samples, ~zero, 1 - (1 / 1.01 - p0) / (1 - p0), seed=2)
    assert pmf_pvalue(samples, mass, 1) > ALPHA
    assert pmf_pvalue(fewer, mass, 1) <= ALPHA
    assert pmf_pvalue(more, mass, 1) <= ALPHA


def test_power_statement():
    # Module docstring: z = δ·sqrt(n·p0·(1 - p0)) for a relative error δ of a cell of mass p0.
    def z_shift(n, p0, delta):
        return delta * sqrt(n * p0 * (1 - p0))

    z_crit_23 = float(stats.norm.isf(ALPHA / 2 / 23 / 2))  # two-sided, 23 cells
    z_crit_250 = float(stats.norm.isf(ALPHA / 2 / 250 / 2))
    assert 4.7 < z_crit_23 < 4.8 and 5.1 < z_crit_250 < 5.3
    # Default: 1% of the cell {0} at N_CELL, power >= 98%.
    for mass in (GaussianMass(Fraction(1)), LaplaceMass(Fraction(1))):
        p0 = float(mass.mass(0, 0))
        assert stats.norm.cdf(z_shift(N_CELL, p0, 0.01) - z_crit_23) > 0.98
    # Full run (DP_SAMPLER_TEST_SCALE=370): 1% of any cell of mass >= 1e-3, power >= 80%.
    assert stats.norm.cdf(z_shift(370 * 10**6, 1e-3, 0.01) - z_crit_250) > 0.80
    # What the default N_PMF = 10^6 gives per cell at 80% power: 2.1% at mass 0.1.
    assert stats.norm.cdf(z_shift(N_PMF, 0.1, 0.021 / sqrt(SCALE)) - z_crit_250) > 0.80


# ---------------------------------------------------------------- reference and paths


N_REF = 10_000


@pytest.mark.parametrize(
    "kind, parameter",
    [
        ("gaussian", Fraction(7, 3)),
        ("gaussian", Fraction(1, 4)),
        ("laplace", Fraction(7, 2)),
        ("laplace", Fraction(2, 3)),
    ],
)
def test_vectorized_matches_scalar_reference(kind, parameter):
    reference_stream = stream("ref-scalar", kind, str(parameter))
    vector_stream = stream("ref-vector", kind, str(parameter))
    if kind == "gaussian":
        reference = [ref_discrete_gaussian(reference_stream, parameter) for _ in range(N_REF)]
        vectorized = discrete_gaussian(parameter, 10 * N_REF, vector_stream)
    else:
        reference = [ref_discrete_laplace(reference_stream, parameter) for _ in range(N_REF)]
        vectorized = discrete_laplace(parameter, 10 * N_REF, vector_stream)
    assert two_sample_pvalue(np.array(reference), vectorized) > ALPHA


def test_bernoulli_exp_matches_scalar_reference():
    gamma = Fraction(5, 2)
    reference_stream = stream("ref-bexp-scalar")
    reference = sum(ref_bernoulli_exp(reference_stream, gamma) for _ in range(N_REF))
    vectorized = int(bernoulli_exp(gamma, 10 * N_REF, stream("ref-bexp-vector")).sum())
    table = [[reference, N_REF - reference], [vectorized, 10 * N_REF - vectorized]]
    assert stats.chi2_contingency(table).pvalue > ALPHA


@pytest.mark.parametrize(
    "kind, parameter",
    [("gaussian", Fraction(7, 3)), ("gaussian", Fraction(100)), ("laplace", Fraction(7, 2))],
)
def test_int64_and_big_integer_paths_agree(kind, parameter):
    n = 50_000
    sampler = discrete_gaussian if kind == "gaussian" else discrete_laplace
    fast = sampler(parameter, 4 * n, stream("paths-fast", kind, str(parameter)))
    big = sampler(parameter, n, stream("paths-big", kind, str(parameter)), force_big=True)
    assert fast.dtype == np.int64
    assert two_sample_pvalue(fast, big) > ALPHA


@pytest.mark.parametrize("sigma2", [Fraction(10**100), Fraction(10**40, 3)])
def test_big_gaussian_parameters(sigma2):
    n = 4000
    samples = discrete_gaussian(sigma2, n, stream("big-dg", str(sigma2)))
    assert samples.dtype == object and samples.size == n
    assert all(type(x) is int for x in samples)
    # |X|/σ: the fraction inside one σ is ≈ 0.6827 (N_Z(0, σ²) is the continuous
    # Gaussian up to exp(-2π²σ²) at this size), binomial test.
    p, q = sigma2.numerator, sigma2.denominator
    inside = sum(1 for x in samples if x * x * q <= p)
    assert stats.binomtest(inside, n, 0.682689492137).pvalue > ALPHA


def test_big_laplace_scale():
    scale = Fraction(10**30)
    n = 4000
    samples = discrete_laplace(scale, n, stream("big-dl"))
    assert samples.dtype == object and samples.size == n
    # P[|Z| >= b] = 2 C r^b / (1 - r) ≈ e^{-1} for large b (C = (1-r)/(1+r), r = e^{-1/b}).
    beyond = sum(1 for x in samples if abs(x) >= 10**30)
    assert stats.binomtest(beyond, n, float(np.exp(-1))).pvalue > ALPHA


# ---------------------------------------------------------------- building blocks


def test_exp_digits_match_mpmath():
    import mpmath

    mpmath.mp.dps = 120
    for k in (1, 2, 3, 17, 44, 45, 60):
        for bits in (1, 6, 64, 130, 256):
            expected = int(mpmath.floor(mpmath.exp(-k) * mpmath.mpf(2) ** bits))
            assert floor_scaled_exp_neg(k, bits) == expected, (k, bits)


@pytest.mark.parametrize("bits", [3, 6, 64])
def test_geometric_is_exact_including_tie_path(bits):
    # With 3 or 6 bits per comparison, ties with floor(2^b e^{-k}) happen for ~10-40%
    # of draws, so the scalar tie resolution is exercised heavily.
    n = 400_000
    values = geometric_exp_neg_one(stream("geo", bits), n, bits=bits)
    top = 12
    counts = np.bincount(np.minimum(values, top), minlength=top + 1)
    probabilities = [np.exp(-k) * (1 - np.exp(-1)) for k in range(top)] + [np.exp(-top)]
    assert stats.chisquare(counts, np.array(probabilities) * n).pvalue > ALPHA


@pytest.mark.parametrize("bound", [2, 3, 7, 1000, 2**31 + 11, 2**32, 2**40 + 3, 2**63])
def test_uniform_below_fast_path(bound):
    n = 300_000
    values = uniform_below(stream("uniform", bound), bound, n)
    assert values.dtype == np.int64
    assert int(values.min()) >= 0 and int(values.max()) <= bound - 1
    cells = min(bound, 16)
    # Equal-mass cells: floor(v * cells / bound) (exact in Python ints for big bounds).
    index = (values.astype(object) * cells // bound).astype(np.int64)
    counts = np.bincount(index, minlength=cells)
    expected = np.array(
        [(-(-(i + 1) * bound // cells)) - (-(-i * bound // cells)) for i in range(cells)]
    )
    assert stats.chisquare(counts, expected / bound * n).pvalue > ALPHA


def test_uniform_below_big_path():
    bound = 3 * 10**40 + 7
    n = 50_000
    values = uniform_below_big(stream("uniform-big"), bound, n)
    assert values.dtype == object and all(0 <= v < bound for v in values)
    counts = np.bincount([v * 10 // bound for v in values], minlength=10)
    assert stats.chisquare(counts).pvalue > ALPHA


BIG_DEN = 3 * 10**30 + 1
N_PREFIX = 60_000  # per group: a 1% relative error of a probability >= 0.3 is >= 4 sd


def assert_binomial_groups(draws: np.ndarray, probabilities: list[float], n: int) -> None:
    for group, probability in enumerate(probabilities):
        hits = int(draws[group * n : (group + 1) * n].sum())
        if probability in (0.0, 1.0):
            assert hits == probability * n, group
        else:
            assert stats.binomtest(hits, n, probability).pvalue > ALPHA, group


@pytest.mark.parametrize("bits", [3, 64])
def test_exp_fraction_on_prefixes_is_exact_including_ties(bits):
    # exp(-r/den) for a den far beyond 64 bits: one exact division per element, then
    # uint64 passes. With 3-bit prefixes about 1/8 of the trials tie and take the
    # exact scalar resolution, so that path is tested on ~10^4 draws.
    fractions = [Fraction(0), Fraction(1, 7), Fraction(1, 2), Fraction(6, 7)]
    numerators = np.array(
        [BIG_DEN * f.numerator // f.denominator for f in fractions for _ in range(N_PREFIX)],
        dtype=object,
    )
    draws = bernoulli_exp_fraction_prefixed(stream("prefix", bits), numerators, BIG_DEN, bits=bits)
    probabilities = [float(np.exp(-int(r) / BIG_DEN)) for r in numerators[::N_PREFIX]]
    assert_binomial_groups(draws, probabilities, N_PREFIX)


@pytest.mark.parametrize("bits", [3, 64])
def test_exp_quotient_splits_whole_and_fraction_exactly(bits):
    # exp(-x/den) for x = m·den + r with whole parts m in {0, 1, 2}.
    gammas = [Fraction(1, 3), Fraction(1), Fraction(3, 2), Fraction(5, 2)]
    numerators = np.array(
        [BIG_DEN * g.numerator // g.denominator for g in gammas for _ in range(N_PREFIX)],
        dtype=object,
    )
    draws = bernoulli_exp_quotient(stream("quotient", bits), numerators, BIG_DEN, bits=bits)
    probabilities = [float(np.exp(-int(x) / BIG_DEN)) for x in numerators[::N_PREFIX]]
    assert_binomial_groups(draws, probabilities, N_PREFIX)


def test_bernoulli_ratio_big_denominator():
    numerators = np.array([0] * N_PREFIX + [BIG_DEN] * 10 + [BIG_DEN // 3] * N_PREFIX, dtype=object)
    draws = bernoulli_ratio(stream("ratio-big"), numerators, BIG_DEN)
    assert not draws[:N_PREFIX].any() and draws[N_PREFIX : N_PREFIX + 10].all()
    hits = int(draws[N_PREFIX + 10 :].sum())
    assert stats.binomtest(hits, N_PREFIX, 1 / 3).pvalue > ALPHA


# ---------------------------------------------------------------- determinism


def test_same_key_and_labels_give_identical_samples():
    a = discrete_gaussian(Fraction(7, 3), 50_000, derive_stream(KEY, "rel", "t", 1))
    b = discrete_gaussian(
        Fraction(7, 3), 50_000, derive_stream(MasterKey.from_hex(KEY_HEX), "rel", "t", 1)
    )
    c = discrete_gaussian(Fraction(7, 3), 50_000, derive_stream(KEY, "rel", "t", 2))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    la = discrete_laplace(3, 1000, derive_stream(KEY, "lap"))
    lb = discrete_laplace(3, 1000, derive_stream(KEY, "lap"))
    assert np.array_equal(la, lb)


def test_mechanism_objects_sample():
    a = DiscreteGaussian("7/3").sample(1000, derive_stream(KEY, "m"))
    b = discrete_gaussian(Fraction(7, 3), 1000, derive_stream(KEY, "m"))
    assert np.array_equal(a, b)
    c = DiscreteLaplace(Fraction(1, 2)).sample(1000, derive_stream(KEY, "m2"))
    assert np.array_equal(c, discrete_laplace("1/2", 1000, derive_stream(KEY, "m2")))


def test_size_zero_and_one():
    for sampler, parameter in ((discrete_gaussian, 3), (discrete_laplace, 3), (bernoulli_exp, 1)):
        assert sampler(parameter, 0, stream("zero")).size == 0
        assert sampler(parameter, 1, stream("one")).size == 1


# ---------------------------------------------------------------- bad input


BAD_PARAMETERS = [
    (0, ValueError, "must be > 0"),
    (-1, ValueError, "must be > 0"),
    (Fraction(-1, 2), ValueError, "must be > 0"),
    (float("nan"), ValueError, "must be finite"),
    (float("inf"), ValueError, "must be finite"),
    (True, TypeError, "must be an int, a Fraction or a 'p/q' string"),
    (None, TypeError, "must be an int, a Fraction or a 'p/q' string"),
    ("1/0", ValueError, "zero denominator"),
    ("abc", ValueError, "cannot read 'abc' as an exact rational"),
    ("-1/2", ValueError, "must be > 0"),
    ([1], TypeError, "must be an int, a Fraction or a 'p/q' string"),
]


@pytest.mark.parametrize("bad, exc, message", BAD_PARAMETERS, ids=lambda v: repr(v))
@pytest.mark.parametrize(
    "sampler, name", [(discrete_gaussian, "sigma2"), (discrete_laplace, "scale")]
)
def test_bad_parameters_are_refused_with_a_message(sampler, name, bad, exc, message):
    with pytest.raises(exc) as info:
        sampler(bad, 10, stream("bad"))
    text = str(info.value)
    assert name in text and message in text
    assert KEY_HEX[:16] not in text.lower()


@pytest.mark.parametrize(
    "bad, exc, message",
    [
        (-1, ValueError, "gamma must be >= 0"),
        (Fraction(-1, 3), ValueError, "gamma must be >= 0"),
        (float("nan"), ValueError, "gamma must be finite"),
        (True, TypeError, "gamma must be an int"),
        (None, TypeError, "gamma must be an int"),
        ("x/3", ValueError, "gamma: cannot read"),
    ],
)
def test_bad_gamma(bad, exc, message):
    with pytest.raises(exc, match=message):
        bernoulli_exp(bad, 10, stream("bad"))


@pytest.mark.parametrize(
    "size, exc, message",
    [
        (-1, ValueError, "size must be a non-negative int, got -1"),
        (True, TypeError, "size must"),
        (2.0, TypeError, "size must"),
    ],
)
def test_bad_size(size, exc, message):
    with pytest.raises(exc, match=message):
        discrete_gaussian(1, size, stream("bad"))


def test_bad_stream_and_no_key_in_errors():
    with pytest.raises(
        TypeError, match=r"stream must be a dp_pipeline\.randomness\.SecureStream"
    ) as info:
        discrete_laplace(1, 10, KEY)
    assert KEY_HEX[:16] not in str(info.value).lower()
    assert KEY_HEX[:16] not in repr(stream("x")).lower()
    assert KEY_HEX[:16] not in repr(DiscreteGaussian(2)).lower()
