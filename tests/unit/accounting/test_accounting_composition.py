"""Multivariate FFT, PLD and the PrivacyAccountant: closed forms, pinned values, round trips."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from dp_pipeline.accounting import (
    PrivacyAccountant,
    PrivacyLossDistribution,
    calibrate_discrete_gaussian,
    multivariate_delta,
    multivariate_epsilon,
    zcdp_to_delta,
)
from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss
from dp_pipeline.accounting.discrete_gaussian import discrete_gaussian_delta, discrete_gaussian_rho
from dp_pipeline.accounting.multivariate import discrete_gaussian_components
from dp_pipeline.accounting.paths import pld_of
from dp_pipeline.accounting.pld import pld_from_lattice_components
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

# CKS Figure 4 (ALGORITHMS §4): noise variance 50² for 100 sensitivity-1 queries.
FIG4_VARIANCE = 2500
FIG4_LAPLACE_A = math.log(((FIG4_VARIANCE + 1) + math.sqrt(2 * FIG4_VARIANCE + 1)) / FIG4_VARIANCE)


def _binomial_laplace_delta(a: float, k: int, epsilon: float) -> float:
    """Exact k-fold discrete Laplace δ (ALGORITHMS §4 binomial sum)."""
    p = math.exp(a) / (1 + math.exp(a))
    return math.fsum(
        math.comb(k, i) * p**i * (1 - p) ** (k - i) * -math.expm1(epsilon - a * (2 * i - k))
        for i in range(k + 1)
        if a * (2 * i - k) > epsilon
    )


@pytest.mark.parametrize(("sigma2", "epsilon"), [(25, 1.0), (2500, 0.1), (3, 2.0), ("7/3", 0.5)])
def test_multivariate_d1_reproduces_theorem7(sigma2, epsilon):
    exact = discrete_gaussian_delta(DiscreteGaussian(sigma2), epsilon).upper
    bound = multivariate_delta([sigma2], [1], epsilon)
    assert bound.lower <= exact <= bound.upper
    assert bound.upper - bound.lower <= 1e-9 * exact + 1e-12
    assert bound.upper <= zcdp_to_delta(
        float(discrete_gaussian_rho(DiscreteGaussian(sigma2))), epsilon
    )


def test_sum_of_equal_coordinates_matches_one_wide_gaussian():
    # Σ of k N_Z(0, σ²) ≈ N_Z(0, kσ²) within ~4(k+1)e^{-π²σ²/2} in TV (ALGORITHMS §3):
    # k unit shifts at σ² = 25 must match Theorem 7 at (kσ², Δ = k).
    k, sigma2 = 4, 25
    for epsilon in (0.5, 1.0):
        bound = multivariate_delta([sigma2] * k, [1] * k, epsilon)
        wide = discrete_gaussian_delta(DiscreteGaussian(k * sigma2), epsilon, sensitivity=k).upper
        assert bound.upper == pytest.approx(wide, rel=1e-8)


def test_cks_figure4_gaussian_is_about_five_times_below_zcdp():
    bound = multivariate_delta([FIG4_VARIANCE] * 100, [1] * 100, 1.0)
    assert bound.upper == pytest.approx(1.7546e-8, rel=1e-3)
    assert bound.lower <= bound.upper <= 1.001 * bound.lower
    assert zcdp_to_delta(0.02, 1.0) > 4.5 * bound.upper
    accountant = PrivacyAccountant().add(DiscreteGaussian(FIG4_VARIANCE), count=100)
    assert accountant.delta(1.0).upper == pytest.approx(bound.upper, rel=1e-6)
    eps = multivariate_epsilon([FIG4_VARIANCE] * 100, [1] * 100, 1.7546e-8)
    assert eps.lower <= eps.upper == pytest.approx(1.0, abs=1e-3)


def test_cks_figure4_laplace():
    scale = 1 / Fraction(FIG4_LAPLACE_A)
    assert pytest.approx(0.0282833, abs=1e-7) == FIG4_LAPLACE_A
    accountant = PrivacyAccountant().add(DiscreteLaplace(scale), count=100)
    exact = _binomial_laplace_delta(FIG4_LAPLACE_A, 100, 1.0)
    assert exact == pytest.approx(2.06e-5, rel=0.01)
    bound = accountant.delta(1.0)
    assert bound.lower <= exact <= bound.upper
    assert bound.upper == pytest.approx(exact, rel=1e-6)
    assert float(accountant.pure_epsilon()) == pytest.approx(2.83, abs=0.01)
    pld = PrivacyLossDistribution.from_discrete_laplace(scale, step=1e-4).self_compose(100)
    pld_bound = pld.delta(1.0)
    assert pld_bound.lower <= exact <= pld_bound.upper <= exact * 1.001


def test_laplace_needs_about_69_percent_more_variance():
    # CKS Fig. 4 / ALGORITHMS §4: at (1, 1e-6), k = 100, Laplace needs ~69% more variance
    # than the Gaussian calibrated by the zCDP conversion (the paper's accounting); against
    # our tight accountant's Gaussian the factor is larger still (~1.94, computed here).
    def laplace_delta(a):
        return _binomial_laplace_delta(a, 100, 1.0)

    low, high = 1e-4, 1.0  # the largest a with exact k-fold Laplace δ(1) <= 1e-6
    for _ in range(80):
        middle = (low + high) / 2
        low, high = (middle, high) if laplace_delta(middle) <= 1e-6 else (low, middle)
    q = math.exp(-low)
    laplace_variance = 2 * q / (1 - q) ** 2

    rho_low, rho_high = 1e-4, 1.0  # the largest ρ whose zCDP conversion gives δ(1) <= 1e-6
    for _ in range(80):
        middle = (rho_low + rho_high) / 2
        rho_low, rho_high = (
            (middle, rho_high) if zcdp_to_delta(middle, 1.0) <= 1e-6 else (rho_low, middle)
        )
    zcdp_sigma2 = 100 / (2 * rho_low)
    assert laplace_variance / zcdp_sigma2 == pytest.approx(1.69, abs=0.01)
    (tight_sigma2,) = calibrate_discrete_gaussian(1.0, 1e-6, queries=[(1, [1] * 100)])
    assert float(tight_sigma2) < zcdp_sigma2 * 0.9


def test_pld_upper_and_lower_bracket_the_multivariate_value():
    accountant = (
        PrivacyAccountant()
        .add(DiscreteLaplace(50), count=100)
        .add(DiscreteGaussian(2500), count=100)
    )
    assert accountant.methods == ("mgf_inversion", "multivariate_fft")
    for epsilon in (0.5, 1.0, 1.5):
        exact = accountant.delta(epsilon)
        pld = pld_of(accountant.events).delta(epsilon)
        assert pld.lower <= exact.upper and exact.lower <= pld.upper
        assert pld.upper <= exact.upper * 1.01


def test_asymmetric_pmf_pair_covers_both_directions():
    p, q = [0.5, 0.5, 0.0], [0.25, 0.5, 0.25]
    forward = PrivacyLossDistribution.from_pmfs(p, q, symmetric=True).delta(0.0).upper
    both = PrivacyLossDistribution.from_pmfs(p, q).delta(0.0).upper
    # δ(0) is the total variation distance, 0.25 either way; at ε = 0.5 the reverse
    # direction (where Q has mass P lacks, loss +∞) dominates.
    assert both == pytest.approx(0.25, rel=1e-6) and forward == pytest.approx(0.25, rel=1e-6)
    reverse_only = PrivacyLossDistribution.from_pmfs(q, p, symmetric=True).delta(0.5).upper
    assert PrivacyLossDistribution.from_pmfs(p, q).delta(0.5).upper >= reverse_only


class _Exponential:
    """A generic pmf-pair mechanism (as the exponential-mechanism engineer provides)."""

    def privacy_loss_pmfs(self):
        import numpy as np

        p = np.array([0.5, 0.3, 0.2])
        q = np.array([0.3, 0.3, 0.4])
        return p, q


def test_accountant_mixes_generic_and_discrete_mechanisms():
    accountant = PrivacyAccountant()
    accountant.add(_Exponential(), count=3).add(DiscreteGaussian(100), count=2)
    assert accountant.methods == ("mgf_inversion", "pld_fft")
    bound = accountant.delta(1.0)
    assert 0 <= bound.lower <= bound.upper <= 1
    with pytest.raises(ValueError, match="no finite zCDP"):
        accountant.rho()


def test_base_two_exponential_has_the_bounded_range_rho():
    from dp_pipeline import BaseTwoExponential

    selection = BaseTwoExponential("7/10")
    assert selection.zcdp_rho() == selection.pure_epsilon**2 / 8
    assert selection.pure_epsilon <= Fraction(7, 10)
    accountant = PrivacyAccountant().add(selection, count=2).add(DiscreteGaussian(50), [1, 1])
    assert accountant.rho() == 2 * selection.pure_epsilon**2 / 8 + Fraction(2, 100)


def test_rho_is_exact_sum_and_dict_round_trip():
    accountant = PrivacyAccountant()
    accountant.add(DiscreteGaussian("25/2"), [1, 1, 2], count=3).add(DiscreteLaplace(10), 2)
    expected = 3 * Fraction(6) / 25 + Fraction(1, 5) ** 2 / 2
    assert accountant.rho() == expected
    data = json.loads(json.dumps(accountant.to_dict()))
    assert data["events"][0]["mechanism"]["sigma2"] == "25/2"
    restored = PrivacyAccountant.from_dict(data)
    assert restored.events == accountant.events
    assert restored.delta(1.0) == accountant.delta(1.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: PrivacyAccountant().delta(1.0), "the accountant is empty"),
        (lambda: PrivacyAccountant().add(DiscreteGaussian(4), 1.5), "sensitivity must be an int"),
        (
            lambda: PrivacyAccountant().add(DiscreteGaussian(4), [1, 0.5]),
            r"sensitivity\[1\] must be an integer",
        ),
        (lambda: PrivacyAccountant().add(DiscreteGaussian(4), count=0), "count must be an int"),
        (lambda: PrivacyAccountant().add(object()), "mechanism must be a DiscreteGaussian"),
        (lambda: PrivacyAccountant().add(DiscreteGaussian(4)).delta(-1), "epsilon must be"),
        (lambda: PrivacyAccountant().add(DiscreteGaussian(4)).epsilon(1.5), "delta must lie"),
        (lambda: multivariate_delta([4, 4], [1], 1.0), "same length"),
        (lambda: multivariate_delta([], [], 1.0), "must not be empty"),
        (lambda: multivariate_delta([4], [0.5], 1.0), r"mu\[0\] must be an integer"),
        (lambda: multivariate_delta([0], [1], 1.0), r"sigma2s\[0\] must be > 0"),
        (lambda: PrivacyLossDistribution.from_pmfs([0.5, 0.5], [1.0]), "common support"),
        (lambda: PrivacyLossDistribution.from_pmfs([0.5, 0.6], [0.5, 0.5]), "must sum to 1"),
    ],
)
def test_bad_input_names_argument_and_rule(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_many_unrelated_sigma2_use_the_coarsened_fft_without_overflow():
    # 40 tables with unrelated σ²: the lattice step is ~1e-123 of the largest loss step, so
    # the exact FFT's multipliers would overflow a float; the accountant rounds 39 of them
    # onto a coarse grid (both ways) and must agree with the independent grid PLD.
    accountant = PrivacyAccountant()
    for j in range(40):
        accountant.add(DiscreteGaussian(Fraction(10000 + 37 * j, 10)))
    assert accountant.methods == ("mgf_inversion", "multivariate_fft_coarsened")
    bound = accountant.delta(0.5)
    assert 0 < bound.lower <= bound.upper <= zcdp_to_delta(float(accountant.rho()), 0.5)
    sigma2s = [Fraction(10000 + 37 * j, 10) for j in range(40)]
    reference = pld_from_lattice_components(discrete_gaussian_components(sigma2s, [1] * 40)).delta(
        0.5
    )
    assert bound.lower <= reference.upper and reference.lower <= bound.upper
    direct = multivariate_delta(sigma2s, [1] * 40, 0.5)
    assert direct.method.startswith("mgf_inversion")
    coarse = coarsened_lattice_loss(discrete_gaussian_components(sigma2s, [1] * 40), 1e-14)
    assert coarse is not None and coarse.rounded == 39
    coarse_bound = coarse.delta_bound(0.5, "coarse")
    assert coarse_bound.lower <= direct.upper and direct.lower <= coarse_bound.upper
    assert direct.upper == pytest.approx(bound.upper, rel=1e-3)


def test_pure_epsilon_is_a_stored_value_never_a_method():
    class MethodPure:
        def pure_epsilon(self):
            return Fraction(1, 2)

    with pytest.raises(TypeError, match="must be a stored value"):
        PrivacyAccountant().add(MethodPure())
    # The discrete Laplace has no pure_epsilon attribute: it depends on the sensitivity.
    assert not hasattr(DiscreteLaplace(4), "pure_epsilon")
    assert PrivacyAccountant().add(DiscreteLaplace(4), 2).pure_epsilon() == Fraction(1, 2)
