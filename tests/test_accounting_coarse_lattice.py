"""The coarsened lattice FFT: a sum table next to count tables stays on a fast, tight FFT."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import dp_pipeline.accounting.coarse_lattice as coarse_lattice
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss
from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_delta
from dp_pipeline.accounting.lattice import lattice_loss
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
    exact = discrete_gaussian_delta(DiscreteGaussian(2), epsilon, 1)
    rounded_up, error_up = coarse_lattice._round_component(component, grid, up=True)
    rounded_down, error_down = coarse_lattice._round_component(component, grid, up=False)
    upper = lattice_loss([rounded_up], 1e-14).delta_bound(epsilon, "test").upper + error_up
    lower = lattice_loss([rounded_down], 1e-14).delta_bound(epsilon, "test").lower - error_down
    assert lower <= exact <= upper
    # Rounding moves each loss by less than one grid step: δ(ε ∓ grid) brackets it.
    assert (
        upper
        <= discrete_gaussian_delta(DiscreteGaussian(2), max(0.0, epsilon - float(grid)), 1) + 1e-12
    )
    assert lower >= discrete_gaussian_delta(DiscreteGaussian(2), epsilon + float(grid), 1) - 1e-12


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
    # Independent: the sum table's σ ≈ 8.6 million makes its loss Gaussian to ~1e-13, so
    # rescaling it to shift 1 (σ² / 250,000²) gives an exactly-on-lattice composition
    # whose δ must fall inside the bracket (up to the two computations' own errors).
    rescaled = PrivacyAccountant()
    for sigma2, shift in zip(CENSUS_SIGMA2, CENSUS_SHIFTS, strict=True):
        rescaled.add(DiscreteGaussian(sigma2 / shift**2), 1)
    assert "multivariate_fft" in rescaled.methods
    reference = rescaled.delta(2)
    assert bound.lower <= reference.upper and reference.lower <= bound.upper


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
