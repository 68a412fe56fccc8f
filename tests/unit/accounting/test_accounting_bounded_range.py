"""Selections (ε-bounded-range mechanisms) in the accountant, against independent references.

References, computed here (mpmath; the brute force beside a discrete Gaussian in floats),
none through the accountant:
- the worst two-point pair B_t of an ε-BR mechanism (Dong, Durfee & Rogers 2020, §4):
  losses ε - t and -t, P-mass p_t = (e^ε - e^{ε-t})/(e^ε - 1) on the first;
- sup over a grid of t of δ(B_t^{⊗k}): DDR's optimal non-adaptive composition (their
  Section 5), a value some ε-BR mechanisms reach, so every sound bound lies above it;
- the exact curve of the accountant's pair for k runs, summed from its masses;
- the continuous dominating pair composed with a discrete Gaussian, by closed-form
  integrals of its density e^{(ε+x)/2}/(2(e^ε - 1)) against the Gaussian's pmf.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from dp_pipeline import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.bounded_range import (
    POINTS,
    bounded_range_delta,
    bounded_range_epsilon_of,
    bounded_range_losses,
)
from dp_pipeline.accounting.bounded_range_adaptive import adaptive_pair
from dp_pipeline.accounting.brackets import inversion_delta
from dp_pipeline.accounting.events import PureDP
from dp_pipeline.accounting.paths import fft_composition, inversion_of, pld_of
from dp_pipeline.accounting.zcdp import zcdp_to_delta

MPMATH_DPS = 30  # decimal digits: tests/conftest.py sets them for each test


def _pair(eps, t):
    """P-masses of B_t: (loss ε - t, loss -t)."""
    p = (mp.e**eps - mp.e ** (eps - t)) / mp.expm1(eps)
    return p, 1 - p


def _ddr_delta(eps, k: int, x, grid: int = 4000):
    """max over t on a grid of δ(B_t^{⊗k})(x): a lower bound on DDR's optimum."""
    eps, x = mp.mpf(eps), mp.mpf(x)
    best = mp.mpf(0)
    for j in range(grid + 1):
        t = eps * j / grid
        p, _ = _pair(eps, t)
        total = mp.fsum(
            mp.binomial(k, i)
            * p ** (k - i)
            * (1 - p) ** i
            * (1 - mp.e ** (x - (k - i) * eps + k * t))
            for i in range(k + 1)
            if (k - i) * eps - k * t > x
        )
        best = max(best, total)
    return best


def _closed_form(eps, x):
    eps, x = mp.mpf(eps), mp.mpf(x)
    return (mp.e ** (eps / 2) - mp.e ** (x / 2)) ** 2 / mp.expm1(eps)


def _mechanism(epsilon) -> BaseTwoExponential:
    return BaseTwoExponential(Fraction(epsilon))


# ----------------------------------------------------------------- one mechanism


@pytest.mark.parametrize("epsilon", ["1/10", "1/2", "2"])
def test_closed_form_is_the_supremum_over_t(epsilon):
    # the curve's derivation (sup at e^{2t} = e^ε/α) against a brute-force search over t
    eps = float(_mechanism(epsilon).pure_epsilon)
    for x in (-0.9 * eps, 0.0, 0.4 * eps, 0.9 * eps):
        brute = _ddr_delta(eps, 1, x, grid=1000)
        exact = _closed_form(eps, x)
        assert brute <= exact * (1 + mp.mpf(10) ** -20)  # mpmath rounding at 30 digits
        assert brute >= exact * (1 - 1e-5)
        assert bounded_range_delta(eps, x) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize("epsilon", ["1/10", "1/2", "2"])
def test_one_selection_is_bounded_by_its_exact_curve_and_a_tight_twin_is_refuted(epsilon):
    mechanism = _mechanism(epsilon)
    eps = float(mechanism.pure_epsilon)
    accountant = PrivacyAccountant().add(mechanism)
    for x in (0.0, 0.3 * eps, 0.7 * eps):
        exact = _closed_form(eps, x)
        bound = accountant.delta(x)
        assert bound.upper >= exact
        assert bound.upper <= exact * (1 + 3 / POINTS)  # the lattice split, ~h²
        # the tight twin: a δ just below the curve is refuted by the pair B_t*, an ε-BR
        # mechanism (t* from e^{2t} = e^{ε - x})
        t_star = (mp.mpf(eps) - x) / 2
        p, q = _pair(eps, t_star)[0], (mp.e**t_star - 1) / mp.expm1(eps)
        reached = max(0, p - mp.e**x * q) + max(0, (1 - p) - mp.e**x * (1 - q))
        assert reached == pytest.approx(float(exact), rel=1e-14)
        assert reached > exact * (1 - mp.mpf(10) ** -9)


def test_lattice_pair_is_a_pair_of_distributions_on_exact_losses():
    epsilon = Fraction(3, 7)
    offset, step, masses = bounded_range_losses(epsilon, 64)
    assert offset == -epsilon and step == Fraction(3, 224)
    assert math.fsum(masses) == pytest.approx(1.0, abs=1e-15)
    # symmetric: Q[L = s_j] = e^{-s_j} P[L = s_j] = P[L = s_{m-j}]
    for j in range(65):
        q = masses[j] * math.exp(-float(offset + step * j))
        assert q == pytest.approx(masses[64 - j], rel=1e-14)


# ----------------------------------------------------------------- compositions


@pytest.mark.parametrize("k", [2, 5, 10])
def test_k_selections_lie_above_ddr_optimal_and_below_randomized_response(k):
    # the optimal adaptive composition lies above the non-adaptive optimum (up to ~9% here)
    mechanism = _mechanism("1/2")
    eps = float(mechanism.pure_epsilon)
    accountant = PrivacyAccountant().add(mechanism, count=k)
    old = PrivacyAccountant().add(PureDP(mechanism.pure_epsilon), count=k)
    for x in (0.0, 0.3 * math.sqrt(k) * eps, 0.6 * math.sqrt(k) * eps):
        reference = _ddr_delta(eps, k, x, grid=400)
        bound = accountant.delta(x)
        # the lower end is DDR's non-adaptive composition on a coarser grid of t, below
        # the adaptive optimum (`selection_lower`): near the reference, not above the
        # optimum; the upper end above both
        assert 0.99 * reference <= bound.lower <= bound.upper
        assert reference <= bound.upper <= 1.5 * reference
        assert bound.upper < old.delta(x).upper


@pytest.mark.parametrize("k", [20, 30])
def test_many_selections_lie_between_ddr_optimal_and_the_zcdp_cap(k):
    """Many selections: the block's curve (or the ε²/8 zCDP cap, whichever is smaller)
    stays above DDR's non-adaptive optimum and at most the cap (the tightness against it:
    tests/unit/accounting/test_accounting_bounded_range_adaptive.py)."""
    mechanism = _mechanism("1/2")
    eps = float(mechanism.pure_epsilon)
    accountant = PrivacyAccountant().add(mechanism, count=k)
    for x in (0.0, 0.3 * math.sqrt(k) * eps, 0.6 * math.sqrt(k) * eps, math.sqrt(k) * eps):
        reference = _ddr_delta(eps, k, x, grid=150)  # a grid's max is below the sup
        bound = accountant.delta(x)
        assert 0.99 * reference <= bound.lower <= bound.upper  # `selection_lower`
        assert reference <= bound.upper
        assert bound.upper <= min(zcdp_to_delta(k * eps * eps / 8, x), 2.2 * reference)


def test_k_selections_bracket_the_exact_curve_of_their_block_pair():
    # k runs of one ε enter as one block: the dominating pair of their optimal adaptive
    # composition (`bounded_range_adaptive`); its δ summed exactly (mpmath) from its masses
    mechanism = _mechanism("1/2")
    k = 3
    offset, step, masses = adaptive_pair(bounded_range_epsilon_of(mechanism), k)
    accountant = PrivacyAccountant().add(mechanism, count=k)
    for x in (0.0, 0.4, 0.9):
        exact = mp.fsum(
            mp.mpf(w) * (1 - mp.e ** (x - (mp.mpf(offset) + i * mp.mpf(step))))
            for i, w in enumerate(masses)
            if offset + i * step > Fraction(x)
        )
        bound = accountant.delta(x)
        # the upper end is the pair's curve; the lower end is below the worst case, which
        # the pair's curve bounds from above (`selection_lower`), so it is below it too
        assert bound.lower <= exact <= bound.upper <= exact * (1 + 1e-9)


def _hull_with_gaussian(eps, sigma2, x):
    """δ(x) of the continuous dominating pair composed with N_Z(0, σ²), shift 1."""
    eps, x, s2 = mp.mpf(eps), mp.mpf(x), mp.mpf(sigma2)
    a = mp.e ** (eps / 2) / mp.expm1(eps)
    limit = int(40 * mp.sqrt(s2)) + 2
    weights = {y: mp.e ** (-(y * y) / (2 * s2)) for y in range(-limit, limit + 1)}
    normalizer = mp.fsum(weights.values())
    total = mp.mpf(0)
    for y, weight in weights.items():
        c = x - (1 + 2 * y) / (2 * s2)  # the selection's loss must exceed c
        if c >= eps:
            continue
        low = max(c, -eps)
        inner = a * (
            mp.e ** (eps / 2)
            + mp.e**c * mp.e ** (-eps / 2)
            - mp.e ** (low / 2)
            - mp.e**c * mp.e ** (-low / 2)
        )
        total += weight / normalizer * inner
    return total


def _brute_with_gaussian(eps, sigma2, x, grid=2000):
    """max over t of δ(B_t ⊗ N_Z(0, σ²))(x), in floats: a value some ε-BR mechanism
    reaches (up to rounding)."""
    limit = int(20 * math.sqrt(sigma2)) + 2
    ys = np.arange(-limit, limit + 1, dtype=np.float64)
    weights = np.exp(-(ys * ys) / (2 * sigma2))
    weights /= weights.sum()
    losses = (1 + 2 * ys) / (2 * sigma2)
    t = np.linspace(0.0, eps, grid + 1)[:, None]
    p = -np.expm1(-t) * math.exp(eps) / math.expm1(eps)
    total = np.zeros_like(t)
    for mass, own in ((p, eps - t), (1 - p, -t)):
        total += (mass * weights * np.maximum(0.0, -np.expm1(x - losses - own))).sum(
            axis=1, keepdims=True
        )
    return float(total.max())


@pytest.mark.parametrize(("sigma2", "epsilon"), [(4, "1/2"), (50, "1")])
def test_one_selection_and_one_discrete_gaussian_against_brute_force(sigma2, epsilon):
    mechanism = _mechanism(epsilon)
    eps = float(mechanism.pure_epsilon)
    accountant = PrivacyAccountant().add(mechanism).add(DiscreteGaussian(Fraction(sigma2)))
    for x in (0.2, 0.6, 1.0):
        brute = _brute_with_gaussian(eps, sigma2, x)
        hull = _hull_with_gaussian(eps, sigma2, x)
        bound = accountant.delta(x)
        assert brute <= hull * (1 + 1e-12)
        assert hull <= bound.upper <= hull * (1 + 5e-3)


def test_every_path_brackets_the_same_mixture():
    # one release: counts (discrete Gaussian, σ² >= 36.5: MGF inversion), a Laplace sum
    # and quantiles; the FFT paths and the inversion give overlapping brackets
    events = (
        PrivacyAccountant()
        .add(DiscreteGaussian(Fraction(200)), sensitivity=[1, 1, 1])
        .add(DiscreteLaplace(Fraction(8)), sensitivity=2)
        .add(_mechanism("3/10"), count=3)
        .events
    )
    brackets = [fft_composition(events)[0], pld_of(events).delta]
    brackets.append(inversion_delta(inversion_of(events)))
    for x in (0.5, 1.0, 1.5):
        bounds = [delta_of(x) for delta_of in brackets]
        assert max(b.lower for b in bounds) <= min(b.upper for b in bounds)


def test_ledger_round_trip_keeps_the_bounded_range_curve():
    accountant = PrivacyAccountant().add(_mechanism("1/4"), count=4)
    accountant.add(DiscreteGaussian(Fraction(100)), sensitivity=[1, 1])
    restored = PrivacyAccountant.from_dict(accountant.to_dict())
    assert restored.epsilon(1e-6).upper == accountant.epsilon(1e-6).upper
    assert bounded_range_epsilon_of(restored.events[0].mechanism) == Fraction(
        accountant.events[0].mechanism.pure_epsilon
    )


def test_release_with_selections_certifies_less_epsilon_than_pure_composition():
    # fails on the accountant that composed selections as randomized response at ε
    selections = _mechanism("1/10")
    new = PrivacyAccountant().add(selections, count=5)
    old = PrivacyAccountant().add(PureDP(selections.pure_epsilon), count=5)
    assert new.epsilon(1e-6).upper < 0.9 * old.epsilon(1e-6).upper


# ----------------------------------------------------------------- bad input


def test_bad_lattice_arguments_are_named():
    with pytest.raises(ValueError, match="epsilon must be a positive Fraction"):
        bounded_range_losses(0.5)
    with pytest.raises(ValueError, match="points must be an integer >= 1"):
        bounded_range_losses(Fraction(1, 2), 0)


def test_a_bounded_range_epsilon_must_be_a_stored_fraction():
    class Computed:
        def bounded_range_epsilon(self):
            return Fraction(1)

    with pytest.raises(TypeError, match="must be a stored positive Fraction"):
        bounded_range_epsilon_of(Computed())
    assert bounded_range_epsilon_of(PureDP(Fraction(1))) is None
