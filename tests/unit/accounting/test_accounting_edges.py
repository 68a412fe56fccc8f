"""Rigour at the edges: lower <= exact <= upper against mpmath, at tiny δ, huge ε, huge σ².

Every reference is computed here with mpmath at 60 digits (brute-force sums, the
continuous Gaussian of Balle & Wang as the large-σ reference for discrete Gaussians, whose
loss differs from it by a relative O((x/σ)²) at x standard deviations), and every boundary
case has a twin just past the boundary.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest

from dp_pipeline.accounting import (
    PrivacyAccountant,
    calibrate_discrete_gaussian,
    multivariate_delta,
    zcdp_to_delta,
    zcdp_to_epsilon,
)
from dp_pipeline.accounting.discrete_gaussian import (
    discrete_gaussian_delta,
    discrete_gaussian_delta_bounds,
)
from dp_pipeline.accounting.discrete_laplace import (
    discrete_laplace_delta,
    discrete_laplace_delta_bounds,
)
from dp_pipeline.accounting.events import PureDP
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace

MPMATH_DPS = 60  # decimal digits: tests/conftest.py sets them for each test
TINY = 5e-324


def _mp(value) -> mpmath.mpf:
    value = Fraction(value)
    return mpmath.mpf(value.numerator) / value.denominator


def _mp_theorem7(sigma2, shift: int, epsilon: float) -> mpmath.mpf:
    """Σ_{y > εσ²/Δ - Δ/2} (P[y] - e^ε P[y + Δ]) by brute force (both tails summed)."""
    s2 = _mp(sigma2)
    eps = mpmath.mpf(epsilon)
    sigma = float(mpmath.sqrt(s2))
    limit = int(60 * sigma) + 60 + shift
    total = mpmath.fsum(mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) for y in range(-limit, limit))
    start = int(mpmath.floor(eps * s2 / shift - mpmath.mpf(shift) / 2)) + 1
    stop = start + int(60 * sigma) + 60
    terms = (
        mpmath.exp(-mpmath.mpf(y * y) / (2 * s2))
        - mpmath.exp(eps - mpmath.mpf((y + shift) ** 2) / (2 * s2))
        for y in range(start, stop)
    )
    return mpmath.fsum(terms) / total


def _mp_balle_wang(rho, epsilon) -> mpmath.mpf:
    """δ(ε) of the continuous Gaussian loss N(ρ, 2ρ): Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2)."""
    mu = mpmath.sqrt(2 * mpmath.mpf(rho))
    eps = mpmath.mpf(epsilon)
    return mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)


def _mp_zcdp_delta(rho: float, epsilon: float) -> mpmath.mpf:
    """inf over α > 1 of e^{(α-1)(αρ-ε)}/(α-1)·(1-1/α)^α: golden section in log(α-1)."""
    rho, eps = mpmath.mpf(rho), mpmath.mpf(epsilon)

    def log_delta(t):
        beta = mpmath.exp(t)
        return beta * ((1 + beta) * rho - eps) + beta * t - (1 + beta) * mpmath.log1p(beta)

    a, b = mpmath.mpf(-300), mpmath.mpf(60)
    ratio = (mpmath.sqrt(5) - 1) / 2
    for _ in range(400):
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if log_delta(c) <= log_delta(d):
            b = d
        else:
            a = c
    return mpmath.exp(log_delta((a + b) / 2))


# ---------------------------------------------------------------- one mechanism


@pytest.mark.parametrize(
    ("sigma2", "shift", "epsilon"),
    [
        (3, 3, 50.0),  # δ ~ 1.5e-175: float exp(log pmf) is off by ~1e-13 relative
        (Fraction(1, 10**4), 1, 0.0),  # σ² = 1e-4: essentially a point mass
        (Fraction(1, 3), 2, 1.0),
        (7, 1, 20.0),
        (2500, 1, 0.0),
        (40, 6, 0.7),
    ],
)
def test_theorem7_bounds_bracket_mpmath(sigma2, shift, epsilon):
    exact = max(_mp_theorem7(sigma2, s, epsilon) for s in range(1, shift + 1))
    lower, upper = discrete_gaussian_delta_bounds(sigma2, epsilon, shift)
    assert mpmath.mpf(lower) <= exact <= mpmath.mpf(upper)
    if exact > 1e-300:
        assert upper - lower <= 1e-11 * float(exact)
    else:  # below the float range: the smallest positive float is the upper bound
        assert lower == 0 and upper <= 1e-322
    accountant = PrivacyAccountant().add(DiscreteGaussian(sigma2), shift)
    bound = accountant.delta(epsilon)
    assert mpmath.mpf(bound.lower) <= exact <= mpmath.mpf(bound.upper)


def test_theorem7_pinned_edge_value():
    # mpmath brute force at 60 digits: 1.469214545133542...e-175; the float evaluation
    # used to return 1.4692145451335048e-175, below it.
    exact = _mp_theorem7(3, 3, 50.0)
    assert mpmath.nstr(exact, 13) == "1.469214545134e-175"
    assert discrete_gaussian_delta(DiscreteGaussian(3), 50.0, sensitivity=3).upper >= float(exact)


@pytest.mark.parametrize("sigma2", [Fraction(10**10), Fraction(10**20), Fraction(10**40)])
@pytest.mark.parametrize("x", [0.0, 1.0, 8.0, 30.0])
def test_large_sigma_costs_nothing_and_brackets_the_continuous_gaussian(sigma2, x):
    # ε = x·Δ/σ: δ from 0.4/σ down to ~1e-200; the discrete/continuous difference is far
    # below the 1e-6 allowed here (relative (x/σ)² with σ >= 1e5).
    sigma = mpmath.sqrt(_mp(sigma2))
    epsilon = float(x / sigma)
    reference = _mp_balle_wang(1 / (2 * _mp(sigma2)), epsilon)
    lower, upper = discrete_gaussian_delta_bounds(sigma2, epsilon)
    assert lower <= float(reference) * (1 + 1e-6) and upper >= float(reference) * (1 - 1e-6)
    assert upper - lower <= 1e-6 * upper
    bound = PrivacyAccountant().add(DiscreteGaussian(sigma2), 1).delta(epsilon)
    assert bound.method == "theorem7"
    assert bound.lower <= float(reference) * (1 + 1e-6) <= bound.upper * (1 + 2e-6)


@pytest.mark.parametrize("epsilon", [1e155, 1e200, 1e300])
def test_huge_epsilon_is_a_tiny_positive_upper_bound(epsilon):
    # The exact δ is positive (the loss is unbounded) and below the float range.
    lower, upper = discrete_gaussian_delta_bounds(3, epsilon)
    assert lower == 0.0 and upper == TINY
    assert zcdp_to_delta(1e-3, epsilon) == TINY
    assert discrete_laplace_delta(DiscreteLaplace(3), epsilon).upper == 0.0  # pure DP: exactly 0


def test_laplace_just_below_pure_epsilon_is_positive_and_its_twin_zero():
    # float(1/3) is just below the pure ε = 1/3 of Lap_Z(3): the top loss 1/3 exceeds it.
    below = float(Fraction(1, 3))
    assert Fraction(below) < Fraction(1, 3)
    p_top = 1 / (1 + mpmath.exp(-mpmath.mpf(1) / 3))  # P[y <= 0] for shift 1
    exact = p_top * -mpmath.expm1(mpmath.mpf(below) - mpmath.mpf(1) / 3)
    assert 1e-17 < exact < 1.1e-17
    lower, upper = discrete_laplace_delta_bounds(3, below)
    assert mpmath.mpf(lower) <= exact <= mpmath.mpf(upper)
    above = math.nextafter(below, math.inf)
    assert Fraction(above) > Fraction(1, 3)
    assert discrete_laplace_delta(DiscreteLaplace(3), above).upper == 0.0


@pytest.mark.parametrize(
    ("rho", "epsilon"),
    [(10, 0.01), (0.02, 1.0), (1e-6, 0.0), (3.0, 40.0), (1e-8, 1e-3), (50.0, 2.0)],
)
def test_zcdp_delta_is_not_below_the_infimum(rho, epsilon):
    exact = _mp_zcdp_delta(rho, epsilon)
    ours = zcdp_to_delta(rho, epsilon)
    assert mpmath.mpf(ours) >= min(exact, 1)
    # tight: the added float error bound (8 ulps of the terms) is all that is lost
    assert ours <= float(min(exact, 1)) * (1 + 1e-10) + 1e-300


def test_zcdp_pinned_value_near_alpha_one():
    # mpmath (golden section at 60 digits): 0.99995416480297489...; the cancellation in
    # α·log1p(-1/α) near α = 1 used to give 0.9999541648023561.
    exact = _mp_zcdp_delta(10, 0.01)
    assert mpmath.nstr(exact, 14) == "0.99995416480297"
    assert zcdp_to_delta(10, 0.01) >= float(exact)


@pytest.mark.parametrize(("rho", "delta"), [(1e-6, 1e-300), (0.5, 1e-15), (1e4, 1e-3)])
def test_zcdp_epsilon_meets_its_delta(rho, delta):
    epsilon = zcdp_to_epsilon(rho, delta)
    assert _mp_zcdp_delta(rho, epsilon) <= mpmath.mpf(delta) * (1 + mpmath.mpf(10) ** -12)
    assert _mp_zcdp_delta(rho, epsilon * (1 - 1e-6)) > delta


# ---------------------------------------------------------------- compositions


def _tables(count: int) -> list[Fraction]:
    return [Fraction(10**6 + 37 * j, 10) for j in range(count)]


@pytest.fixture(scope="module")
def thousand_tables():
    accountant = PrivacyAccountant()
    for sigma2 in _tables(1000):
        accountant.add(DiscreteGaussian(sigma2))
    return accountant


@pytest.mark.parametrize("delta", [1e-6, 1e-10, 1e-12, 1e-15])
def test_thousand_distinct_tables_within_one_percent_of_the_continuous_value(
    thousand_tables, delta
):
    rho = sum(Fraction(1, 2 * s) for s in _tables(1000))
    bound = thousand_tables.epsilon(delta)
    assert bound.method == "mgf_inversion"
    assert bound.lower >= 0.9 * bound.upper
    # reference: the continuous Gaussian with the same ρ meets δ at the upper bound, and
    # 1% below it does not
    assert _mp_balle_wang(_mp(rho), bound.upper) <= delta * (1 + 1e-6)
    assert _mp_balle_wang(_mp(rho), bound.upper * 0.99) > delta


def test_thousand_tables_delta_brackets_the_continuous_value(thousand_tables):
    rho = sum(Fraction(1, 2 * s) for s in _tables(1000))
    for epsilon in (0.1, 0.5, 1.0):
        reference = float(_mp_balle_wang(_mp(rho), epsilon))
        bound = thousand_tables.delta(epsilon)
        assert bound.lower <= reference * (1 + 1e-6) and reference * (1 - 1e-6) <= bound.upper
        assert bound.upper <= 1.001 * bound.lower


def _mixture() -> tuple[PrivacyAccountant, float, float, list]:
    """400 discrete Gaussians (distinct σ²), 300 Lap_Z(400), 300 exponential mechanisms
    described by their pure-DP dominating pair (randomized response at ε = pure ε)."""
    accountant = PrivacyAccountant()
    sigma2s = [Fraction(4 * 10**5 + 91 * j, 1) for j in range(400)]
    for sigma2 in sigma2s:
        accountant.add(DiscreteGaussian(sigma2))
    accountant.add(DiscreteLaplace(400), count=300)
    selection = PureDP(BaseTwoExponential("1/200").pure_epsilon)
    accountant.add(selection, count=300)
    rho = sum(Fraction(1, 2 * s) for s in sigma2s)
    return accountant, rho, float(selection.pure_epsilon), sigma2s


def _mp_mixture_delta(rho, rr_epsilon: float, epsilon: float) -> mpmath.mpf:
    """Continuous Gaussian (ρ) ∘ 300 discrete Laplace (loss ±1/400) ∘ 300 randomized
    responses (loss ±ε_rr): a double binomial sum of shifted Balle–Wang terms."""
    a = mpmath.mpf(1) / 400
    q = mpmath.exp(-a)
    p_laplace = 1 / (1 + q)  # P[loss = +a]
    e_rr = mpmath.mpf(rr_epsilon)
    p_rr = 1 / (1 + mpmath.exp(-e_rr))
    total = mpmath.mpf(0)
    n = 300
    laplace = [
        mpmath.binomial(n, i) * p_laplace**i * (1 - p_laplace) ** (n - i) for i in range(n + 1)
    ]
    rr = [mpmath.binomial(n, k) * p_rr**k * (1 - p_rr) ** (n - k) for k in range(n + 1)]
    for i in range(n + 1):
        if laplace[i] < mpmath.mpf(10) ** -40:
            continue
        for k in range(n + 1):
            weight = laplace[i] * rr[k]
            if weight < mpmath.mpf(10) ** -40:
                continue
            shift = a * (2 * i - n) + e_rr * (2 * k - n)
            total += weight * _mp_balle_wang(rho, mpmath.mpf(epsilon) - shift)
    return total


def test_heterogeneous_thousand_within_one_percent_and_method_named():
    mpmath.mp.dps = 30
    try:
        accountant, rho, rr_epsilon, _ = _mixture()
        for delta in (1e-6, 1e-15):
            bound = accountant.epsilon(delta)
            assert bound.method == "mgf_inversion"
            assert bound.lower >= 0.9 * bound.upper
            assert _mp_mixture_delta(rho, rr_epsilon, bound.upper) <= delta * (1 + 1e-6)
            assert _mp_mixture_delta(rho, rr_epsilon, bound.upper * 0.99) > delta
    finally:
        mpmath.mp.dps = 60


def test_bounded_range_exponential_mechanism_takes_the_tighter_valid_bound():
    # Its privacy_loss_pmfs pair (randomized response) is valid but looser than its
    # bounded-range ρ = ε²/8, and 300 runs as blocks of DDR's adaptive composition are
    # tighter than both: 3.7x DDR's non-adaptive optimum of the runs alone (a lower
    # bound, here by mpmath over a grid of t) at δ ~ 1e-34 (the MGF inversion sums each
    # block on 257 losses), the zCDP cap 19x above.
    selection = BaseTwoExponential("1/200")
    accountant = PrivacyAccountant().add(DiscreteGaussian(400000)).add(selection, count=300)
    bound = accountant.delta(0.5)
    rho = float(accountant.rho())
    assert bound.upper < zcdp_to_delta(rho, 0.5) / 10
    assert bound.method == "mgf_inversion"
    assert 0 <= bound.lower <= bound.upper
    eps = mpmath.mpf(selection.pure_epsilon.numerator) / selection.pure_epsilon.denominator
    reference = mpmath.mpf(0)
    for j in range(61):  # DDR's non-adaptive optimum: one t for all 300 runs
        t = eps * j / 60
        p = (mpmath.e**eps - mpmath.e ** (eps - t)) / mpmath.expm1(eps)
        total = mpmath.fsum(
            mpmath.binomial(300, i)
            * p ** (300 - i)
            * (1 - p) ** i
            * (1 - mpmath.e ** (0.5 - (300 - i) * eps + 300 * t))
            for i in range(301)
            if (300 - i) * eps - 300 * t > 0.5
        )
        reference = max(reference, total)
    assert reference <= bound.upper <= 4 * reference


def test_multivariate_many_unrelated_sigma2_is_tight():
    sigma2s = _tables(200)
    rho = sum(Fraction(1, 2 * s) for s in sigma2s)
    bound = multivariate_delta(sigma2s, [1] * 200, 0.2)
    reference = float(_mp_balle_wang(_mp(rho), 0.2))
    assert bound.method.startswith("mgf_inversion")
    assert bound.lower <= reference * (1 + 1e-6) and reference * (1 - 1e-6) <= bound.upper


def test_pure_dp_only_composition_keeps_an_exact_lattice_path():
    # No discrete Gaussian: nothing makes the integrand decay; the finite supports are
    # composed exactly on their lattice
    accountant = PrivacyAccountant().add(DiscreteLaplace(20), count=10).add(PureDP(Fraction(1, 4)))
    assert accountant.methods == ("support_exact",)


def test_calibration_of_many_queries_within_one_percent_of_the_least_variance():
    # 40 queries with distinct shares at (1, 1e-10): σ_j² = c_j·S; the least S meeting the
    # target for the continuous Gaussian with ρ = Σ share_j/S = 1/S is the reference.
    weights = list(range(1, 41))
    shares = [Fraction(w, sum(weights)) for w in weights]
    queries = [(share, 1) for share in shares]
    sigma2s = calibrate_discrete_gaussian(epsilon=1.0, delta=1e-10, queries=queries)
    scale = sigma2s[0] * 2 * shares[0]
    low, high = mpmath.mpf("1e-6"), mpmath.mpf(10)
    for _ in range(200):  # the largest ρ whose continuous Gaussian meets δ(1) <= 1e-10
        middle = (low + high) / 2
        low, high = (middle, high) if _mp_balle_wang(middle, 1.0) <= 1e-10 else (low, middle)
    reference_scale = 1 / low
    assert abs(float(scale / Fraction(str(reference_scale))) - 1) <= 0.01
    accountant = PrivacyAccountant()
    for sigma2 in sigma2s:
        accountant.add(DiscreteGaussian(sigma2))
    assert accountant.delta(1.0).upper <= 1e-10
    twin = PrivacyAccountant()
    for sigma2 in sigma2s:
        twin.add(DiscreteGaussian(sigma2 * Fraction(99, 100)))
    assert twin.delta(1.0).upper > 1e-10


def test_report_shows_lower_and_upper_for_every_figure():
    from dp_pipeline.release.report.writer import privacy_bounds

    report = {
        "guarantee": {
            "rho": "1/100",
            "epsilon_tight": {"lower": 0.99, "upper": 1.0, "method": "mgf_inversion"},
            "delta_tight": {"lower": 9e-11, "upper": 1e-10, "method": "mgf_inversion"},
            "epsilon_zcdp": 1.2,
        },
        "ledger": {"cumulative": {"epsilon": 1.5, "delta": 2e-10}},
    }
    bounds = privacy_bounds(report)
    assert set(bounds) == {
        "rho",
        "epsilon_tight",
        "epsilon_zcdp",
        "delta_tight",
        "cumulative_epsilon",
        "cumulative_delta",
    }
    for figure in bounds.values():
        assert figure["lower"] is not None and figure["upper"] is not None
    assert bounds["epsilon_zcdp"] == {"lower": 0.99, "upper": 1.2}


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param((1, 1), id="dense-direct-convolution"),
        pytest.param((5, 2), id="two-lattices-by-residues"),
    ],
)
def test_a_large_support_merge_is_within_its_budget_in_bounded_memory(steps):
    """Two discrete Gaussian supports of ~2,000 points (4.3-4.6M products): the merge
    built the count-long outer sums and products (~75 MB) and binned them, 0.07-0.37 s
    of CPU. On one lattice (steps 1, 1) it is one direct convolution of the dense
    layouts; on steps 5 and 2 (not dense together: 14,000 positions) it is five rows of
    shifted copies of the step-5 side, one per residue of the step-2 side modulo 5. The
    positions are those the binned sums keep, and the masses agree with them within
    both merges' relative budgets."""
    import tracemalloc

    import numpy as np

    from dp_pipeline.accounting.support_composition import gaussian_masses
    from dp_pipeline.accounting.support_merge import Budget, Pmf, merge

    pmfs = []
    for sigma2, step in zip((Fraction(800), Fraction(700)), steps, strict=True):
        ys, masses, relative, _ = gaussian_masses(sigma2)
        pmfs.append(Pmf(step * ys.astype(np.int64), masses, relative, 0.0, 0.0))
    a, b = pmfs
    tracemalloc.start()
    try:
        merged = merge(a, b, Budget(2.0**-1000, 1 << 40))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(a.masses) * len(b.masses) > 4_000_000
    assert peak < 4_000_000, peak
    positions = np.add.outer(a.positions, b.positions).ravel()
    low = int(positions.min())
    binned = np.bincount(positions - low, weights=np.multiply.outer(a.masses, b.masses).ravel())
    assert np.array_equal(merged.positions, np.flatnonzero(binned >= 2.0**-1000) + low)
    kept = binned[merged.positions - low]
    assert np.all(np.abs(merged.masses - kept) <= 2 * merged.relative * kept)
    assert merged.relative < 1e-11
