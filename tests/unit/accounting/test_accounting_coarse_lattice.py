"""The coarsened lattice FFT: a sum table next to count tables stays on a fast, tight FFT."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from accounting_plans import random_release_plan

import dp_pipeline.accounting.coarse_lattice as coarse_lattice
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss
from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_delta
from dp_pipeline.accounting.lattice import LatticeComponent, lattice_loss
from dp_pipeline.accounting.multivariate import discrete_gaussian_components, multivariate_delta
from dp_pipeline.accounting.zcdp import zcdp_to_delta
from dp_pipeline.mechanisms import DiscreteGaussian

# Census-like: five count tables and one sum table with sensitivity 250,000 (σ² = c_j·S).
SCALE = Fraction(1832932, 100000)
CENSUS_SIGMA2 = [SCALE * k for k in (1, 4, 4, 4, 8)] + [SCALE * 8 * 250_000**2]
CENSUS_SHIFTS = [1, 1, 1, 1, 1, 250_000]


@pytest.mark.parametrize("grid", [Fraction(1, 3), Fraction(1, 7), Fraction(2, 5)])
@pytest.mark.parametrize("epsilon", [0.25, 1.0, 2.0, 4.0])
def test_rounding_brackets_theorem_7(grid, epsilon):
    """One N_Z(0, 2) coordinate rounded up / down onto a grid that is not its lattice."""
    (component,) = discrete_gaussian_components([2], [1])
    exact = discrete_gaussian_delta(DiscreteGaussian(2), epsilon, 1).upper
    rounded_up, error_up = coarse_lattice._round_component(component, grid, up=True)
    rounded_down, error_down = coarse_lattice._round_component(component, grid, up=False)
    upper = lattice_loss([rounded_up], 1e-14).delta_bound(epsilon, "test").upper + error_up
    lower = lattice_loss([rounded_down], 1e-14).delta_bound(epsilon, "test").lower - error_down
    assert lower <= exact <= upper
    # Rounding moves each loss by less than one grid step: δ(ε ∓ grid) brackets it.
    assert (
        upper
        <= discrete_gaussian_delta(DiscreteGaussian(2), max(0.0, epsilon - float(grid)), 1).upper
        + 1e-12
    )
    assert (
        lower
        >= discrete_gaussian_delta(DiscreteGaussian(2), epsilon + float(grid), 1).upper - 1e-12
    )


@pytest.mark.parametrize(
    ("sigma2", "ratio"),
    [
        (Fraction(10**9), Fraction(100037, 100)),
        (Fraction(10**9), Fraction(750_000)),
        (Fraction(10**7), Fraction(3, 7)),
        (Fraction(10**7), Fraction(1)),
    ],
)
@pytest.mark.parametrize("up", [True, False])
def test_normal_cdf_binning_matches_term_by_term_sums(monkeypatch, sigma2, ratio, up):
    """The Euler–Maclaurin-corrected CDF path agrees with summing the pmf, within its bound."""
    monkeypatch.setattr(coarse_lattice, "_CDF_MIN_SIGMA", 1e12)
    summed, first_summed, error_summed = coarse_lattice._discrete_gaussian_bins(sigma2, ratio, up)
    monkeypatch.setattr(coarse_lattice, "_CDF_MIN_SIGMA", 1.0)
    monkeypatch.setattr(coarse_lattice, "_ENUMERATION_LIMIT", 1)
    by_cdf, first_cdf, error_cdf = coarse_lattice._discrete_gaussian_bins(sigma2, ratio, up)
    assert first_summed == first_cdf and len(summed) == len(by_cdf)
    assert abs(summed.sum() - 1) < 1e-14
    assert np.abs(summed - by_cdf).sum() <= error_summed + error_cdf


def test_census_composition_uses_the_coarsened_fft_and_brackets_an_independent_bound():
    accountant = PrivacyAccountant()
    for sigma2, shift in zip(CENSUS_SIGMA2, CENSUS_SHIFTS, strict=True):
        accountant.add(DiscreteGaussian(sigma2), shift)
    assert accountant.methods == ("mgf_inversion", "multivariate_fft_coarsened")
    bound = accountant.delta(2)
    assert bound.method in accountant.methods
    assert 0 < bound.lower <= bound.upper <= zcdp_to_delta(float(accountant.rho()), 2)
    assert bound.upper <= bound.lower * 1.06  # tight: a few percent of δ
    # Nearly independent: the sum table's σ ≈ 3 million makes its loss Gaussian to ~1e-13;
    # rescaled to shift 1 (σ² / 250,000², about 147) it is a different mechanism whose loss
    # lives on a lattice of step 1/147, which moves δ(2) by about 2.2e-4 relative (the
    # exact reference in tests/support/accounting_reference.py gives 9.80517e-11 for the rescaled
    # composition, the accountant's tight bracket 9.80300e-11 for this one)
    rescaled = PrivacyAccountant()
    for sigma2, shift in zip(CENSUS_SIGMA2, CENSUS_SHIFTS, strict=True):
        rescaled.add(DiscreteGaussian(sigma2 / shift**2), 1)
    # an exact path: the supports composed directly, or the lattice FFT
    assert {"support_exact", "multivariate_fft"} & set(rescaled.methods)
    reference = rescaled.delta(2)
    assert abs(reference.upper - bound.upper) <= 1e-3 * bound.upper


def test_coarsened_bounds_bracket_the_exact_lattice_fft_when_both_apply():
    """Steps 1/5 and 100/701 share a lattice (1/3505) the exact FFT can afford."""
    components = discrete_gaussian_components([5, Fraction(701, 100)], [1, 1])
    exact = lattice_loss(components, 1e-14)
    assert exact is not None
    coarse = coarsened_lattice_loss(components, 1e-14, target_size=1 << 10)
    assert coarse is not None and coarse.rounded == 1
    for epsilon in (0.5, 1.0, 3.0):
        truth = exact.delta_bound(epsilon, "exact")
        bracket = coarse.delta_bound(epsilon, "coarse")
        assert bracket.lower <= truth.upper and truth.lower <= bracket.upper
        assert bracket.upper <= 1.05 * truth.upper


def test_multivariate_delta_reports_its_method_and_agrees_with_the_coarsened_fft():
    # The exact lattice FFT is too fine here: the MGF inversion answers (tight to 1e-6, so
    # the coarsened FFT is not needed), and the coarsened FFT's bracket must contain it.
    bound = multivariate_delta(CENSUS_SIGMA2, CENSUS_SHIFTS, 2.0)
    assert bound.method.startswith("mgf_inversion")
    assert bound.lower <= bound.upper < 1e-9
    assert bound.upper - bound.lower <= 1e-6 * bound.upper
    components = discrete_gaussian_components(CENSUS_SIGMA2, CENSUS_SHIFTS)
    coarse = coarsened_lattice_loss(components, 1e-14).delta_bound(2.0, "coarse")
    assert coarse.lower <= bound.upper and bound.lower <= coarse.upper


# ---------------------------------------------------------------- lattice FFT internals


def test_floor_product_is_exact_where_the_float_product_is_not():
    from dp_pipeline.accounting.lattice_grid import floor_product

    # p/q = 3 - 1/q just below an integer: v·p/q is within 1e-20 of 3v for small v
    q = 10**20 + 7
    p = 3 * q - 1
    values = np.arange(-2000, 2001, dtype=np.int64)
    exact = [(int(v) * p) // q for v in values]
    assert [int(x) for x in floor_product(values, p, q)] == exact
    # the twin: the float product alone gets these floors wrong
    assert [int(x) for x in np.floor(values * (p / q))] != exact


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_merged_chernoff_terms_bound_the_exact_moment_generating_function(sign):
    import mpmath

    from dp_pipeline.accounting.discrete_laplace import discrete_laplace_loss_pmf
    from dp_pipeline.accounting.lattice import _log_mgf, _mgf_terms

    # a Laplace support of 10,214 positive masses: merged into runs of 3 past 4,096 terms
    scale, shift = Fraction(1000), 10213

    _, masses = discrete_laplace_loss_pmf(scale, shift)
    terms = _mgf_terms(np.asarray(masses))
    assert terms.merged and len(terms.log_masses) <= 4096
    component = LatticeComponent(Fraction(0), Fraction(1), 1, probabilities=tuple(masses))
    mean = float(np.asarray(masses) @ np.arange(len(masses)))
    mpmath.mp.dps = 30
    for lam in (1e-3, 0.05, 0.3):
        bound = float(_log_mgf(component, terms, 1, np.array([sign * lam]))[0])
        exact = mpmath.log(
            mpmath.fsum(
                mpmath.mpf(float(m)) * mpmath.exp(sign * lam * (k - mpmath.mpf(mean)))
                for k, m in enumerate(masses)
                if m > 0
            )
        )
        assert bound >= exact
        assert bound <= exact + 3 * lam + 1e-12  # a run spans 3 values


def test_laplace_support_window_and_delta_against_the_exact_formula():
    from dp_pipeline.accounting.discrete_laplace import (
        discrete_laplace_loss_pmf,
        discrete_laplace_shift_delta_bounds,
    )

    # seed 102's Laplace (pure ε ≈ 55.5) alone on its own lattice
    scale, shift = Fraction(27295, 714), 2121
    _, masses = discrete_laplace_loss_pmf(scale, shift)
    component = LatticeComponent(-Fraction(shift) / scale, 2 / scale, 1, None, tuple(masses))
    loss = lattice_loss([component], 1e-14)
    assert len(loss.probabilities) <= 4096  # 2,122 support points
    for epsilon in (0.0, 20.0, 50.0, 55.0):
        lower, upper = discrete_laplace_shift_delta_bounds(scale, shift, epsilon)
        bound = loss.delta_bound(epsilon, "test")
        assert bound.lower <= upper and lower <= bound.upper
        # the masses' own relative error 4(Δ + 4)·u (about 9.4e-13) is charged both ways
        assert bound.upper - bound.lower <= 4e-12


def test_finite_supports_that_fit_a_window_are_composed_there_without_aliasing():
    import math

    # a loss of ±1 (lattice 1/500, variance 250,000 lattice units²) beside one on {0, 1/250}:
    # the sub-Gaussian sizing asks for 8,192 points; the whole support (1,003 points) fits
    # in 1,024 with no mass outside, so that window is used and no aliasing is charged
    ends = LatticeComponent(Fraction(-1), Fraction(1, 500), 1, None, (0.5,) + (0.0,) * 999 + (0.5,))
    pair = LatticeComponent(Fraction(0), Fraction(1, 250), 1, None, (0.25, 0.75))
    loss = lattice_loss([ends, pair], 1e-14)
    assert len(loss.probabilities) == 1024 and loss.first == 0
    for epsilon in (0.0, 0.5, 1.0, 1.002):
        exact = sum(
            p * q * -math.expm1(epsilon - end - step)
            for end, p in ((-1.0, 0.5), (1.0, 0.5))
            for step, q in ((0.0, 0.25), (0.004, 0.75))
            if end + step > epsilon
        )
        bound = loss.delta_bound(epsilon, "test")
        assert bound.lower <= exact <= bound.upper
        assert bound.upper - bound.lower <= 1e-12


def test_directly_convolved_supports_match_a_brute_force_sum():
    import mpmath

    from dp_pipeline.accounting.discrete_laplace import discrete_laplace_loss_pmf

    mpmath.mp.dps = 30
    # three finite supports on steps 2/10, 2/3 and 1/5 (multipliers 3, 10, 6 of 1/15) and
    # one discrete Gaussian: the supports are multiplied out before one real FFT
    parts = []
    for scale, shift in ((Fraction(10), 30), (Fraction(3), 7)):
        _, masses = discrete_laplace_loss_pmf(scale, shift)
        parts.append(LatticeComponent(-Fraction(shift) / scale, 2 / scale, 1, None, tuple(masses)))
    parts.append(LatticeComponent(Fraction(-1, 5), Fraction(1, 5), 1, None, (0.25, 0.25, 0.5)))
    gaussian = LatticeComponent(Fraction(1, 50), Fraction(1, 25), 1, Fraction(25))
    loss = lattice_loss([*parts, gaussian], 1e-14)
    # brute force: every combination of the three supports and |y| <= 40σ of N_Z(0, 25)
    support = [(mpmath.mpf(0), mpmath.mpf(1))]
    for part in parts:
        offset, step = part.offset, part.step
        support = [
            (
                loss_value
                + mpmath.mpf(offset.numerator) / offset.denominator
                + k * mpmath.mpf(step.numerator) / step.denominator,
                mass * mpmath.mpf(p),
            )
            for loss_value, mass in support
            for k, p in enumerate(part.probabilities)
            if p > 0
        ]
    # |y| <= 12σ of N_Z(0, 25): the rest weighs below e^-72
    weights = [(y, mpmath.exp(-mpmath.mpf(y * y) / 50)) for y in range(-60, 61)]
    total = mpmath.fsum(w for _, w in weights)
    gaussian_losses = [(mpmath.mpf(1) / 50 + mpmath.mpf(y) / 25, w / total) for y, w in weights]
    for epsilon in (0.0, 1.0, 5.0, 12.0):
        eps = mpmath.mpf(epsilon)
        exact = mpmath.fsum(
            mass * g_mass * -mpmath.expm1(eps - value - g_value)
            for value, mass in support
            for g_value, g_mass in gaussian_losses
            if value + g_value > eps
        )
        bound = loss.delta_bound(epsilon, "test")
        assert bound.lower <= exact <= bound.upper
        assert bound.upper - bound.lower <= 1e-11


def test_seed_102_window_from_a_chernoff_search_over_both_tails():
    """Seed 102 (bench_accounting's random plans): Laplaces of pure ε 55.5 and 85.3 beside
    a discrete Gaussian of ρ 4e-15. The composed loss is bounded above and exponential
    below: the lower tail's best λ is ~1/30 of distance/variance, the upper's far above 1;
    the search over both keeps the window at 2^19 points (the grid 1/16..4 alone certified
    only 2^21). Its bracket agrees with the MGF inversion where that is tight."""
    from dp_pipeline.accounting.brackets import inversion_delta
    from dp_pipeline.accounting.paths import inversion_of, lattice_components

    events = list(random_release_plan(102).events)
    coarse = coarsened_lattice_loss(lattice_components(events), 1e-14)
    assert len(coarse.upper_loss.probabilities) <= 1 << 19
    assert len(coarse.lower_loss.probabilities) <= 1 << 19
    inversion = inversion_delta(inversion_of(events))
    for epsilon in (140.79859510638684, 140.7985986263518):  # the ε search's last steps
        tight = inversion(epsilon)
        assert tight.upper - tight.lower <= 1e-3 * tight.upper
        bound = coarse.delta_bound(epsilon, "test")
        assert bound.lower <= tight.upper and tight.lower <= bound.upper


def test_supports_held_a_few_times_and_a_shared_part_match_a_brute_force_sum():
    import mpmath

    mpmath.mp.dps = 30
    # supports held 3 and 2 times (their count-fold sums are small, so they are convolved
    # directly as copies), a support held once and a discrete Gaussian; the
    # first two components are the ``common`` part, computed once for both calls
    parts = [
        LatticeComponent(Fraction(-1, 5), Fraction(1, 5), 3, None, (0.25, 0.25, 0.5)),
        LatticeComponent(Fraction(-2, 3), Fraction(2, 3), 2, None, (0.2, 0.3, 0.5)),
    ]
    others = [
        LatticeComponent(Fraction(0), Fraction(2, 5), 1, None, (0.5, 0.5)),
        LatticeComponent(Fraction(1, 50), Fraction(1, 25), 1, Fraction(25)),
    ]
    shared: dict = {}
    first = lattice_loss(parts + others, 1e-14, shared=shared, common=2)
    again = lattice_loss(parts + others, 1e-14, shared=shared, common=2)
    alone = lattice_loss(parts + others, 1e-14)
    assert any(key[0] == "common" for key in shared)
    assert np.array_equal(first.probabilities, again.probabilities)
    assert np.allclose(first.probabilities, alone.probabilities, rtol=0, atol=1e-15)
    support = [(mpmath.mpf(0), mpmath.mpf(1))]
    for part in parts + others[:1]:
        offset, step = part.offset, part.step
        for _ in range(part.count):
            support = [
                (
                    value
                    + mpmath.mpf(offset.numerator) / offset.denominator
                    + k * mpmath.mpf(step.numerator) / step.denominator,
                    mass * mpmath.mpf(p),
                )
                for value, mass in support
                for k, p in enumerate(part.probabilities)
            ]
    # |y| <= 12σ of N_Z(0, 25): the rest weighs below e^-72
    weights = [(y, mpmath.exp(-mpmath.mpf(y * y) / 50)) for y in range(-60, 61)]
    total = mpmath.fsum(w for _, w in weights)
    gaussian_losses = [(mpmath.mpf(1) / 50 + mpmath.mpf(y) / 25, w / total) for y, w in weights]
    for epsilon in (0.0, 1.0, 3.0, 6.0):
        eps = mpmath.mpf(epsilon)
        exact = mpmath.fsum(
            mass * g_mass * -mpmath.expm1(eps - value - g_value)
            for value, mass in support
            for g_value, g_mass in gaussian_losses
            if value + g_value > eps
        )
        for loss in (first, again):
            bound = loss.delta_bound(epsilon, "test")
            assert bound.lower <= exact <= bound.upper
            assert bound.upper - bound.lower <= 1e-11
