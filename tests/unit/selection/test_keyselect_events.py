"""Every key selection plan is one accountant event, checked against mpmath.

The references are written from the definitions at 60 digits: the truncated geometric's
pmf and release probabilities π(n) = P[n + Z >= K + 1], randomized response and its
s-fold composition (a binomial privacy loss), and the hockey stick Σ max(0, P - e^ε Q).
They import nothing of `dp_pipeline.keyselect` but the plans under test.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath as mp
import pytest

from dp_pipeline import DiscreteLaplace
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.events import KeySelection
from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect import plan_selection
from dp_pipeline.keyselect.weighted import plan_weighted_selection


@pytest.fixture(autouse=True)
def _precision():
    with mp.workdps(60):
        yield


def mpf(value) -> mp.mpf:
    if isinstance(value, mp.mpf):
        return value
    value = Fraction(value)
    return mp.mpf(value.numerator) / value.denominator


def truncated_pmf(scale, bound: int) -> dict[int, mp.mpf]:
    alpha = mp.exp(-1 / mpf(scale))
    weights = {z: alpha ** abs(z) for z in range(-bound, bound + 1)}
    total = mp.fsum(weights.values())
    return {z: w / total for z, w in weights.items()}


def release_probabilities(pmf: dict[int, mp.mpf], bound: int) -> list[mp.mpf]:
    """π(n) for n = 0..2K+2 (π(0) = 0: a key no unit holds is never released)."""
    return [mp.fsum(w for z, w in pmf.items() if n + z >= bound + 1) for n in range(2 * bound + 3)]


def binary_profile(pi: list[mp.mpf], eps) -> mp.mpf:
    """The worst δ(ε) over neighbouring counts n, n+1 of one key's binary output."""
    growth = mp.exp(mpf(eps))
    return max(
        max(pi[n + 1] - growth * pi[n], (1 - pi[n]) - growth * (1 - pi[n + 1]))
        for n in range(len(pi) - 1)
    )


def composed_response(eps_key, runs: int, atom, eps) -> mp.mpf:
    """δ(ε) of `runs` randomized responses with ε_key each (loss ε_key·(2j - runs),
    j ~ Bin(runs, e^ε_key / (1 + e^ε_key))) with an infinite-loss atom of mass `atom`."""
    e_key = mpf(eps_key)
    high = mp.exp(e_key) / (1 + mp.exp(e_key))
    finite = mp.fsum(
        mp.binomial(runs, j)
        * high**j
        * (1 - high) ** (runs - j)
        * max(mp.mpf(0), 1 - mp.exp(mpf(eps) - e_key * (2 * j - runs)))
        for j in range(runs + 1)
    )
    return 1 - (1 - mpf(atom)) * (1 - finite)


def assert_bracket(bound, exact: mp.mpf) -> None:
    assert bound.lower <= exact * (1 + mp.mpf("1e-9")) + mp.mpf("1e-30")
    assert bound.upper >= exact * (1 - mp.mpf("1e-9"))
    assert bound.upper <= exact * mp.mpf("1.01") + mp.mpf("1e-30")


@pytest.mark.parametrize(
    ("epsilon", "delta", "m", "neighbouring"),
    [
        (Fraction(1), Fraction(1, 10**6), 1, "add_remove"),
        (Fraction(1, 2), Fraction(1, 10**8), 3, "add_remove"),
        (Fraction(2), Fraction(1, 10**5), 2, "replace"),
    ],
)
def test_a_truncated_plans_event_is_the_canonical_pair_of_each_key(epsilon, delta, m, neighbouring):
    plan = plan_selection(
        noise="laplace",
        epsilon=epsilon,
        delta=delta,
        max_cells=m,
        neighbouring=neighbouring,
        policy="truncated_geometric",
    )
    s = m * (2 if neighbouring == "replace" else 1)
    assert plan.policy == "truncated_geometric"
    assert plan.scale == Fraction(s) / epsilon
    bound = plan.truncation
    pmf = truncated_pmf(plan.scale, bound)
    top = pmf[bound]
    # the least K: 1 - (1 - P(K))^s meets δ, K - 1 does not
    assert 1 - (1 - top) ** s <= mpf(delta)
    assert 1 - (1 - truncated_pmf(plan.scale, bound - 1)[bound - 1]) ** s > mpf(delta)
    # each key's binary output is (ε/s, P(K))-DP in its count, exactly
    pi = release_probabilities(pmf, bound)
    assert binary_profile(pi, epsilon / s) <= top * (1 + mp.mpf("1e-40"))
    accountant = PrivacyAccountant().add_event(plan.event())
    atom = 1 - (1 - top) ** s
    for eps in (epsilon / 4, epsilon / 2, epsilon, epsilon * 2):
        exact = composed_response(epsilon / s, s, atom, eps)
        assert_bracket(accountant.delta(float(eps)), exact)
        if s == 1:  # the event dominates the mechanism's own exact profile
            assert accountant.delta(float(eps)).upper >= binary_profile(pi, eps)
    # at the plan's ε the event's δ is the atom, at most the plan's δ
    assert accountant.delta(float(epsilon)).upper <= float(delta)
    assert accountant.delta(float(epsilon)).upper <= float(plan.delta_upper) * (1 + 1e-12)


def test_a_truncated_selection_composes_with_another_event_against_mpmath():
    """The m = 1 optimal selection at ε = 1 and a discrete Laplace of scale 2 moved by one."""
    plan = plan_selection(noise="laplace", epsilon=1, delta=Fraction(1, 10**6), max_cells=1)
    assert plan.policy == "truncated_geometric"
    accountant = PrivacyAccountant().add_event(plan.event()).add(DiscreteLaplace(2), 1)
    top = truncated_pmf(plan.scale, plan.truncation)[plan.truncation]
    # randomized response (ε = 1) x randomized response (ε = 1/2): losses ±1 ± 1/2
    first = mp.e / (1 + mp.e)
    second = mp.exp(mp.mpf(1) / 2) / (1 + mp.exp(mp.mpf(1) / 2))
    losses = {
        mp.mpf(3) / 2: first * second,
        mp.mpf(1) / 2: first * (1 - second),
        -mp.mpf(1) / 2: (1 - first) * second,
        -mp.mpf(3) / 2: (1 - first) * (1 - second),
    }
    for eps in (0.25, 0.75, 1.25):
        finite = mp.fsum(w * max(mp.mpf(0), 1 - mp.exp(eps - x)) for x, w in losses.items())
        assert_bracket(accountant.delta(eps), 1 - (1 - top) * (1 - finite))


@pytest.mark.parametrize(("m", "neighbouring"), [(4, "add_remove"), (10, "replace")])
def test_a_weighted_laplace_plans_event_is_randomized_response_and_its_atom(m, neighbouring):
    plan = plan_weighted_selection(
        noise="laplace",
        epsilon=1,
        delta=Fraction(1, 10**6),
        max_cells=m,
        neighbouring=neighbouring,
    )
    event = plan.event()
    assert event.mechanism == KeySelection(DiscreteLaplace(1), (1,), plan.new_keys_delta)
    accountant = PrivacyAccountant().add_event(event)
    for eps in (Fraction(1, 2), Fraction(1), Fraction(2)):
        exact = composed_response(1, 1, plan.new_keys_delta, eps)
        assert_bracket(accountant.delta(float(eps)), exact)
        assert accountant.delta(float(eps)).upper <= float(plan.delta_at(eps)) * (1 + 1e-12)
    assert accountant.delta(1.0).upper <= float(plan.delta)


def test_the_weighted_gaussian_plan_says_it_has_no_event_and_what_to_use():
    plan = plan_weighted_selection(
        noise="gaussian", epsilon=1, delta=Fraction(1, 10**6), max_cells=4
    )
    with pytest.raises(
        DPValueError,
        match=r"^the weighted Gaussian selection has no accountant "
        r"event .*; plan it with noise='laplace', or use plan_selection",
    ):
        plan.event()


@pytest.mark.parametrize(
    ("m", "neighbouring", "epsilon", "delta"),
    [
        (1, "add_remove", Fraction(1), Fraction(1, 10**6)),
        (1, "replace", Fraction(1), Fraction(1, 10**6)),
        (4, "add_remove", Fraction(1, 2), Fraction(1, 10**7)),
        (10, "replace", Fraction(2), Fraction(1, 10**5)),
        (100, "add_remove", Fraction(1), Fraction(1, 10**6)),
    ],
)
def test_the_default_laplace_policy_is_the_plan_with_the_smaller_threshold(
    m, neighbouring, epsilon, delta
):
    arguments = dict(
        noise="laplace", epsilon=epsilon, delta=delta, max_cells=m, neighbouring=neighbouring
    )
    chosen = plan_selection(**arguments)
    plans = [plan_selection(**arguments, policy=p) for p in ("threshold", "truncated_geometric")]
    assert chosen.threshold == min(p.threshold for p in plans)
    if plans[1].threshold <= plans[0].threshold:
        assert chosen == plans[1]
    else:
        assert chosen == plans[0]
    # a key at the threshold is released with probability at least 1/2, one below it not
    for plan in plans:
        if plan.policy == "truncated_geometric":
            pmf = truncated_pmf(plan.scale, plan.truncation)
        else:
            alpha = mp.exp(-1 / mpf(plan.scale))
            span = int(plan.threshold) * 3 + 50
            norm = (1 - alpha) / (1 + alpha)
            pmf = {z: norm * alpha ** abs(z) for z in range(-span, span + 1)}
        at = mp.fsum(w for z, w in pmf.items() if z >= 0)
        below = mp.fsum(w for z, w in pmf.items() if z >= 1)
        assert at >= mp.mpf(1) / 2 > below
    assert PrivacyAccountant().add_event(chosen.event()).delta(float(epsilon)).upper <= float(delta)


def test_gaussian_plans_keep_the_threshold_policy_and_bad_policies_are_refused():
    arguments = dict(noise="gaussian", epsilon=1, delta=Fraction(1, 10**6), max_cells=3)
    assert plan_selection(**arguments).policy == "threshold"
    with pytest.raises(
        DPValueError,
        match=r"^policy='truncated_geometric': applies to noise='laplace' only \(a truncated "
        r"discrete Laplace per key\); use policy='threshold' with noise='gaussian'$",
    ):
        plan_selection(**arguments, policy="truncated_geometric")
    with pytest.raises(
        DPValueError,
        match=r"^policy='weighted': must be one of 'threshold', 'truncated_geometric' or None "
        r"\(the one with the smaller threshold\)$",
    ):
        plan_selection(**arguments, policy="weighted")
