"""The accounting contract: every composition method, on closed-form cases, gives a true
bracket (``lower <= exact <= upper``) labelled with the method that produced it.

Each method is built directly on the events it supports (not through the accountant's
choice, which would hide all but the winner), and checked against exact δ(ε) from
references written apart from the accountant: the binomial closed form of k-fold pure
ε-DP (randomized response's dominating pair), the mpmath composition of exact rational
losses (`accounting_reference.ReferenceComposition`) and the Euler–Maclaurin tails of
one wide discrete Gaussian beside randomized responses (`gaussian_tail_reference`).
The accountant's own answers (the chosen method, its caps and shortcuts) are checked on
the same cases, δ(ε) and ε(δ).
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest
from accounting_plans import accountant_of
from accounting_reference import ReferenceComposition
from gaussian_tail_reference import wide_gaussian_delta

from dp_pipeline.accounting.bounds import DeltaBound, Method
from dp_pipeline.accounting.brackets import inversion_delta
from dp_pipeline.accounting.coarse_lattice import coarsened_lattice_loss
from dp_pipeline.accounting.conditioning import LatticeConditioning, conditioning_coordinate
from dp_pipeline.accounting.event_totals import pure_dp_split
from dp_pipeline.accounting.events import PureDP
from dp_pipeline.accounting.gaussian_split import gaussian_split
from dp_pipeline.accounting.laplace_conditioning import laplace_bracket, laplace_conditionings
from dp_pipeline.accounting.lattice import lattice_loss
from dp_pipeline.accounting.paths import (
    inversion_of,
    lattice_components,
    pld_of,
    single_coordinate,
)
from dp_pipeline.accounting.strategy import rest_summary
from dp_pipeline.accounting.support_composition import support_loss
from dp_pipeline.accounting.tilted_lattice import TiltedLattice
from dp_pipeline.accounting.zcdp import zcdp_to_delta
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace

MPMATH_DPS = 40  # decimal digits: tests/conftest.py sets them for each test

# closed-form cases: name -> (plan, the ε at which δ is checked)
CASES = {
    "gaussian": ([(DiscreteGaussian(8), (1,), 1)], (0.5, 1.0, 3.0)),
    "gaussian-shift3": ([(DiscreteGaussian(50), (3,), 1)], (0.2, 1.0)),
    "laplace": ([(DiscreteLaplace(Fraction(3, 2)), (1,), 1)], (0.1, 0.5)),
    "pure": ([(PureDP(Fraction(1, 2)), (1,), 3)], (0.0, 0.5, 1.0)),
    "laplaces+pure": (
        [
            (DiscreteLaplace(2), (1,), 1),
            (DiscreteLaplace(3), (2,), 1),
            (PureDP(Fraction(1, 3)), (1,), 1),
        ],
        (0.5, 1.0),
    ),
    "gaussians+laplace+pure": (
        [
            (DiscreteGaussian(40), (1,), 2),
            (DiscreteLaplace(3), (1,), 1),
            (PureDP(Fraction(1, 4)), (1,), 1),
        ],
        (0.5, 1.0, 2.0),
    ),
    "two-gaussians": ([(DiscreteGaussian(3000), (1,), 1), (DiscreteGaussian(50), (1,), 2)], (1.0,)),
    # a coarse Gaussian coordinate (loss step 100) beside a small rest: conditioning on it
    "coarse-gaussian": (
        [
            (DiscreteGaussian(4), (400,), 1),
            (PureDP(Fraction(1, 10)), (1,), 1),
            (DiscreteLaplace(3), (1,), 1),
        ],
        (19900.0, 20050.0, 20350.0),
    ),
}

_TOLERANCE = 1e-14


def _fft(events):
    components = lattice_components(events)
    loss = lattice_loss(components, _TOLERANCE, max_size=1 << 20) if components else None
    return None if loss is None else (lambda eps: loss.delta_bound(eps, "multivariate_fft"))


def _coarse(events):
    components = lattice_components(events)
    coarse = coarsened_lattice_loss(components, _TOLERANCE) if components else None
    name = "multivariate_fft_coarsened"
    return None if coarse is None else (lambda eps: coarse.delta_bound(eps, name))


def _tilted(events):
    components = lattice_components(events)
    return None if components is None else TiltedLattice(components).delta_bound


def _inversion(events):
    candidates = inversion_of(events)
    return inversion_delta(candidates) if candidates else None


def _single(events):
    single = single_coordinate(events)
    return None if single is None else single[0]


def _support(events):
    loss = support_loss(events)
    return None if loss is None else loss.delta_bound


def _split(events):
    split = gaussian_split(events)
    return None if split is None else split.delta_bound


def _pld(events):
    pld = pld_of(events)
    return None if pld is None else pld.delta


def _lattice_conditioning(events):
    chosen = conditioning_coordinate(events, rest_summary)
    return None if chosen is None else LatticeConditioning(*chosen).delta_bound


def _laplace_conditioning(events):
    found = laplace_conditionings(events, rest_summary)
    return laplace_bracket(found) if found else None


# method label -> (builder: events -> δ(ε) bracket function or None, the cases it must cover)
METHODS = {
    "theorem7": (_single, ("gaussian", "gaussian-shift3")),
    "discrete_laplace_exact": (_single, ("laplace",)),
    "mgf_inversion": (_inversion, ("gaussians+laplace+pure", "two-gaussians")),
    "support_exact": (_support, ("gaussian", "laplace", "pure", "gaussians+laplace+pure")),
    "support_exact + gaussian_tails": (_split, ("gaussian", "two-gaussians")),
    "multivariate_fft": (_fft, tuple(CASES)),
    "multivariate_fft_coarsened": (_coarse, tuple(CASES)),
    "tilted_lattice_fft": (_tilted, ("gaussian", "pure", "gaussians+laplace+pure")),
    "pld_fft": (_pld, tuple(CASES)),
    "lattice_conditioning": (_lattice_conditioning, ("coarse-gaussian",)),
    "laplace_conditioning": (_laplace_conditioning, ("gaussians+laplace+pure",)),
}
# the methods checked apart (below): the negligible Gaussians' basic composition, the
# closed-form caps, plain pure-DP addition and the trivial bound δ <= 1 (true by definition)
APART = {
    Method.NEGLIGIBLE_GAUSSIANS,
    Method.ZCDP,
    Method.PURE_DP_ZCDP,
    Method.PURE_DP,
    Method.TRIVIAL,
    Method.KEY_SELECTION,  # atoms composed with a finite part: test_accounting_key_selection
}


def test_every_method_is_under_the_contract():
    assert {Method(name) for name in METHODS} | APART == set(Method)


_REFERENCES: dict = {}


def _exact(case: str, epsilon: float) -> tuple[float, float]:
    """An interval around the exact δ(ε) of ``case`` (cached: the references are slow)."""
    if (case, epsilon) not in _REFERENCES:
        plan = CASES[case][0]
        if case == "pure":
            _REFERENCES[case, epsilon] = _pure_composition_delta(Fraction(1, 2), 3, epsilon)
        else:
            _REFERENCES[case, epsilon] = ReferenceComposition(plan).delta(epsilon)
    return _REFERENCES[case, epsilon]


def _pure_composition_delta(epsilon0: Fraction, k: int, epsilon: float) -> tuple[float, float]:
    """Exact δ(ε) of k-fold pure ε0-DP: E[(1 - e^{ε-L})_+] over the loss L = ε0(k - 2j) of
    k randomized responses, j ~ Binomial(k, 1/(1 + e^{ε0})) (Kairouz, Oh & Viswanath)."""
    e0 = mpmath.mpf(epsilon0.numerator) / epsilon0.denominator
    q = 1 / (1 + mpmath.exp(e0))
    total = mpmath.mpf(0)
    for j in range(k + 1):
        loss = e0 * (k - 2 * j)
        if loss > epsilon:
            mass = mpmath.binomial(k, j) * (1 - q) ** (k - j) * q**j
            total += mass * (1 - mpmath.exp(epsilon - loss))
    # 40 digits, then widened by 2^-50 relative: the float ends enclose the exact value
    return float(total * (1 - mpmath.mpf(2) ** -50)), float(total * (1 + mpmath.mpf(2) ** -50))


def _true(bound, exact: tuple[float, float]) -> bool:
    return bound.lower <= exact[1] and exact[0] <= bound.upper


@pytest.mark.parametrize(
    ("method", "case"),
    [(method, case) for method, (_, cases) in METHODS.items() for case in cases],
)
def test_every_method_brackets_the_exact_delta_and_names_itself(method, case):
    build, _ = METHODS[method]
    plan, epsilons = CASES[case]
    delta_of = build(list(accountant_of(plan).events))
    assert delta_of is not None, f"{method} does not build on {case}"
    for epsilon in epsilons:
        bound = delta_of(epsilon)
        exact = _exact(case, epsilon)
        # a conditioning names the rest's method after its own
        assert bound.method == method or bound.method.startswith(f"{method} + ")
        assert 0 <= bound.lower <= bound.upper <= 1, (method, case, epsilon, bound)
        assert _true(bound, exact), (method, case, epsilon, bound, exact)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_accountant_brackets_delta_and_epsilon_with_its_own_methods(case):
    plan, epsilons = CASES[case]
    accountant = accountant_of(plan)
    for epsilon in epsilons:
        bound = accountant.delta(epsilon)
        assert _true(bound, _exact(case, epsilon)), (case, epsilon, bound)
        assert bound.method.split(" (")[0] in (*accountant.methods, "zcdp", "pure_dp + zcdp")
    reference = ReferenceComposition(plan)
    for delta in (1e-3, 1e-6):
        bound = accountant.epsilon(delta)
        # the upper ε is a guarantee: δ(upper) <= δ; the lower ε is not above the true one
        assert reference.delta(bound.upper)[0] <= delta, (case, delta, bound)
        assert bound.lower == 0 or reference.delta(bound.lower)[1] >= delta, (case, delta, bound)


def test_the_closed_form_caps_are_above_the_exact_delta():
    plan, epsilons = CASES["gaussians+laplace+pure"]
    accountant = accountant_of(plan)
    rho = float(accountant.rho())
    pure_total, rest_rho = (float(x) for x in pure_dp_split(accountant.events))
    for epsilon in epsilons:
        exact = _exact("gaussians+laplace+pure", epsilon)[0]
        assert zcdp_to_delta(rho, epsilon) >= exact
        if epsilon > pure_total:
            assert zcdp_to_delta(rest_rho, epsilon - pure_total) >= exact


def test_pure_dp_addition_is_exact_at_the_total():
    accountant = accountant_of(CASES["pure"][0])
    total = float(accountant.pure_epsilon())
    assert accountant.delta(total, method="pure_dp") == DeltaBound(0.0, 0.0, "pure_dp")
    assert _pure_composition_delta(Fraction(1, 2), 3, total)[1] == 0.0


@pytest.mark.parametrize("epsilon", [0.1, 0.4, 0.43])
def test_negligible_gaussians_bracket_the_exact_delta(epsilon):
    """σ² = 10^16 beside a Laplace (pure ε 1/10) and pure ε 1/3: the Gaussian's ρ moves ε
    by far less than 1e-6; the Euler–Maclaurin reference holds the bracket."""
    plan = [
        (DiscreteGaussian(10**16), (1,), 1),
        (DiscreteLaplace(10), (1,), 1),
        (PureDP(Fraction(1, 3)), (1,), 1),
    ]
    bound = accountant_of(plan).delta(epsilon)
    assert bound.method == "support_exact + negligible gaussian, composed exactly"
    low, high = wide_gaussian_delta(10**16, [Fraction(1, 10), Fraction(1, 3)], epsilon)
    assert bound.lower <= float(high) and float(low) <= bound.upper, (bound, low, high)


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0])
def test_a_wide_gaussian_beside_randomized_responses_is_bracketed(epsilon):
    """σ² = 10^6 with two Laplaces (pure ε 1/10 and 1/20 at shift 1): the accountant's
    bracket holds the Euler–Maclaurin reference."""
    sigma2 = Fraction(10**6)
    plan = [
        (DiscreteGaussian(sigma2), (1,), 1),
        (DiscreteLaplace(10), (1,), 1),
        (DiscreteLaplace(20), (1,), 1),
    ]
    bound = accountant_of(plan).delta(epsilon)
    low, high = wide_gaussian_delta(sigma2, [Fraction(1, 10), Fraction(1, 20)], epsilon)
    assert bound.lower <= float(high) and float(low) <= bound.upper, (bound, low, high)
