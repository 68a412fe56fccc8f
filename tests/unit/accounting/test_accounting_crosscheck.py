"""Cross-check against Google's dp_accounting PLD accountant.

For five mixed compositions of discrete Gaussian, discrete Laplace and randomized response,
both our `PrivacyAccountant` and our grid `PrivacyLossDistribution` must give an upper bound
that is (a) valid: not below dp_accounting's optimistic estimate (a lower bound on the true
value, up to its float round-off), and (b) tight: not above dp_accounting's pessimistic
estimate by more than 1% relative; our own lower bound must lie below our upper bound and
below their pessimistic estimate. dp_accounting runs at its default grid (1e-4).

Parameter mapping (checked against dp_accounting's docstrings):
- discrete Gaussian: dp_accounting's ``sigma`` is the parameter with pmf ∝ exp(-x²/(2σ²)),
  i.e. sqrt of our ``sigma2``;
- discrete Laplace: their ``parameter`` a has pmf ∝ exp(-a|x|), our ``scale`` b is 1/a;
- randomized response ε: their two-bucket RR with noise p = 2/(1 + e^ε) has losses ±ε with
  P-masses e^ε/(1+e^ε), 1/(1+e^ε), the dominating pair of pure ε-DP that we use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_google

from dp_pipeline.accounting import PrivacyAccountant, PrivacyLossDistribution, zcdp_to_delta
from dp_pipeline.accounting.events import PureDP
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

# Their estimates are float computations on a 1e-4 grid; "valid" allows this much round-off.
FLOAT_SLACK = 1e-9
TIGHTNESS = 0.01


@dataclass(frozen=True)
class FloatPureDP:
    """A pure-DP mechanism with a float ε (not on a rational lattice: forces the grid PLD)."""

    pure_epsilon: float


# (kind, parameter, sensitivity, count) parts; then ε for δ(ε) and δ for ε(δ).
CASES = [
    pytest.param([("dg", 100, 1, 10), ("dl", 20, 1, 10)], 1.0, 1e-6, id="dg10-dl10"),
    pytest.param([("dg", 400, 2, 5), ("rr", 0.1, 1, 20)], 1.0, 1e-6, id="dg5-rr20-float"),
    pytest.param(
        [("dl", 5, 1, 3), ("dg", 50, 1, 1), ("rr", Fraction(1, 2), 1, 2)], 2.0, 1e-5, id="dl-dg-rr"
    ),
    pytest.param([("dg", 2500, 1, 100), ("dl", 50, 1, 100)], 1.0, 1e-8, id="cks-fig4-mixed"),
    pytest.param(
        [("dg", 10, 1, 1), ("dl", 2, 3, 2), ("rr", Fraction(1, 4), 1, 4)], 4.0, 1e-3, id="dl-sens3"
    ),
]


def _mechanism(kind, parameter):
    if kind == "dg":
        return DiscreteGaussian(parameter)
    if kind == "dl":
        return DiscreteLaplace(parameter)
    return PureDP(parameter) if isinstance(parameter, Fraction) else FloatPureDP(parameter)


def _google(parts, pessimistic: bool):
    total = None
    for kind, parameter, sensitivity, count in parts:
        options = {"pessimistic_estimate": pessimistic, "value_discretization_interval": 1e-4}
        if kind == "dg":
            part = pld_google.from_discrete_gaussian_mechanism(
                math.sqrt(parameter), sensitivity=sensitivity, **options
            )
        elif kind == "dl":
            part = pld_google.from_discrete_laplace_mechanism(
                1 / parameter, sensitivity=sensitivity, **options
            )
        else:
            epsilon = float(parameter)
            part = pld_google.from_randomized_response(2 / (1 + math.exp(epsilon)), 2, **options)
        part = part.self_compose(count) if count > 1 else part
        total = part if total is None else total.compose(part)
    return total


def _our_pld(parts):
    total = None
    for kind, parameter, sensitivity, count in parts:
        if kind == "rr":
            part = PrivacyLossDistribution.from_randomized_response(float(parameter), step=1e-4)
        else:
            part = PrivacyLossDistribution.from_mechanism(
                _mechanism(kind, parameter), sensitivity, step=1e-4
            )
        part = part.self_compose(count) if count > 1 else part
        total = part if total is None else total.compose(part)
    return total


def _our_accountant(parts):
    accountant = PrivacyAccountant()
    for kind, parameter, sensitivity, count in parts:
        accountant.add(_mechanism(kind, parameter), sensitivity, count)
    return accountant


def _check(ours, optimistic: float, pessimistic: float, what: str) -> None:
    assert ours.lower <= ours.upper, what
    assert ours.upper >= optimistic * (1 - FLOAT_SLACK), f"{what}: below a lower bound"
    assert ours.upper <= pessimistic * (1 + TIGHTNESS), f"{what}: looser than dp_accounting"
    assert ours.lower <= pessimistic * (1 + FLOAT_SLACK), f"{what}: lower above an upper bound"


@pytest.mark.parametrize(("parts", "epsilon", "delta"), CASES)
def test_crosscheck_with_dp_accounting(parts, epsilon, delta):
    optimistic, pessimistic = _google(parts, False), _google(parts, True)
    their_delta = (
        optimistic.get_delta_for_epsilon(epsilon),
        pessimistic.get_delta_for_epsilon(epsilon),
    )
    their_epsilon = (
        optimistic.get_epsilon_for_delta(delta),
        pessimistic.get_epsilon_for_delta(delta),
    )
    accountant = _our_accountant(parts)
    pld = _our_pld(parts)
    for name, delta_bound, epsilon_bound in (
        ("accountant", accountant.delta(epsilon), accountant.epsilon(delta)),
        ("pld", pld.delta(epsilon), pld.epsilon(delta)),
    ):
        _check(delta_bound, *their_delta, f"{name} δ({epsilon})")
        _check(epsilon_bound, *their_epsilon, f"{name} ε({delta})")
    # The 1% check has power: the zCDP conversion, a valid but looser bound, fails it.
    zcdp = zcdp_to_delta(float(accountant.rho()), epsilon)
    assert zcdp > their_delta[1] * (1 + TIGHTNESS)
    if any(isinstance(_mechanism(k, p), FloatPureDP) for k, p, _, _ in parts):
        assert accountant.methods[-1] == "pld_fft"  # the grid path is cross-checked too
    else:
        # an exact path: the finite supports composed directly, or the lattice FFT
        assert accountant.methods[-1] in ("support_exact", "multivariate_fft")
