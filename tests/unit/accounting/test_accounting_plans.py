"""Release plans of up to ten heterogeneous tables against independent references.

- six discrete Gaussians with σ² from 5 to 10^6 (sensitivity vectors of length 1-2): the
  reference sums the privacy loss exactly on its lattice (step 10^-6) by nested direct
  convolutions of the discrete Gaussian pmfs, the widest one (σ² = 10^6) by tail sums in
  extended precision, independently of the accountant's code;
- Gaussians, a discrete Laplace and a pure-DP mechanism on a common rational lattice: the
  exact lattice FFT (CKS §4, computed here on a larger window) as the reference;
- Gaussians held as finite supports (σ² from 1 to 10^4, shifts up to 300): the Poisson
  summation of `inversion` against the truncated direct sums it replaces.

Every bound must hold (lower <= reference <= upper) and stay as tight as pinned.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.events import PureDP
from dp_pipeline.accounting.inversion import (
    InversionComposition,
    discrete_gaussian_support,
    smooth_gaussian,
)
from dp_pipeline.accounting.lattice import lattice_loss
from dp_pipeline.accounting.paths import lattice_components
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace

# (σ², shift, copies) of the six-table plan of bench/bench_accounting.py (`_arbitrary_six`)
SIX = [(5, 1, 2), (50, 1, 1), (500, 1, 2), (5000, 1, 1), (50000, 1, 2), (10**6, 1, 1)]


def _six_tables() -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    for j, sigma2 in enumerate([5, 50, 500, 5000, 50000, 10**6]):
        accountant.add(DiscreteGaussian(sigma2), [1] if j % 2 else [1, 1])
    return accountant


def _pmf(sigma2: float) -> np.ndarray:
    """P[Y = y] of N_Z(0, σ²) for |y| <= 15σ (the rest is below e^-112 relative)."""
    reach = math.ceil(15 * math.sqrt(sigma2))
    ys = np.arange(-reach, reach + 1, dtype=np.float64)
    weights = np.exp(-(ys * ys) / (2 * sigma2))
    return weights / weights.sum()


def _nest(outer: np.ndarray, multiplier: int, inner: np.ndarray) -> np.ndarray:
    """pmf of multiplier·A + B (both centred, odd lengths) by direct sums."""
    out = np.zeros(multiplier * (len(outer) - 1) + len(inner))
    for i, p in enumerate(outer):
        out[multiplier * i : multiplier * i + len(inner)] += p * inner
    return out


@pytest.fixture(scope="module")
def six_reference():
    """δ(ε) of the six-table plan: L = C + 10^-6·(20·Z + Y6), Z an integer combination.

    Z = 10^4·S1 + 10^3·Y2 + 10^2·S3 + 10·Y4 + S5 (S = the sum of the two copies), its pmf by
    direct sums; for each z, E[(1 - e^{ε-L})_+] over Y6 ~ N_Z(0, 10^6) from tail sums of its
    pmf in extended precision.
    """
    pair = {s: np.convolve(_pmf(s), _pmf(s)) for s in (5, 500, 50000)}
    z = _nest(_pmf(5000), 10, pair[50000])
    z = _nest(pair[500], 100, z)
    z = _nest(_pmf(50), 1000, z)
    z = _nest(pair[5], 10000, z)
    z_first = -(len(z) // 2)
    wide = _pmf(10**6).astype(np.longdouble)
    y_first = -(len(wide) // 2)
    ys = np.arange(y_first, y_first + len(wide)).astype(np.longdouble)
    tail = np.concatenate([np.cumsum(wide[::-1])[::-1], [0]])
    tilted = np.concatenate([np.cumsum((wide * np.exp(-ys / 10**6))[::-1])[::-1], [0]])
    constant = sum(Fraction(copies * shift * shift, 2 * sigma2) for sigma2, shift, copies in SIX)
    zs = np.arange(z_first, z_first + len(z))
    probabilities = z.astype(np.longdouble)

    def delta(epsilon: float) -> float:
        # smallest y with C + 10^-6 (20 z + y) > ε, in exact arithmetic
        threshold = (Fraction(epsilon) - constant) * 10**6
        first_y = math.floor(threshold) - 20 * zs + 1
        index = np.clip(first_y - y_first, 0, len(wide))
        scale = np.exp(
            np.longdouble(float(Fraction(epsilon) - constant)) - zs.astype(np.longdouble) * 2e-5
        )
        inner = tail[index] - scale * tilted[index]
        return float(np.sum(probabilities * np.maximum(inner, 0)))

    return delta


def test_six_tables_delta_against_the_lattice_sums(six_reference):
    bound = _six_tables().delta(2.0)
    exact = six_reference(2.0)
    # the reference (nested sums above) gives δ(2) = 5.02403959133e-4
    assert exact == pytest.approx(5.024039591e-4, rel=1e-9)
    assert bound.lower <= exact * (1 + 1e-10)
    assert bound.upper >= exact * (1 - 1e-10)
    assert bound.upper - bound.lower <= 1e-7 * bound.upper
    assert bound.method == "mgf_inversion"


def test_six_tables_epsilon_against_the_lattice_sums(six_reference):
    bound = _six_tables().epsilon(1e-10)
    # ε.upper is feasible, ε.lower is not (by the reference), and both are within 1e-7
    assert six_reference(bound.upper) <= 1e-10 * (1 + 1e-10)
    assert six_reference(bound.lower) >= 1e-10 * (1 - 1e-10)
    assert bound.upper - bound.lower <= 1e-7 * bound.upper
    assert bound.upper == pytest.approx(4.1120644, rel=1e-7)


def _lattice_plan() -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    accountant.add(DiscreteGaussian(3), [1, 1])
    accountant.add(DiscreteGaussian(40), [2])
    accountant.add(DiscreteGaussian(400), [1, 1, 1])
    accountant.add(DiscreteGaussian(4000), [1])
    accountant.add(DiscreteLaplace(10), 1)
    accountant.add(PureDP(Fraction(1, 10)))
    return accountant


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 4.0])
def test_lattice_plan_delta_against_the_exact_lattice_fft(epsilon):
    accountant = _lattice_plan()
    reference = lattice_loss(lattice_components(accountant.events), 1e-14, max_size=1 << 22)
    assert reference is not None
    exact = reference.delta_bound(epsilon, "multivariate_fft")
    bound = accountant._composition()[0](epsilon)  # the uncapped-by-zCDP composition
    assert bound.lower <= exact.upper and exact.lower <= bound.upper
    # the inversion alone (within brackets.TIGHT, no FFT built): ~2e-5 relative here
    assert bound.upper - bound.lower <= 1e-4 * bound.upper
    # and the upper bound a user is told sits within 5e-5 of the exact FFT's (3e-5 here)
    assert bound.upper <= exact.upper * (1 + 5e-5)


def test_lattice_plan_epsilon_against_the_exact_lattice_fft():
    accountant = _lattice_plan()
    reference = lattice_loss(lattice_components(accountant.events), 1e-14, max_size=1 << 22)
    bound = accountant.epsilon(1e-8)
    assert reference.delta_bound(bound.upper, "").lower <= 1e-8
    assert reference.delta_bound(bound.lower, "").upper >= 1e-8
    assert bound.upper - bound.lower <= 3e-6 * bound.upper
    assert bound.upper == pytest.approx(5.0797330, rel=1e-7)


@pytest.mark.parametrize(
    "sigma2, shift, count",
    [(1.0, 1, 1), (1.5, 3, 2), (20.0, 7, 1), (100.0, 1, 3), (2000.0, 30, 1), (5000.0, 2, 1)],
)
@pytest.mark.parametrize("epsilon", [0.0, 1.0, 3.0])
def test_poisson_summed_support_against_the_direct_sum(sigma2, shift, count, epsilon):
    group = discrete_gaussian_support(sigma2, shift, count)
    assert group.gaussian == (sigma2, shift)
    direct = dataclasses.replace(group, gaussian=None)
    smooth = [smooth_gaussian(Fraction(20000), 1, 1)]
    closed = InversionComposition(smooth, [group]).delta_bounds(epsilon)
    summed = InversionComposition(smooth, [direct]).delta_bounds(epsilon)
    assert closed[0] <= summed[1] * (1 + 1e-12) and summed[0] <= closed[1] * (1 + 1e-12)
    assert closed[1] - closed[0] <= max(2 * (summed[1] - summed[0]), 1e-300)


def test_heterogeneous_ten_tables_are_tight_and_consistent():
    """Ten tables (σ² from 2 to 10^12, shifts up to 300, a Laplace, an exponential
    mechanism): ε(δ) and δ(ε) are tight and each other's inverse."""
    accountant = PrivacyAccountant()
    accountant.add(DiscreteGaussian(2), [1])
    accountant.add(DiscreteGaussian(Fraction(90000 * 300)), [300, 1])
    accountant.add(DiscreteGaussian(750), [1, 1, 2])
    accountant.add(DiscreteGaussian(10**12), [300])
    accountant.add(DiscreteGaussian(Fraction(123457, 10)), [3])
    accountant.add(DiscreteGaussian(10**8), [50, 50])
    accountant.add(DiscreteGaussian(64), [1])
    accountant.add(DiscreteLaplace(200), 1)
    accountant.add(BaseTwoExponential(Fraction(1, 10)))
    accountant.add(DiscreteGaussian(9), [2])
    epsilon = accountant.epsilon(1e-10)
    # the lower end comes from the plan with its selection as an ε-BR pair
    # (`selection_lower`), not from the dominating pair of the upper end: within 0.1%
    assert epsilon.upper - epsilon.lower <= 1e-3 * epsilon.upper
    at_upper = accountant.delta(epsilon.upper)
    at_lower = accountant.delta(epsilon.lower)
    assert at_upper.upper <= 1e-10 < at_lower.lower
    assert at_upper.method == "mgf_inversion"
