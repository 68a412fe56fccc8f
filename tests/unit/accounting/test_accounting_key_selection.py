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
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.keyselect.plan import plan_selection


def _plan(noise: str, max_cells: int = 1, neighbouring: str = "replace"):
    return plan_selection(
        noise=noise,
        epsilon=1,
        delta=Fraction(1, 10**6),
        max_cells=max_cells,
        neighbouring=neighbouring,
    )


def _plan_epsilon(plan) -> float:
    """The least ε with the plan's δ_sel(ε) <= its δ, by bisection on ``delta_at``."""
    low, high = 0.0, 2.0 * float(plan.epsilon)
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (low, middle) if plan.delta_at(middle) <= plan.delta else (middle, high)
    return high


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
    # where the atom dominates (ε = 2) the two agree within 1%; a Laplace selection's
    # count noise is pure ε-DP, so they agree at the planned ε too. A Gaussian's count
    # noise is bounded by the plan through zCDP, by the accountant exactly (tighter).
    agree = (1.0, 2.0) if noise == "laplace" else (2.0,)
    for eps in agree:
        assert accountant.delta(eps).upper >= float(plan.delta_at(eps)) * 0.99
    epsilon = accountant.epsilon(float(plan.delta))
    planned = _plan_epsilon(plan)
    assert epsilon.upper <= planned * (1 + 1e-9)
    if noise == "laplace":
        assert epsilon.upper >= planned * 0.99
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


def _mp(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


def _delta_of_pmfs(p: dict, q: dict, eps: float) -> mpmath.mpf:
    """Σ max(0, P(x) - e^ε Q(x)) over the union of supports (the hockey stick)."""
    weight = mpmath.exp(mpmath.mpf(eps))
    return mpmath.fsum(
        max(mpmath.mpf(0), p.get(x, 0) - weight * q.get(x, 0)) for x in set(p) | set(q)
    )


def _product(first: dict, second: dict) -> dict:
    return {(a, b): pa * pb for a, pa in first.items() for b, pb in second.items()}


def _shifted_pair(weights: dict) -> tuple[dict, dict]:
    norm = mpmath.fsum(weights.values())
    pmf = {x: w / norm for x, w in weights.items()}
    return pmf, {x + 1: w for x, w in pmf.items()}


def _laplace_pair(scale: int, span: int) -> tuple[dict, dict]:
    return _shifted_pair(
        {x: mpmath.exp(-mpmath.mpf(abs(x)) / scale) for x in range(-span, span + 1)}
    )


def _gaussian_pair(sigma2: int, span: int) -> tuple[dict, dict]:
    return _shifted_pair(
        {x: mpmath.exp(-mpmath.mpf(x * x) / (2 * sigma2)) for x in range(-span, span + 1)}
    )


def _with_atom(finite: mpmath.mpf, q: Fraction) -> mpmath.mpf:
    return 1 - (1 - _mp(q)) * (1 - finite)


def test_composed_with_pure_dp_against_mpmath():
    """A selection with discrete Laplace count noise (scale 2, one count moved by one) and
    q = 1e-5, composed with a pure 1/2-DP event (randomized response)."""
    mpmath.mp.prec = 120
    q = Fraction(1, 10**5)
    accountant = (
        PrivacyAccountant()
        .add(KeySelection(DiscreteLaplace(2), (1,), q))
        .add(PureDP(Fraction(1, 2)))
    )
    laplace = _laplace_pair(2, 200)  # tails past 200 weigh e^-100
    high = mpmath.exp(mpmath.mpf(1) / 2) / (1 + mpmath.exp(mpmath.mpf(1) / 2))
    response = ({1: high, 0: 1 - high}, {1: 1 - high, 0: high})
    pair = (_product(laplace[0], response[0]), _product(laplace[1], response[1]))
    for eps in (0.2, 0.6, 0.9):
        exact = _with_atom(_delta_of_pmfs(*pair, eps), q)
        bound = accountant.delta(eps)
        assert bound.lower <= exact * (1 + 1e-9) + 1e-30
        assert bound.upper >= exact * (1 - 1e-9)
        assert bound.upper <= exact * 1.01


def test_composed_with_discrete_gaussian_against_mpmath():
    """A selection with discrete Gaussian count noise (σ² = 9) and q = 1e-6, composed with
    a discrete Gaussian of σ² = 16 (each shifted by one)."""
    mpmath.mp.prec = 100
    q = Fraction(1, 10**6)
    accountant = (
        PrivacyAccountant()
        .add(KeySelection(DiscreteGaussian(9), (1,), q))
        .add(DiscreteGaussian(16), 1)
    )
    first, second = _gaussian_pair(9, 60), _gaussian_pair(16, 80)  # 20σ: e^-200 tails
    pair = (_product(first[0], second[0]), _product(first[1], second[1]))
    for eps in (0.3, 0.8, 1.5):
        exact = _with_atom(_delta_of_pmfs(*pair, eps), q)
        bound = accountant.delta(eps)
        assert bound.lower <= exact * (1 + 1e-9) + 1e-30
        assert bound.upper >= exact * (1 - 1e-9)
        assert bound.upper <= exact * 1.01


def test_bad_selections_are_refused_with_the_rule():
    with pytest.raises(DPValueError, match=r"release_probability must be in \[0, 1\)"):
        KeySelection(DiscreteLaplace(2), (1,), Fraction(1))
    with pytest.raises(DPTypeError, match="noise must be a DiscreteGaussian or a DiscreteLaplace"):
        KeySelection(PureDP(Fraction(1)), (1,), Fraction(0))
    with pytest.raises(DPValueError, match="a KeySelection: its own sensitivity"):
        PrivacyAccountant().add(KeySelection(DiscreteLaplace(2), (1,), Fraction(0)), 2)


def test_truncated_geometric_plan_is_an_event_with_its_atom():
    plan = plan_selection(noise="laplace", epsilon=1, delta=Fraction(1, 10**6), max_cells=1)
    assert plan.policy == "truncated_geometric"
    event = plan.event()
    assert event.mechanism == KeySelection(DiscreteLaplace(1), (1,), plan.new_keys_delta)
    assert PrivacyAccountant().add_event(event).delta(1.0).upper <= float(plan.delta)
