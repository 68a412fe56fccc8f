"""Every bracket true: lower <= exact <= upper for δ(ε) and ε(δ), subnormal floats included.

References, none through the accountant:
- `gaussian_tail_reference.wide_gaussian_delta`: a wide discrete Gaussian beside randomized
  responses (discrete Laplaces of shift 1 and pure-DP events), an mpmath interval around
  the exact δ (Euler–Maclaurin tails with their remainder bounds), itself checked here
  against direct mpmath sums;
- mpmath's own e^x for the outward conversions of `outward`;
- the worst case of one ε-bounded-range selection, δ_BR (Dong, Durfee & Rogers 2020, §4),
  alone and beside pure DP (where the selection may pick its t from the randomized
  response's output, so the worst case is E_RR[δ_BR(x - L)]), and their non-adaptive
  composition of k runs (§5) in mpmath.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import pytest

from dp_pipeline import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.events import PureDP
from dp_pipeline.accounting.outward import exp_down, exp_up, round_down
from tests.support.gaussian_tail_reference import wide_gaussian_delta

MPMATH_DPS = 40  # decimal digits: tests/conftest.py sets them for each test

# (σ², discrete Laplace scale, pure ε): δ(ε) falls through the subnormal floats just above
# the pure part's total ε = 1/b + ε₀, where the Gaussian alone must supply the excess
# (σ² = 10^12, b = 10, ε₀ = 1/3 is the plan of the audit: δ(0.4333713080171368) was
# reported as 5e-324 against an exact 6.075e-324)
_SUBNORMAL_PLANS = [
    (10**12, 10, Fraction(1, 3)),
    (10**10, 3, Fraction(1, 5)),
    (4 * 10**12, 10, Fraction(1, 3)),
]


def _plan(sigma2: int, scale: int, pure: Fraction) -> PrivacyAccountant:
    accountant = PrivacyAccountant().add(DiscreteGaussian(sigma2))
    return accountant.add(DiscreteLaplace(scale)).add(PureDP(pure))


def _contains(lower: float, upper: float, exact: tuple) -> bool:
    """Whether [lower, upper] meets the reference interval (both rigorous): if not, the
    bracket misses the exact value."""
    return mp.mpf(lower) <= exact[1] and exact[0] <= mp.mpf(upper)


def test_reference_tails_match_direct_sums():
    # the Euler–Maclaurin interval of the reference holds the direct mpmath sum of the
    # same discrete Gaussian (σ² = 10^4, small enough to sum term by term)
    sigma2 = 10**4
    s = mp.mpf(sigma2)
    normaliser = mp.fsum(mp.exp(-mp.mpf(k * k) / (2 * s)) for k in range(-4000, 4001))
    pure = [Fraction(1, 3)]
    for eps in (0.34, 0.36, 0.38, 0.40):
        top = Fraction(eps) - pure[0]
        first = math.floor((top - Fraction(1, 2 * sigma2)) * sigma2) + 1
        weight = mp.exp(mp.mpf(top))
        direct = (
            mp.fsum(
                mp.exp(-mp.mpf(y * y) / (2 * s))
                * (1 - weight / mp.exp(mp.mpf(2 * y + 1) / (2 * s)))
                for y in range(first, 4001)
            )
            / normaliser
        )
        direct *= 1 / (1 + mp.exp(-mp.mpf(pure[0])))  # the RR atom at +ε₀; the other is far
        low, high = wide_gaussian_delta(sigma2, pure, eps)
        assert low <= direct * (1 + mp.mpf(10) ** -30) and direct <= high * (1 + mp.mpf(10) ** -30)


@pytest.mark.parametrize("sigma2,scale,pure", _SUBNORMAL_PLANS)
def test_delta_brackets_hold_the_exact_value_through_the_subnormal_floats(sigma2, scale, pure):
    # 41 ε where the exact δ goes from ~1e-290 to below 5e-324: every bracket must hold
    # the exact value (before the outward rounding, 52 of 384 such points in 8 plans,
    # upper ends rounded down to the nearest subnormal and lower ends rounded up)
    accountant = _plan(sigma2, scale, pure)
    top = Fraction(1, scale) + pure
    missed = []
    for i in range(41):
        eps = float(top + Fraction((36.5 + 3 * i / 40) / math.sqrt(sigma2)))
        bound = accountant.delta(eps)
        exact = wide_gaussian_delta(sigma2, [Fraction(1, scale), pure], eps)
        if not _contains(bound.lower, bound.upper, exact):
            missed.append((eps, bound.lower, bound.upper, mp.nstr(exact[0], 6)))
        assert bound.upper > 0, "an upper end is never 0"
    assert missed == [], f"brackets missing the exact δ: {missed}"


def test_the_audited_subnormal_point():
    # δ(0.4333713080171368) = 6.0752190954886510e-324 (reference): between the subnormals
    # 5e-324 (2^-1074) and 1e-323 (2^-1073), so the upper end must be 1e-323 or more
    bound = _plan(10**12, 10, Fraction(1, 3)).delta(0.4333713080171368)
    exact = wide_gaussian_delta(10**12, [Fraction(1, 10), Fraction(1, 3)], 0.4333713080171368)
    assert mp.nstr(exact[0], 8) == "6.0752191e-324"
    assert exact[1] - exact[0] <= mp.mpf(10) ** -12 * exact[1]  # far inside one float step
    assert bound.upper >= 2.0**-1073
    assert bound.lower <= 2.0**-1074


@pytest.mark.parametrize("sigma2,scale,pure", _SUBNORMAL_PLANS)
@pytest.mark.parametrize("delta", [5e-324, 1e-323, 2e-323, 1e-320, 3e-308, 1e-300])
def test_epsilon_brackets_hold_the_exact_value_at_subnormal_delta(sigma2, scale, pure, delta):
    # ε(δ) = the smallest ε with δ(ε) <= δ: the upper end's exact δ must be <= δ, the lower
    # end's >= δ (δ(ε) decreases); `epsilon(5e-324)` of the first plan had an upper end
    # whose exact δ was 7.3e-324
    bound = _plan(sigma2, scale, pure).epsilon(delta)
    at_upper = wide_gaussian_delta(sigma2, [Fraction(1, scale), pure], bound.upper)
    at_lower = wide_gaussian_delta(sigma2, [Fraction(1, scale), pure], bound.lower)
    assert at_upper[0] <= delta, f"upper end {bound.upper!r}: exact δ {mp.nstr(at_upper[0], 6)}"
    assert at_lower[1] >= delta, f"lower end {bound.lower!r}: exact δ {mp.nstr(at_lower[1], 6)}"


@pytest.mark.parametrize("x", [-700.0, -708.5, -720.25, -744.0, -744.4, -745.1, -745.2, -3.0])
def test_exp_rounds_outward_among_subnormals(x):
    exact = mp.exp(mp.mpf(x))
    assert mp.mpf(exp_down(x)) <= exact <= mp.mpf(exp_up(x))
    assert exp_up(x) > 0  # an upper end is never 0
    assert exp_up(x) <= 4 * max(math.exp(x), 2.0**-1074)  # outward by a few ulps only


def test_round_down_stops_at_zero():
    assert round_down(5e-324) == 0.0
    assert round_down(1.0, 1) == math.nextafter(1.0, 0.0)


# (σ², the randomized responses' ε): plans whose δ near the float range's bottom goes
# through the exact 1-D formula (one Gaussian alone: direct sums, or the inversion for
# σ² = 10^5), the exact finite-support composition and the tilted lattice (below δ = 1e-12)
_OTHER_PATHS = [
    (Fraction(2), []),
    (Fraction(100), []),
    (Fraction(10**5), []),
    (Fraction(10), [Fraction(1, 3)]),
    (Fraction(100), [Fraction(1, 10), Fraction(1, 3)]),
    (Fraction(3, 2), [Fraction(1, 10), Fraction(1, 2)]),
]


def _rr_plan(sigma2: Fraction, epsilons: list[Fraction]) -> PrivacyAccountant:
    accountant = PrivacyAccountant().add(DiscreteGaussian(sigma2))
    for epsilon in epsilons:
        accountant.add(PureDP(epsilon))
    return accountant


@pytest.mark.parametrize("sigma2,epsilons", _OTHER_PATHS)
def test_every_path_holds_the_exact_delta_among_subnormals(sigma2, epsilons):
    # the Gaussian supplies 35σ to 40σ of loss above the pure part: δ from ~1e-270 down
    # past 5e-324 (before: theorem7's direct sums and the tilted lattice gave lower ends
    # above the exact δ there, and theorem7 at σ² = 10^5 an upper end 1e-323 against an
    # exact 4.2e-323)
    accountant = _rr_plan(sigma2, epsilons)
    top = sum(epsilons, Fraction(0))
    sigma = math.sqrt(sigma2)
    missed, methods = [], set()
    for i in range(60):
        eps = float(top + Fraction((sigma * (35 + i / 12) + 0.5) / float(sigma2)))
        exact = wide_gaussian_delta(sigma2, epsilons, eps)
        if exact[1] > 1e-270 or exact[1] < 1e-326:
            continue
        bound = accountant.delta(eps)
        methods.add(bound.method)
        if not _contains(bound.lower, bound.upper, exact) or bound.upper == 0:
            missed.append((eps, bound.lower, bound.upper, bound.method, mp.nstr(exact[0], 9)))
    assert methods, "no ε of the scan fell in the range"
    assert missed == [], f"brackets missing the exact δ: {missed}"


@pytest.mark.parametrize("sigma2,epsilons", _OTHER_PATHS)
@pytest.mark.parametrize("delta", [5e-324, 2e-323, 1e-320, 1e-310])
def test_every_path_holds_the_exact_epsilon_at_subnormal_delta(sigma2, epsilons, delta):
    bound = _rr_plan(sigma2, epsilons).epsilon(delta)
    at_upper = wide_gaussian_delta(sigma2, epsilons, bound.upper)
    at_lower = wide_gaussian_delta(sigma2, epsilons, bound.lower)
    assert at_upper[0] <= delta, f"upper end {bound.upper!r}: exact δ {mp.nstr(at_upper[0], 6)}"
    assert at_lower[1] >= delta, f"lower end {bound.lower!r}: exact δ {mp.nstr(at_lower[1], 6)}"


# ----------------------------------------------------------------- selections' lower ends


def _br_delta(eps, x):
    """δ_BR(x) of one ε-BR mechanism at its worst (DDR 2020 §4), mpmath."""
    eps, x = mp.mpf(eps), mp.mpf(x)
    if x >= eps:
        return mp.mpf(0)
    if x <= -eps:
        return -mp.expm1(x)
    return (mp.e ** (eps / 2) - mp.e ** (x / 2)) ** 2 / mp.expm1(eps)


def _median_plus_pure(eps, pure, x):
    """The worst case of one ε-BR run beside pure ε₀-DP: the run may follow the randomized
    response and pick its t from its output, so δ = E_RR[δ_BR(x - L_RR)] exactly."""
    pure = mp.mpf(pure)
    high = 1 / (1 + mp.e ** (-pure))
    return high * _br_delta(eps, x - pure) + (1 - high) * _br_delta(eps, x + pure)


def _median() -> BaseTwoExponential:
    return BaseTwoExponential(Fraction(1, 2))  # ε-BR at its stated bounded_range_epsilon


def test_one_median_brackets_its_exact_curve():
    # before: δ(0.49) had lower end 6.56e-5 (the lattice pair's, as its upper end) against
    # the exact 6.32e-5, and ε(1e-6) the bracket [0.4983232, 0.4983232] against 0.4974727
    mechanism = _median()
    eps = mechanism.bounded_range_epsilon
    accountant = PrivacyAccountant().add(mechanism)
    for i in range(31):
        x = float(eps) * i / 25  # up to 1.2ε, where δ is 0
        exact = _br_delta(eps, x)
        bound = accountant.delta(x)
        assert mp.mpf(bound.lower) <= exact <= mp.mpf(bound.upper), (x, bound, exact)
        if exact > 1e-12:  # the closed form: the lower end is exact to a few ulps
            assert bound.lower >= float(exact) * (1 - 1e-12)
    for delta in (1e-2, 1e-4, 1e-6, 1e-9):
        # δ_BR(x) = δ  <=>  x = 2·log(e^{ε/2} - sqrt(δ(e^ε - 1)))
        exact = 2 * mp.log(mp.e ** (mp.mpf(eps) / 2) - mp.sqrt(delta * mp.expm1(mp.mpf(eps))))
        bound = accountant.epsilon(delta)
        assert mp.mpf(bound.lower) <= exact <= mp.mpf(bound.upper), (delta, bound, exact)


def test_median_beside_pure_dp_brackets_its_exact_curve():
    # before: every lower end of the scan lay above the exact curve (δ(0) lower end
    # 0.1787065 against 0.1787048); now the lower end is the plan with the median as the
    # ε-BR pair B_{ε/2}: valid, and looser (the gap says so)
    mechanism = _median()
    eps = mechanism.bounded_range_epsilon
    pure = Fraction(1, 3)
    accountant = PrivacyAccountant().add(mechanism).add(PureDP(pure))
    for i in range(0, 41):
        x = 0.9 * i / 40
        exact = _median_plus_pure(eps, pure, x)
        bound = accountant.delta(x)
        assert mp.mpf(bound.lower) <= exact <= mp.mpf(bound.upper), (x, bound, exact)
    for delta in (1e-3, 1e-6):
        bound = accountant.epsilon(delta)
        assert _median_plus_pure(eps, pure, bound.upper) <= delta
        assert bound.lower == 0 or _median_plus_pure(eps, pure, bound.lower) >= delta


@pytest.mark.parametrize("k", [2, 5])
def test_selections_of_one_epsilon_have_a_lower_end_below_ddr_optimum(k):
    # k runs at one ε alone: the lower end is the best of 63 pairs B_t run k times (DDR's
    # non-adaptive composition, below their adaptive optimum); checked against the same
    # sums in mpmath at those t, and against the upper end
    mechanism = _median()
    eps = mp.mpf(mechanism.bounded_range_epsilon)
    accountant = PrivacyAccountant().add(mechanism, count=k)
    for x in (0.0, 0.4, 1.0):
        best = mp.mpf(0)
        for j in range(1, 64):
            t = eps * j / 64
            p = (mp.e**eps - mp.e ** (eps - t)) / mp.expm1(eps)
            best = max(
                best,
                mp.fsum(
                    mp.binomial(k, i)
                    * p ** (k - i)
                    * (1 - p) ** i
                    * (1 - mp.e ** (x - ((k - i) * eps - k * t)))
                    for i in range(k + 1)
                    if (k - i) * eps - k * t > x
                ),
            )
        bound = accountant.delta(x)
        assert bound.lower <= best * (1 + mp.mpf(10) ** -14)  # the float ε is rounded down
        assert bound.lower >= best * (1 - 1e-9)
        assert best <= bound.upper
