"""Key selection thresholds and δ against an independent mpmath computation.

The references below are written from the definitions (sums of the discrete pmfs, the
CKS zCDP-to-(ε, δ) formula minimised over real orders) at 100 digits; they import
nothing of `dp_pipeline.keyselect` but the plan under test. Every reported δ must be
an upper bound of the reference and within a relative 1e-12 of it (2^-190 of slack
from the certified arithmetic, far below that), and each threshold must be the least
one whose exact δ meets the target (the threshold minus one must fail it).
"""

from __future__ import annotations

from fractions import Fraction

import mpmath as mp
import pytest

from dp_pipeline.errors import DPError, DPTypeError, DPValueError
from dp_pipeline.keyselect import plan_selection
from dp_pipeline.keyselect.exact_exp import exp_bounds, exp_neg_multiples
from dp_pipeline.keyselect.tails import truncated_laplace_tail

CLOSE = mp.mpf("1e-12")


@pytest.fixture(autouse=True)
def _precision():
    """100 digits (332 bits): finer than the certified bounds' 2^-256 ulp."""
    with mp.workdps(100):
        yield


def mpf(value) -> mp.mpf:
    value = Fraction(value)
    return mp.mpf(value.numerator) / value.denominator


def assert_upper(reported: Fraction, exact: mp.mpf) -> None:
    assert mpf(reported) >= exact
    assert mpf(reported) <= exact * (1 + CLOSE) + mp.mpf(2) ** -180


# --- references -----------------------------------------------------------------


def laplace_tail(scale, k: int) -> mp.mpf:
    """P[Z >= k], Z ~ Lap_Z(scale), by summing the pmf (closed form of the normaliser)."""
    alpha = mp.exp(-1 / mpf(scale))
    norm = (1 - alpha) / (1 + alpha)
    if k >= 1:
        return mp.nsum(lambda z: norm * alpha**z, [k, mp.inf])
    return 1 - mp.nsum(lambda z: norm * alpha**z, [1 - k, mp.inf])


def truncated_pmf(scale, bound: int) -> dict[int, mp.mpf]:
    alpha = mp.exp(-1 / mpf(scale))
    weights = {z: alpha ** abs(z) for z in range(-bound, bound + 1)}
    total = mp.fsum(weights.values())
    return {z: w / total for z, w in weights.items()}


def gaussian_tail(sigma2, k: int) -> mp.mpf:
    s = mpf(sigma2)
    width = int(mp.sqrt(s) * 40) + abs(k) + 10
    weights = {y: mp.exp(-mp.mpf(y * y) / (2 * s)) for y in range(-width, width + 1)}
    total = mp.fsum(weights.values())
    return mp.fsum(w for y, w in weights.items() if y >= k) / total


def zcdp_delta(rho, epsilon) -> mp.mpf:
    """min over real α > 1 of e^{(α-1)(αρ-ε)}/(α-1)·(1-1/α)^α (CKS Corollary 13)."""
    rho, epsilon = mpf(rho), mpf(epsilon)

    def log_bound(alpha):
        return (
            (alpha - 1) * (alpha * rho - epsilon)
            - mp.log(alpha - 1)
            + alpha * mp.log(1 - 1 / alpha)
        )

    low, high = mp.mpf("1.000001"), (epsilon + rho + 1) / (2 * rho) + 2
    for _ in range(300):  # golden-section search on the convex log bound
        a = low + (high - low) * mp.mpf("0.381966")
        b = high - (high - low) * mp.mpf("0.381966")
        if log_bound(a) <= log_bound(b):
            high = b
        else:
            low = a
    return min(mp.mpf(1), mp.exp(log_bound((low + high) / 2)))


def any_release(p: mp.mpf, m: int) -> mp.mpf:
    return 1 - (1 - p) ** m


# --- exp bounds -------------------------------------------------------------------


@pytest.mark.parametrize(
    "x",
    [
        Fraction(0),
        Fraction(1, 3),
        Fraction(1),
        Fraction(-1),
        Fraction(-7, 3),
        Fraction(5, 2),
        Fraction(-1000, 7),
        Fraction(-123456789, 1000003),
        Fraction(100),
    ],
)
def test_exp_bounds_bracket_the_exponential(x):
    lo, hi = exp_bounds(x)
    exact = mp.exp(mpf(x))
    assert mpf(lo) <= exact <= mpf(hi)
    # 256 bits: relative 2^-100 even for exp(100) (its reciprocal has 144 bits fewer).
    assert mpf(hi - lo) <= exact * mp.mpf(2) ** -100 + mp.mpf(2) ** -254


def test_exp_neg_multiples_bracket_each_multiple():
    x = Fraction(1, 2 * 1234567)
    multiples = [0, 1, 100, 5000**2, 19999**2]
    for k, (lo, hi) in zip(multiples, exp_neg_multiples(x, multiples), strict=True):
        exact = mp.exp(-k * mpf(x)) * mp.mpf(2) ** 256
        assert lo <= exact <= hi


def test_exp_bounds_refuse_an_exponent_they_cannot_certify():
    with pytest.raises(DPValueError, match=r"exp_bounds: exponent .* is above 128"):
        exp_bounds(Fraction(129))


# --- Laplace ------------------------------------------------------------------------

LAPLACE_CASES = [
    (Fraction(1), Fraction(1, 10**6), 3, "add_remove"),
    (Fraction(1, 2), Fraction(1, 10**8), 10, "add_remove"),
    (Fraction(2), Fraction(1, 10**5), 1, "replace"),
    (Fraction(1, 10), Fraction(1, 10**9), 4, "replace"),
]


@pytest.mark.parametrize(("epsilon", "delta", "m", "neighbouring"), LAPLACE_CASES)
def test_laplace_threshold_and_delta_match_the_reference(epsilon, delta, m, neighbouring):
    plan = plan_selection(
        noise="laplace",
        epsilon=epsilon,
        delta=delta,
        max_cells=m,
        neighbouring=neighbouring,
        policy="threshold",
    )
    s = m * (2 if neighbouring == "replace" else 1)
    assert plan.policy == "threshold"
    assert plan.scale == Fraction(s) / epsilon
    tau = plan.threshold
    p = laplace_tail(plan.scale, tau - 1)
    assert_upper(plan.single_unit_release, p)
    assert_upper(plan.new_keys_delta, any_release(p, m))
    assert_upper(plan.delta_upper, any_release(p, m))
    assert any_release(p, m) <= mpf(delta)
    # The least such threshold: one unit lower, the exact δ is above the target.
    assert any_release(laplace_tail(plan.scale, tau - 2), m) > mpf(delta)


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [
        (Fraction(1), Fraction(1, 10**6)),
        (Fraction(1, 4), Fraction(1, 10**10)),
        (Fraction(3), Fraction(1, 100)),
    ],
)
def test_truncated_geometric_is_the_least_truncation_and_its_delta_is_tight(epsilon, delta):
    plan = plan_selection(noise="laplace", epsilon=epsilon, delta=delta, max_cells=1)
    assert plan.policy == "truncated_geometric"
    bound = plan.truncation
    assert plan.threshold == bound + 1
    pmf = truncated_pmf(plan.scale, bound)
    assert_upper(plan.delta_upper, pmf[bound])
    assert pmf[bound] <= mpf(delta)
    assert truncated_pmf(plan.scale, bound - 1)[bound - 1] > mpf(delta)

    # The profile from the release probabilities π(n) = P[n + Z >= K + 1]: at the plan's
    # ε it is exactly P[Z = K] (the optimal mechanism's δ); below ε it grows.
    def profile(eps) -> mp.mpf:
        pi = [
            mp.fsum(w for z, w in pmf.items() if n + z >= bound + 1) for n in range(2 * bound + 3)
        ]
        growth = mp.exp(mpf(eps))
        return max(
            max(pi[n + 1] - growth * pi[n], (1 - pi[n]) - growth * (1 - pi[n + 1]))
            for n in range(2 * bound + 2)
        )

    assert mp.almosteq(profile(epsilon), pmf[bound], rel_eps=mp.mpf("1e-40"))
    for eps in (epsilon, epsilon / 2, epsilon * 2):
        assert_upper(plan.delta_at(eps), max(profile(eps), mp.mpf(0)))


def test_laplace_profile_below_the_counts_epsilon_adds_randomized_response():
    plan = plan_selection(
        noise="laplace", epsilon=1, delta=Fraction(1, 10**6), max_cells=5, policy="threshold"
    )
    q = any_release(laplace_tail(plan.scale, plan.threshold - 1), 5)
    half = Fraction(1, 2)
    rr = (mp.e - mp.exp(mpf(half))) / (1 + mp.e)  # randomized response at ε_c = 1
    assert_upper(plan.delta_at(half), 1 - (1 - rr) * (1 - q))
    assert_upper(plan.delta_at(2), q)


# --- Gaussian -----------------------------------------------------------------------

GAUSSIAN_CASES = [
    (Fraction(1), Fraction(1, 10**6), 1, "add_remove"),
    (Fraction(1, 2), Fraction(1, 10**7), 8, "add_remove"),
    (Fraction(2), Fraction(1, 10**5), 3, "replace"),
]


@pytest.mark.parametrize(("epsilon", "delta", "m", "neighbouring"), GAUSSIAN_CASES)
def test_gaussian_threshold_and_delta_match_the_reference(epsilon, delta, m, neighbouring):
    plan = plan_selection(
        noise="gaussian", epsilon=epsilon, delta=delta, max_cells=m, neighbouring=neighbouring
    )
    s = m * (2 if neighbouring == "replace" else 1)
    rho = Fraction(s) / (2 * plan.sigma2)
    exact_noise = zcdp_delta(rho, epsilon)
    # Integer orders only: above the real minimum, and close to it.
    assert mpf(plan.noise_delta) >= exact_noise
    assert mpf(plan.noise_delta) <= exact_noise * mp.mpf("1.05")
    assert plan.noise_delta <= delta / 2
    # σ² is the least on its 1/1024 grid that meets half the target (up to the grid).
    assert (
        zcdp_delta(Fraction(s) / (2 * (plan.sigma2 * Fraction(99, 100))), epsilon) > mpf(delta) / 2
    )
    tau = plan.threshold
    p = gaussian_tail(plan.sigma2, tau - 1)
    assert_upper(plan.single_unit_release, p)
    assert_upper(plan.new_keys_delta, any_release(p, m))
    total = 1 - (1 - mpf(plan.noise_delta)) * (1 - any_release(p, m))
    assert_upper(plan.delta_upper, total)
    assert mpf(plan.delta_upper) <= mpf(delta)
    previous = 1 - (1 - mpf(plan.noise_delta)) * (
        1 - any_release(gaussian_tail(plan.sigma2, tau - 2), m)
    )
    assert previous > mpf(delta)
    assert plan.delta_at(epsilon) == plan.delta_upper


def test_a_given_sigma2_keeps_the_whole_rest_of_delta_for_the_threshold():
    plan = plan_selection(
        noise="gaussian", epsilon=1, delta=Fraction(1, 10**6), max_cells=2, sigma2=Fraction(400)
    )
    assert plan.sigma2 == 400
    p = gaussian_tail(400, plan.threshold - 1)
    assert_upper(plan.single_unit_release, p)
    assert mpf(plan.noise_delta) >= zcdp_delta(Fraction(2, 800), 1)


# --- bad input ----------------------------------------------------------------------

BAD = [
    (
        dict(max_cells=1001),
        DPValueError,
        r"^max_cells=1001: must be between 1 and 1000, the largest for which the "
        r"selection's delta is certified",
    ),
    (dict(max_cells=0), DPValueError, r"^max_cells=0: must be between 1 and 1000"),
    (dict(max_cells=True), DPTypeError, r"^max_cells must be an int, got bool"),
    (dict(delta=0), DPValueError, r"^delta=0: must be at least 2\*\*-100"),
    (dict(delta=1), DPValueError, r"^delta=1: must be at least 2\*\*-100 .* and below 1"),
    (dict(epsilon=0), DPValueError, r"^epsilon must be > 0"),
    (dict(epsilon=51), DPValueError, r"^epsilon=51: must be at most 50 for key selection"),
    (
        dict(sigma2=9),
        DPValueError,
        r"^sigma2=9: applies to noise='gaussian' only; leave it out for 'laplace'$",
    ),
    (
        dict(noise="uniform"),
        DPValueError,
        r"^noise='uniform': must be one of 'laplace', 'gaussian'",
    ),
    (
        dict(neighbouring="swap"),
        DPValueError,
        r"^neighbouring='swap': must be one of 'add_remove', 'replace'",
    ),
    (
        dict(epsilon=Fraction(1, 10**9), max_cells=1000, policy="threshold"),
        DPValueError,
        r"^epsilon=1/1000000000, delta=1e-06, max_cells=1000: budget too small for key "
        r"selection \(the threshold would exceed 2147483647\), so no key could be released; "
        r"raise epsilon or delta, or lower max_cells$",
    ),
    (
        dict(noise="gaussian", epsilon=Fraction(1, 1000), max_cells=1000),
        DPValueError,
        r"budget too small for key selection "
        r"\(the Gaussian noise would need sigma2 above 2\*\*20\)",
    ),
    (
        dict(noise="gaussian", sigma2=1),
        DPValueError,
        r"^sigma2=1: the count noise alone has delta .* >= delta=1e-06 at epsilon=1; "
        r"raise sigma2 or leave it out$",
    ),
    (
        dict(noise="gaussian", noise_delta_share=1),
        DPValueError,
        r"^noise_delta_share=1: must be strictly between 0 and 1$",
    ),
]


@pytest.mark.parametrize(("changes", "kind", "message"), BAD)
def test_bad_parameters_get_one_line_errors_naming_the_parameter_and_rule(changes, kind, message):
    arguments = dict(noise="laplace", epsilon=1, delta=Fraction(1, 10**6), max_cells=3)
    arguments.update(changes)
    with pytest.raises(kind, match=message) as caught:
        plan_selection(**arguments)
    assert isinstance(caught.value, DPError)
    assert "\n" not in str(caught.value)


def test_truncated_tails_bracket_the_reference_at_every_k():
    scale, bound = Fraction(5, 2), 9
    pmf = truncated_pmf(scale, bound)
    for k in range(-bound - 2, bound + 3):
        exact = mp.fsum(w for z, w in pmf.items() if z >= k)
        lo, hi = truncated_laplace_tail(scale, bound, k)
        assert mpf(lo) <= exact <= mpf(hi)
        assert mpf(hi - lo) <= mp.mpf(2) ** -240
    # At 512 bits the bracket is finer still (the decisions' later rounds use this).
    lo, hi = truncated_laplace_tail(scale, bound, 3, 512)
    assert mpf(hi - lo) <= mp.mpf(2) ** -300


def test_gaussian_profile_at_other_epsilons_composes_the_zcdp_bound_with_the_atom():
    plan = plan_selection(noise="gaussian", epsilon=1, delta=Fraction(1, 10**6), max_cells=4)
    rho = Fraction(4) / (2 * plan.sigma2)
    q = mpf(plan.new_keys_delta)
    for eps in (Fraction(1, 2), Fraction(3, 2), Fraction(4)):
        exact = 1 - (1 - zcdp_delta(rho, eps)) * (1 - q)
        reported = mpf(plan.delta_at(eps))
        assert exact <= reported <= exact * mp.mpf("1.05")
