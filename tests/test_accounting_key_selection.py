"""A key selection as one accountant event: count noise plus an infinite-loss atom."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest

from dp_pipeline import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.atoms import compose_atoms, split_atoms
from dp_pipeline.accounting.events import KeySelection, PrivacyEvent, PureDP
from dp_pipeline.accounting.families import Family, family_of
from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect.plan import plan_selection


def _plan(noise: str, max_cells: int = 1, neighbouring: str = "replace"):
    return plan_selection(
        noise=noise,
        epsilon=1,
        delta=Fraction(1, 10**6),
        max_cells=max_cells,
        neighbouring=neighbouring,
    )


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("max_cells", [1, 3])
def test_selection_alone_is_bounded_by_the_plan(noise, max_cells):
    plan = _plan(noise, max_cells)
    accountant = PrivacyAccountant().add_event(plan.event())
    for eps in (0.5, 1.0, 2.0):
        bound = accountant.delta(eps)
        assert bound.method.endswith("key_selection")
        # never above the plan's own δ_sel(ε), never below q (the atom alone)
        assert Fraction(bound.upper) >= plan.new_keys_delta
        assert float(plan.new_keys_delta) * (1 - 1e-15) <= bound.lower <= bound.upper
        assert bound.upper <= float(plan.delta_at(eps)) * (1 + 1e-12)
    # at and past the planned ε the two agree within 1%
    for eps in (1.0, 2.0):
        assert (
            accountant.delta(eps).upper >= float(plan.delta_at(eps)) * 0.99 or noise == "gaussian"
        )
    epsilon = accountant.epsilon(float(plan.delta))
    assert epsilon.upper <= float(plan.epsilon) * 1.01
    assert accountant.delta(epsilon.upper).upper <= float(plan.delta)


def test_delta_at_most_q_is_refused():
    plan = _plan("laplace")
    accountant = PrivacyAccountant().add_event(plan.event())
    q = float(plan.new_keys_delta)
    with pytest.raises(DPValueError, match="at most the key selections' release probability"):
        accountant.epsilon(q / 2)


def test_rho_and_pure_epsilon_of_a_selection():
    accountant = PrivacyAccountant().add_event(_plan("gaussian").event())
    with pytest.raises(DPValueError, match="no finite zCDP ρ"):
        accountant.rho()
    with pytest.raises(DPValueError, match="pure ε is infinite"):
        PrivacyAccountant().add_event(_plan("laplace").event()).pure_epsilon()
    assert accountant.report(delta=1e-5)["rho"] is None
    # without an atom a selection's ρ is its count noise's
    free = KeySelection(DiscreteGaussian(4), (1, 1), Fraction(0))
    assert PrivacyAccountant().add(free).rho() == Fraction(1, 4)


def test_atoms_compose_exactly():
    atoms = [(Fraction(1, 3), 2), (Fraction(1, 7), 1)]
    assert compose_atoms(atoms) == 1 - Fraction(2, 3) ** 2 * Fraction(6, 7)
    noise = DiscreteLaplace(2)
    events = [
        PrivacyEvent(KeySelection(noise, (1,), Fraction(1, 3)), (1,), 2),
        PrivacyEvent(DiscreteGaussian(9), (1,), 1),
    ]
    finite, q = split_atoms(events)
    assert q == 1 - Fraction(2, 3) ** 2
    assert finite == [PrivacyEvent(noise, (1,), 2), PrivacyEvent(DiscreteGaussian(9), (1,), 1)]
    assert family_of(events[0].mechanism) is Family.KEY_SELECTION


def test_selection_round_trips_and_explains():
    accountant = PrivacyAccountant().add_event(_plan("laplace", 2).event())
    restored = PrivacyAccountant.from_dict(accountant.to_dict())
    assert restored.events == accountant.events
    explained = accountant.explain()
    assert explained[-2][0] == "key_selection"
    assert "1 - (1 - q_total)" in explained[-2][1]


def _pure_with_atom(epsilon0: Fraction, q: Fraction, eps: float) -> mpmath.mpf:
    """δ(ε) of randomized response at ε₀ composed with an atom q, by mpmath."""
    mpmath.mp.prec = 200
    e0, e = mpmath.mpf(epsilon0.numerator) / epsilon0.denominator, mpmath.mpf(eps)
    high = mpmath.exp(e0) / (1 + mpmath.exp(e0))
    finite = max(mpmath.mpf(0), high - mpmath.exp(e) * (1 - high))
    qq = mpmath.mpf(q.numerator) / q.denominator
    return 1 - (1 - qq) * (1 - finite)


def test_composed_with_pure_dp_against_mpmath():
    q = Fraction(1, 10**5)
    selection = KeySelection(DiscreteLaplace(10**9), (1,), q)  # negligible count noise
    accountant = PrivacyAccountant().add(selection).add(PureDP(Fraction(1, 2)))
    for eps in (0.1, 0.3, 0.6):
        bound = accountant.delta(eps)
        exact = _pure_with_atom(Fraction(1, 2), q, eps)
        assert bound.lower <= exact * (1 + 1e-9)
        assert bound.upper >= exact * (1 - 1e-9)
        assert bound.upper <= exact * 1.01 + 1e-12


def _gaussian_with_atom(sigma2: int, q: Fraction, eps: float) -> mpmath.mpf:
    """δ(ε) of one discrete Gaussian coordinate (shift 1) with an atom q, by mpmath."""
    mpmath.mp.prec = 200
    s2, e = mpmath.mpf(sigma2), mpmath.mpf(eps)
    span = int(60 * sigma2**0.5) + 10
    weights = {x: mpmath.exp(-mpmath.mpf(x * x) / (2 * s2)) for x in range(-span, span + 2)}
    norm = mpmath.fsum(weights[x] for x in range(-span, span + 1))
    finite = (
        mpmath.fsum(
            max(mpmath.mpf(0), weights[x] - mpmath.exp(e) * weights[x - 1])
            for x in range(-span + 1, span + 1)
        )
        / norm
    )
    qq = mpmath.mpf(q.numerator) / q.denominator
    return 1 - (1 - qq) * (1 - finite)


def test_composed_with_discrete_gaussian_against_mpmath():
    q = Fraction(1, 10**6)
    selection = KeySelection(DiscreteLaplace(10**9), (1,), q)
    accountant = PrivacyAccountant().add(selection).add(DiscreteGaussian(16))
    for eps in (0.5, 1.0):
        bound = accountant.delta(eps)
        exact = _gaussian_with_atom(16, q, eps)
        assert bound.upper >= exact * (1 - 1e-9)
        assert bound.upper <= exact * 1.01 + 1e-9
