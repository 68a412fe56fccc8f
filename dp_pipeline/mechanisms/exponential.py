"""The base-2 exponential mechanism, sampled exactly (Ilvento 2020).

Select outcome ``o`` with probability proportional to ``base ** u(o)``, where
``u`` is an integer *loss* (lower is better) and ``base = 2**-η = (x / 2**y)**z``
is an exact binary fraction. Every weight is then an exact integer after
scaling, so the sampler uses Python integers only: no floating point, no
``exp``, nothing an attacker can exploit through rounding (Ilvento 2020,
Sections 2-3; Mironov 2012 for the attack on naive implementations).

Privacy (Ilvento 2020, Theorem 3.1 / McSherry-Talwar 2007): on integer
levels whose sensitivity is an integer ``k`` the mechanism is ε-DP with
``ε = 2·η·ln2·k``, or ``ε = η·ln2·k`` when the utility is *monotone* in the
data (every utility moves in the same direction between neighbours, as counts
do under add/remove). The levels are the utilities after randomized rounding,
and their sensitivity is ``k = ceil(Δu)`` for a rational Δu (`level_sensitivity`),
so ``ε = c·η·ln2·ceil(Δu)`` (c = 2, or 1 when monotone); see "Randomized
rounding" below for the proof and for why Δu itself is not enough. Since
``η·ln2 = z·ln(2**y / x)``, choosing ``(x, y, z)`` with
``z·ln(2**y/x) <= ε / (c·ceil(Δu))`` is a comparison between a rational and
the logarithm of a rational, decided here with rigorous rational bounds on
the logarithm; ``ln 2`` never has to be rounded.

How the parameters are chosen (see `choose_base`): ``z`` is the smallest
integer with ``ε/(c·k·z) <= ln 2`` (k = ceil(Δu); so ``x/2**y >= 1/2``), ``y`` is
``base_bits`` (default 8; more bits bring η closer to its target at the cost
of ``y·z`` bits of precision per unit of utility) plus ``log2(1/τ) - 1`` more
when ``τ = ε/(c·k·z) < 1/2``, so η lands within about ``2**-(base_bits-1)``
of its target in relative terms (within 2% for the default), and ``x`` is the smallest
integer with ``z·ln(2**y/x) <= ε/(c·k)``: the largest η of that form not
above the target (η is rounded DOWN, which keeps the guarantee). The
reported `pure_epsilon` is ``c·k·z·ln(2**y/x)`` rounded UP to a multiple of
2**-64 (and never above the target ε, which it provably does not exceed).

Utilities are clamped into a range fixed before the data is seen (Ilvento,
Proposition 3.3: clamping does not raise the sensitivity), either absolute
``utility_bounds=(lo, hi)``, or relative: ``[m, m + gap]`` where ``m`` is the
smallest utility and ``gap`` (from the public number of outcomes and
``tail_bits``) is wide enough that any outcome clamped at the top has weight
at most ``2**-tail_bits / |O|`` of the best one. Why the relative clamp is
safe: the mechanism is exactly the exponential
mechanism run on ``u'(d, o) = min(u(d, o), m(d) + gap)`` with
``m(d) = min_o u(d, o)`` and ``gap`` a function of public quantities only
(η, ``tail_bits``, ``|O|``). (1) ``m`` is Δu-sensitive, being a minimum of
Δu-sensitive functions, and ``|min(a, b) - min(a', b')| <= max(|a - a'|, |b - b'|)``,
so ``u'`` is Δu-sensitive; (2) if ``u`` is monotone (all utilities move the
same way between neighbours) so is ``m`` and hence ``u'``; (3) the levels are
``u' - floor(m)``: a common shift, which leaves the distribution unchanged,
and the level range ``[0, gap + 2)``, the tree shape and the bytes read per
pass depend only on ``gap`` and ``|O|``, never on ``m``. The clamp is applied
before randomized rounding, so Lemma 3.5 applies to ``u'``. The price is
accuracy only: outcomes beyond ``m + gap`` get the weight of ``m + gap``,
which by the choice of ``gap`` carries total probability at most
about ``2**-tail_bits`` (`selection.quantile_rank_error_bound` refuses error
levels finer than that).

Randomized rounding (Ilvento, Lemma 3.5). A non-integer utility ``u`` becomes
the integer level ``floor(u) + 1`` with probability ``frac(u)`` and
``floor(u)`` otherwise, independently for every outcome. Claim: for any
rational Δu, the mechanism on the rounded levels is ε-DP with
``ε = c·η·ln2·ceil(Δu)``. Proof: the rounding of outcome ``o`` has the law of
``R(u) = ceil(u - U_o)`` with ``U_o`` uniform on [0, 1), independent across
outcomes (``ceil(u - t) = floor(u) + 1`` exactly when ``t < frac(u)``).
Couple neighbours ``d, d'`` through the same ``U = (U_o)``. For reals ``a, b``
and any ``t``, ``ceil(a - t) - ceil(b - t)`` lies in ``[floor(a - b), ceil(a - b)]``,
so for every ``U`` the levels of ``d`` and ``d'`` differ by at most
``ceil(|u(d, o) - u(d', o)|) <= ceil(Δu)`` and in the direction of
``u(d, o) - u(d', o)`` (ceil is non-decreasing, so monotone utilities give
monotone levels). For each fixed ``U`` the sampler is therefore the
exponential mechanism on integer levels of sensitivity ``ceil(Δu)``, so
``P[o | d, U] <= e**ε · P[o | d', U]`` (Theorem 3.1); ``U`` has the same law
under ``d`` and ``d'``, and averaging over it gives ``P[o | d] <= e**ε · P[o | d']``.
For an integer Δu this is Lemma 3.5 (``ceil(Δu) = Δu``: rounding is free);
for a non-integer Δu it is not, and the bound ``c·η·ln2·Δu`` fails: monotone,
base ``1/16``, Δu = 1/2, utilities ``(0, 3/2)`` and ``(0, 2)`` give the
exact probability ratio ``137/17 ≈ 8.06`` for the second outcome, above
``2**(η·Δu) = 4`` and below ``2**(η·ceil(Δu)) = 16``. The rounding is applied to
the clamped utilities and the integer shift ``floor(m)`` (or ``lo``) commutes
with it, so the clamp argument above is unchanged. A Δu below 1 wastes
accuracy (ε is computed as if Δu were 1): pass ``u / Δu`` with
``utility_sensitivity=1`` instead, the same weights with the rounding on a grid
of step Δu.

The rounding is drawn with a fixed amount of keystream and work (Ilvento,
Section 3.3, applied to the rounding too). Every sample draws, for EVERY
outcome whether its utility is an integer or not, one uniform integer ``V``
below the public ``utility_denominator`` ``Q`` (an argument of `sample`,
default ``2**64``: one 64-bit keystream word per outcome, never rejected),
and rounds up exactly when ``V < frac(u)·Q``, which has probability
``frac(u)`` exactly because ``frac(u)·Q`` is an integer. Floors, remainders,
thresholds and comparisons run over all outcomes with the same vectorized
operations, so the bytes read and the work depend on ``|O|`` and ``Q`` only.
(A ``Q`` that is not a power of two is drawn by rejection: the bytes read then
vary with the keystream, never with the data, and are independent of the
accepted draws.) A utility whose denominator does not divide ``Q`` cannot be
rounded exactly this way and is refused: ``Q`` is meant to be a property of
the utility function (the quantile loss passes the denominator of ``q``;
integer counts pass 1, which draws nothing), so the refusal only catches a
wrong declaration. Doubles of magnitude at least ``2**-12`` are multiples of
``2**-64``; finer ones need a larger ``Q`` or rounding by the caller (rounding
down to a grid of step ``1/Q`` keeps an integer Δu).

Sampling (Ilvento, Algorithm 2 and Section 3.3). Outcomes are grouped by
their integer utility level ``j`` in ``[0, L)``; level ``j`` has count ``c_j``
and each of its outcomes has the integer weight ``x**(z·j)·2**(y·z·(L-1-j))``
(``base**j`` scaled by ``2**(y·z·(L-1))``). The cumulative weights are held
in a complete binary tree over the ``L`` levels (a node stores the exact sum
of its levels, in its own scale), built once per utility vector. One *pass*
draws a uniform integer ``s`` below ``2**p``, the smallest power of two
``>= W`` (the exact total weight), rejects it when ``s >= W``, and locates it
by a root-to-leaf descent of the tree; inside the level, ``s`` is already a
uniform index among that level's outcomes.

Why a descent is as good as the paper's full scan (Ilvento Section 3.3: the
early-exit scan of Algorithm 2 leaks how concentrated the weights are,
because it stops sooner when the draw lands in a heavy early level). The
tree's shape depends only on the public number of levels ``L`` (fixed by
``utility_bounds``, or by the public outcome count through `relative_gap`),
every descent visits all ``ceil(log2 L)`` tree levels, and at each one it
computes BOTH branches (the left child's rescaling and the right child's
subtraction and division) before keeping one, so the sequence of integer
operations of a pass is the same for every data set and every draw, as in
the literal scan, at ``O(p·log L)`` instead of ``O(p·L)`` cost
(`locate_by_linear_scan` is the literal scan; the tests check both agree on
every draw). What remains, as in any implementation on Python integers, is
that an operation's cost varies slightly with its operands' magnitudes,
which are bounded by public quantities (``p`` bits) but not constant; this
is not a cycle-exact constant-time implementation.

Timing defence (Ilvento, Section 3.3, Proposition 3.8): by default the
rejection loop runs at least ``min_passes`` (k = 20) passes whatever
happens, and a rejected pass also does a full descent (with ``s - W``, which
is below ``W``), so the number of passes is ``max(k, first accepted pass)``
and differs between data sets only with probability below ``2**-k``.
``optimized=True`` stops at the first accepted pass, skips the descent of
rejected passes and computes only the branch taken at each tree level:
faster (much faster for wide utility ranges: the division of the right
branch costs up to O(p²) on big integers, e.g. about 3.5 s CPU per pass at
|O| = 75,000 with 450,000-bit weights, while a left turn is a shift), but
the pass count then leaks the rejection rate and the work leaks where the
weight sits; use it only in batch jobs where no one can observe timing or
the amount of randomness consumed.

Randomness comes only from a `dp_pipeline.randomness.SecureStream`.
"""

from __future__ import annotations

import functools
import gc
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dp_pipeline.errors import InternalError
from dp_pipeline.rational import positive_rational

try:
    # GMP's subquadratic division: the tree descent divides numbers of up to
    # L·y·z bits (450,000 at n = 75,000), ~30x faster than Python's long division.
    from gmpy2 import mpz as _exact_int
except ImportError:  # pragma: no cover - gmpy2 is a dependency; plain ints are exact too
    _exact_int = int

__all__ = [
    "DEFAULT_UTILITY_DENOMINATOR",
    "BaseTwoExponential",
    "choose_base",
    "ln_bounds",
    "locate_by_linear_scan",
]

# The public precision of the randomized rounding: every utility must be a
# multiple of 1/DEFAULT_UTILITY_DENOMINATOR unless `sample` is told otherwise.
# A power of two up to 2**64 costs one 64-bit keystream word per outcome.
DEFAULT_UTILITY_DENOMINATOR = 1 << 64

# pure_epsilon is reported rounded up to a multiple of this.
_EPSILON_GRID = 1 << 64
# Precision cap for the exact weights: y·z·L bits per number. Past it the
# tree (about log2(L) numbers of this size per level) no longer fits memory.
_MAX_WEIGHT_BITS = 1 << 25
_MAX_BASE_BITS = 62


@functools.lru_cache(maxsize=4096)
def ln_bounds(r: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rational ``(lower, upper)`` with ``lower <= ln(r) <= upper`` and width ``<= 2**-bits``.

    For ``1 <= r <= 2``: ``ln r = 2·atanh(t) = 2·Σ t**(2k+1)/(2k+1)`` with
    ``t = (r-1)/(r+1) <= 1/3``. Partial sums are lower bounds; the tail after
    ``K`` terms is at most ``2·t**(2K+1) / ((2K+1)(1-t²))``. Larger ``r`` is
    reduced by powers of two using the same bounds for ``ln 2``.
    """
    if r < 1:
        raise InternalError(f"ln_bounds expects r >= 1, got {r}")
    halvings = 0
    while r > 2:
        r /= 2
        halvings += 1
    low, high = _atanh_series(r, bits + 4 + halvings.bit_length())
    if halvings:
        ln2_low, ln2_high = _atanh_series(Fraction(2), bits + 4 + halvings.bit_length())
        low += halvings * ln2_low
        high += halvings * ln2_high
    return low, high


def _atanh_series(r: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    # Fixed point with directed rounding: every term is floored into `lower`
    # and ceiled into `upper`, so the bounds stay bounds; integers only.
    num, den = r.numerator - r.denominator, r.numerator + r.denominator  # t = num/den
    if num == 0:
        return Fraction(0), Fraction(0)
    precision = bits + 8
    scale = 1 << precision
    lower = upper = 0
    power_num, power_den = num, den  # t**(2k+1)
    num2, den2 = num * num, den * den
    k = 0
    while True:
        numerator = 2 * power_num * scale
        denominator = power_den * (2 * k + 1)
        lower += numerator // denominator
        upper += -(-numerator // denominator)
        power_num *= num2
        power_den *= den2
        k += 1
        # tail <= 2·t**(2k+1) / ((2k+1)(1 - t²)), rounded up
        tail_num = 2 * power_num * den2 * scale
        tail_den = power_den * (2 * k + 1) * (den2 - num2)
        tail = -(-tail_num // tail_den)
        if tail * (1 << bits) <= scale:
            return Fraction(lower, scale), Fraction(upper + tail, scale)


def _log_not_above(r: Fraction, z: int, target: Fraction) -> bool:
    """Decide ``z·ln(r) <= target`` exactly (``r > 1`` rational, so ``ln r`` is irrational)."""
    for bits in (64, 128, 256, 512, 1024, 2048, 4096):
        low, high = ln_bounds(r, bits)
        if z * high <= target:
            return True
        if z * low > target:
            return False
    raise InternalError(f"could not compare {z}·ln({r}) with {target} to 4096 bits")


def choose_base(target: Fraction, base_bits: int) -> tuple[int, int, int]:
    """``(x, y, z)`` with ``η·ln2 = z·ln(2**y/x) <= target``, the largest for that ``y`` and ``z``.

    ``target`` is ``ε/(c·Δu)``. ``z`` is the smallest integer making
    ``target/z <= ln 2``; ``y`` is ``base_bits`` plus ``ceil(log2(z/target)) - 1``
    when that is positive (and grows further only if ``x`` would reach ``2**y``). The fraction
    ``x/2**y`` is returned in lowest terms.
    """
    ln2_low, _ = ln_bounds(Fraction(2), 64)
    z = max(1, math.ceil(target / ln2_low))
    per_factor = target / z
    # Small targets need more bits: x ≈ 2**y·(1 - per_factor) must resolve
    # per_factor to about 2**-base_bits relative precision.
    y = base_bits + max(0, math.ceil(math.log2(1 / float(per_factor))) - 1)
    while y <= _MAX_BASE_BITS:
        denominator = 1 << y
        # Float start, then exact correction: x is the smallest integer with
        # ln(2**y / x) <= per_factor.
        x = max(1, min(denominator, math.ceil(denominator * math.exp(-float(per_factor)))))
        while x < denominator and not _log_not_above(Fraction(denominator, x), 1, per_factor):
            x += 1
        while x > 1 and _log_not_above(Fraction(denominator, x - 1), 1, per_factor):
            x -= 1
        if x < denominator:
            while x % 2 == 0 and y > 1:
                x //= 2
                y -= 1
            return x, y, z
        y += 1
    raise ValueError(
        f"epsilon is too small to be represented: ε/(c·Δu) = {float(target):.3g} needs more than "
        f"{_MAX_BASE_BITS} bits for the base 2**-η; raise epsilon"
    )


@dataclass(frozen=True)
class BaseTwoExponential:
    """The base-2 exponential mechanism over integer losses (lower is better), sampled exactly.

    Parameters: target ``epsilon`` (exact rational, > 0), ``utility_sensitivity``
    Δu (exact rational, > 0), ``monotone`` (declare only if every utility moves
    the same way between neighbours), ``utility_bounds`` (absolute clamp
    ``(lo, hi)`` of integers, fixed before seeing data; ``None`` = relative clamp
    of width `relative_gap`), ``tail_bits`` (for the relative clamp),
    ``min_passes`` (the timing defence k), ``optimized`` (early exit: batch use
    only), ``base_bits`` (y, the binary precision of the base).

    Derived: ``base_numerator`` x, ``base_denominator_bits`` y, ``base_power`` z
    with ``base = (x/2**y)**z = 2**-η``, and ``pure_epsilon``, the exact ε rounded
    up (``c·ceil(Δu)·z·ln(2**y/x)``, c = 2 or 1 if monotone; Ilvento 2020 Thm 3.1
    applied to the randomly rounded levels, whose sensitivity is ``ceil(Δu)``,
    see the module docstring), never above ``epsilon``.
    """

    epsilon: Fraction
    utility_sensitivity: Fraction = Fraction(1)
    monotone: bool = False
    utility_bounds: tuple[int, int] | None = None
    tail_bits: int = 64
    min_passes: int = 20
    optimized: bool = False
    base_bits: int = 8
    # Only how the base was chosen; equality goes by the base itself (the fields below).
    exact_base: tuple[int, int, int] | None = field(default=None, compare=False)
    base_numerator: int = field(init=False)
    base_denominator_bits: int = field(init=False)
    base_power: int = field(init=False)
    pure_epsilon: Fraction = field(init=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "epsilon", positive_rational(self.epsilon, "epsilon"))
        set_(
            self,
            "utility_sensitivity",
            positive_rational(self.utility_sensitivity, "utility_sensitivity"),
        )
        if not isinstance(self.monotone, bool):
            raise TypeError(f"monotone must be True or False, got {self.monotone!r}")
        if not isinstance(self.optimized, bool):
            raise TypeError(f"optimized must be True or False, got {self.optimized!r}")
        _check_int(self.min_passes, "min_passes", 1)
        _check_int(self.tail_bits, "tail_bits", 1)
        _check_int(self.base_bits, "base_bits", 1)
        if self.base_bits > _MAX_BASE_BITS:
            raise ValueError(f"base_bits must be <= {_MAX_BASE_BITS}, got {self.base_bits}")
        if self.utility_bounds is not None:
            set_(self, "utility_bounds", _check_bounds(self.utility_bounds))
        factor = 1 if self.monotone else 2
        # The levels the sampler weighs are randomly rounded integers, which move
        # by up to ceil(Δu) between neighbours (not Δu): see the module docstring.
        target = self.epsilon / (factor * self.level_sensitivity)
        if self.exact_base is None:
            x, y, z = choose_base(target, self.base_bits)
        else:
            x, y, z = _check_exact_base(self.exact_base)
            if not _log_not_above(Fraction(1 << y, x), z, target):
                raise ValueError(
                    f"exact_base {self.exact_base!r} has η·ln2·c·ceil(Δu) above "
                    f"epsilon={self.epsilon}; "
                    f"raise epsilon (see BaseTwoExponential.for_base) or use a base closer to 1"
                )
        set_(self, "base_numerator", x)
        set_(self, "base_denominator_bits", y)
        set_(self, "base_power", z)
        _, high = ln_bounds(Fraction(1 << y, x), 80)
        exact_up = factor * self.level_sensitivity * z * high
        rounded_up = Fraction(math.ceil(exact_up * _EPSILON_GRID), _EPSILON_GRID)
        # The true ε is <= epsilon (proved exactly in choose_base), so the
        # rounded-up bound may be capped there.
        set_(self, "pure_epsilon", min(rounded_up, self.epsilon))

    @classmethod
    def for_base(
        cls, x: int, y: int, z: int = 1, *, utility_sensitivity=1, monotone: bool = False, **options
    ) -> BaseTwoExponential:
        """The mechanism with ``base = (x/2**y)**z`` exactly and ε its rounded-up pure ε.

        ε is ``c·ceil(Δu)·z·ln(2**y/x)`` rounded up (the levels' sensitivity, see
        `level_sensitivity`).
        """
        x, y, z = _check_exact_base((x, y, z))
        sensitivity = positive_rational(utility_sensitivity, "utility_sensitivity")
        _, high = ln_bounds(Fraction(1 << y, x), 80)
        factor = 1 if monotone else 2
        exact_up = factor * math.ceil(sensitivity) * z * high
        epsilon = Fraction(math.ceil(exact_up * _EPSILON_GRID), _EPSILON_GRID)
        return cls(
            epsilon,
            utility_sensitivity=sensitivity,
            monotone=monotone,
            exact_base=(x, y, z),
            **options,
        )

    def to_dict(self) -> dict:
        """Exact JSON-safe parameters (the ledger stores them; `from_dict` restores them)."""
        return {
            "epsilon": f"{self.epsilon.numerator}/{self.epsilon.denominator}",
            "utility_sensitivity": f"{self.utility_sensitivity.numerator}/"
            f"{self.utility_sensitivity.denominator}",
            "monotone": self.monotone,
            "utility_bounds": None if self.utility_bounds is None else list(self.utility_bounds),
            "tail_bits": self.tail_bits,
            "min_passes": self.min_passes,
            "optimized": self.optimized,
            "base_bits": self.base_bits,
            "exact_base": [self.base_numerator, self.base_denominator_bits, self.base_power],
        }

    @classmethod
    def from_dict(cls, data: dict) -> BaseTwoExponential:
        """The mechanism `to_dict` described (same base, same pure ε)."""
        bounds = data["utility_bounds"]
        return cls(
            Fraction(data["epsilon"]),
            utility_sensitivity=Fraction(data["utility_sensitivity"]),
            monotone=data["monotone"],
            utility_bounds=None if bounds is None else tuple(bounds),
            tail_bits=data["tail_bits"],
            min_passes=data["min_passes"],
            optimized=data["optimized"],
            base_bits=data["base_bits"],
            exact_base=tuple(data["exact_base"]),
        )

    @property
    def name(self) -> str:
        return "base2_exponential"

    @property
    def level_sensitivity(self) -> int:
        """``ceil(Δu)``: how far a randomly rounded level can move between neighbours.

        Coupling the rounding of neighbours through the same uniform draw, a
        level moves by at most ``ceil(|Δ|)`` when its utility moves by ``|Δ|``
        (module docstring, "Randomized rounding"); ε is computed with this
        integer, so it is ``Δu`` itself exactly when Δu is an integer (Ilvento
        2020, Lemma 3.5) and rounded UP otherwise.
        """
        return math.ceil(self.utility_sensitivity)

    @property
    def base(self) -> Fraction:
        """The exact rational ``2**-η = (x / 2**y)**z``."""
        return Fraction(self.base_numerator, 1 << self.base_denominator_bits) ** self.base_power

    @property
    def eta_bounds(self) -> tuple[Fraction, Fraction]:
        """Rational bounds ``(lower, upper)`` on η = -log2(base)."""
        r = Fraction(1 << self.base_denominator_bits, self.base_numerator)
        low, high = ln_bounds(r, 80)
        ln2_low, ln2_high = ln_bounds(Fraction(2), 80)
        return self.base_power * low / ln2_high, self.base_power * high / ln2_low

    def relative_gap(self, outcomes: int) -> int:
        """Width of the relative clamp for ``outcomes`` candidates.

        The smallest integer ``g`` with ``η·g >= tail_bits + bit_length(outcomes)``,
        so a clamped outcome weighs at most ``2**-tail_bits / outcomes`` of the best.
        """
        eta_low, _ = self.eta_bounds
        return max(1, math.ceil((self.tail_bits + int(outcomes).bit_length()) / eta_low))

    def zcdp_rho(self) -> Fraction:
        """Exact upper bound on the zCDP ρ: ``pure_epsilon**2 / 8``.

        The mechanism is ε-bounded-range with ε = `pure_epsilon`: its log-probability
        ratio between neighbours is ``const + η·ln2·(u'(o) - u(o))`` and the clamped,
        rounded levels move by at most ceil(Δu) each, all in one direction when
        monotone, so the ratio's range over outcomes is at most c·η·ceil(Δu)·ln2
        (c = 1 monotone, else 2),
        which `pure_epsilon` bounds from above. With non-integer utilities this is
        the range for every fixed draw U of the randomized rounding (the coupling
        of the module docstring: the same U under both neighbours), so each
        conditional mechanism M_U is ε²/8-zCDP. The released outcome follows the
        mixture E_U[M_U(d)], with the same mixing law for d and d', and Rényi
        divergence is jointly quasi-convex (van Erven & Harremoës 2014, Theorem
        13): D_α(E_U P_U ‖ E_U Q_U) <= sup_U D_α(P_U ‖ Q_U) <= ρ·α. The mixture
        need not be bounded-range, but it is ρ-zCDP. An ε-bounded-range mechanism is
        ε²/8-zCDP (Cesar & Rogers, "Bounding, concentrating, and truncating", ALT
        2021; bounded range: Durfee & Rogers 2019), 4x less than the ε²/2 that pure
        ε-DP alone gives. The accountant's `privacy_loss_pmfs` pair (randomized
        response at ε) is valid but not this tight; ρ is what `PrivacyAccountant.rho`
        reports.
        """
        return self.pure_epsilon**2 / 8

    def privacy_loss_pmfs(self) -> tuple[np.ndarray, np.ndarray]:
        """A dominating pair ``(p, q)`` for the privacy loss: randomized response at ε.

        Every pure ε-DP mechanism is dominated by randomized response with
        ``p = [e^ε/(1+e^ε), 1/(1+e^ε)]``, ``q = p[::-1]`` (Kairouz, Oh &
        Viswanath 2015, Theorem 2.1; Zhu, Dong & Wang 2022, Lemma 10). ε is
        `pure_epsilon` nudged up by one float ulp before the floats are formed,
        so ``log(p/q)`` is not below the exact ε by float rounding.
        """
        eps = math.nextafter(float(self.pure_epsilon), math.inf)
        high = 1.0 / (1.0 + math.exp(-eps))
        low = 1.0 / (1.0 + math.exp(eps))
        p = np.array([high, low], dtype=float)
        return p, p[::-1].copy()

    # ------------------------------------------------------------------ sampling

    def sample(
        self,
        utilities,
        stream,
        size: int | None = None,
        *,
        utility_denominator: int = DEFAULT_UTILITY_DENOMINATOR,
    ):
        """Index of the selected outcome (or ``size`` independent indices as an int64 array).

        ``utilities`` is a 1-D array of losses (lower is better): integers,
        floats or Fractions, each a multiple of ``1/utility_denominator`` (a
        public bound, default ``2**64``; 1 declares integer utilities).
        Non-integers are randomly rounded (module docstring: ε uses ceil(Δu)),
        with one uniform draw below ``utility_denominator`` for every outcome
        and every sample, whatever the utilities, so the keystream read depends
        only on the number of outcomes, the bounds and ``utility_denominator``.
        Randomness from ``stream`` only.
        """
        denominator_bound = _check_utility_denominator(utility_denominator)
        if size is None:
            return self.sample_with_passes(
                utilities, stream, utility_denominator=denominator_bound
            )[0]
        _check_int(size, "size", 0)
        numerators, denominator = _exact_utilities(utilities)
        _check_divides(numerators, denominator, denominator_bound)
        out = np.empty(size, dtype=np.int64)
        if denominator_bound != 1:
            # The rounding is redrawn for every sample, for integer utilities too:
            # whether a utility is an integer is data, so it must not change the
            # keystream read or the work.
            for i in range(size):
                out[i] = self._sample_exact(numerators, denominator, denominator_bound, stream)[0]
            return out
        levels, tree = self._tree(numerators, denominator, denominator_bound, stream)
        members_by_level: dict[int, np.ndarray] = {}
        for i in range(size):
            level, offset, _ = self._select(tree, stream, levels.size)
            members = members_by_level.get(level)
            if members is None:
                members = members_by_level[level] = np.flatnonzero(levels == level)
            out[i] = members[offset]
        return out

    def sample_with_passes(
        self, utilities, stream, *, utility_denominator: int = DEFAULT_UTILITY_DENOMINATOR
    ) -> tuple[int, int]:
        """``(index, passes)``: the selection and the number of rejection-loop passes run."""
        denominator_bound = _check_utility_denominator(utility_denominator)
        numerators, denominator = _exact_utilities(utilities)
        _check_divides(numerators, denominator, denominator_bound)
        return self._sample_exact(numerators, denominator, denominator_bound, stream)

    def _sample_exact(
        self, numerators: np.ndarray, denominator: int, denominator_bound: int, stream
    ) -> tuple[int, int]:
        levels, tree = self._tree(numerators, denominator, denominator_bound, stream)
        level, offset, passes = self._select(tree, stream, levels.size)
        members = np.flatnonzero(levels == level)
        if offset >= members.size:
            raise InternalError(f"offset {offset} outside level {level} of {members.size}")
        return int(members[offset]), passes

    def _tree(
        self, numerators, denominator, denominator_bound, stream
    ) -> tuple[np.ndarray, _WeightTree]:
        levels, level_count = self._levels(numerators, denominator, denominator_bound, stream)
        counts = [int(c) for c in np.bincount(levels, minlength=level_count)]
        # The tree is ~2L small tuples; generational GC passes over them cost
        # more than the arithmetic, and they hold no reference cycles.
        collecting = gc.isenabled()
        gc.disable()
        try:
            tree = _WeightTree(counts, self.base_numerator**self.base_power, self._shift)
        finally:
            if collecting:
                gc.enable()
        return levels, tree

    @property
    def _shift(self) -> int:
        return self.base_denominator_bits * self.base_power

    def _levels(
        self, numerators: np.ndarray, denominator: int, denominator_bound: int, stream
    ) -> tuple[np.ndarray, int]:
        """Clamp, randomly round and shift the utilities to integer levels in ``[0, L)``.

        ``denominator`` (the data's common denominator) divides ``denominator_bound``
        (the public one, checked by the caller); only the latter decides what is drawn.
        """
        if numerators.dtype != object and self._clamp_limit(numerators, denominator) >= 2**62:
            numerators = numerators.astype(object)  # exact Python ints instead of overflowing
        if self.utility_bounds is not None:
            low, high = self.utility_bounds
            clamped = np.minimum(np.maximum(numerators, low * denominator), high * denominator)
            shift = low
            level_count = high - low + 1
        else:
            smallest = numerators.min()
            gap = self.relative_gap(numerators.size)
            clamped = np.minimum(numerators, smallest + gap * denominator)
            shift = int(smallest) // denominator
            level_count = gap + 2
        if level_count * self._shift > _MAX_WEIGHT_BITS:
            raise ValueError(
                f"utility range of {level_count} levels needs {level_count * self._shift} bits "
                f"per weight (more than {_MAX_WEIGHT_BITS}); narrow utility_bounds or lower "
                f"base_bits"
            )
        # Every outcome goes through the same floor, remainder and comparison,
        # integer or not: which utilities are integers is data.
        floors = clamped // denominator
        remainders = clamped - floors * denominator
        rounded = floors + _round_ups(remainders, denominator, denominator_bound, stream)
        if rounded.dtype == object:
            levels = np.asarray([int(v) - shift for v in rounded], dtype=np.int64)
        else:
            levels = (rounded - shift).astype(np.int64)
        if levels.size and (levels.min() < 0 or levels.max() >= level_count):
            raise InternalError(f"levels outside [0, {level_count}) after clamping")
        return levels, level_count

    def _clamp_limit(self, numerators: np.ndarray, denominator: int) -> int:
        if self.utility_bounds is not None:
            return max(abs(b) for b in self.utility_bounds) * denominator
        smallest = abs(int(numerators.min()))
        return smallest + (self.relative_gap(numerators.size) + 1) * denominator

    def _select(self, tree: _WeightTree, stream, outcomes: int) -> tuple[int, int, int]:
        total = tree.total
        bits = (total - 1).bit_length()
        # Every pass reads the same number of keystream bytes, fixed by public
        # quantities (outcomes, level range): enough for the largest possible
        # total, outcomes·2**(shift·(L-1)). Only the top `bits` are used.
        public_bits = self._shift * (tree.level_count - 1) + int(outcomes).bit_length()
        nbytes = (public_bits + 7) // 8
        excess = 8 * nbytes - bits
        chosen: tuple[int, int] | None = None
        passes = 0
        while True:
            # The k mandatory passes read their keystream in one call.
            batch = 1 if self.optimized or passes >= self.min_passes else self.min_passes
            block = stream.random_bytes(batch * nbytes)
            for start in range(0, batch * nbytes, nbytes) if nbytes else [0] * batch:
                passes += 1
                draw = int.from_bytes(block[start : start + nbytes], "little") >> excess
                accepted = draw < total
                if chosen is None and accepted:
                    chosen = tree.locate(draw, constant_work=not self.optimized)
                elif not self.optimized:
                    # Same work as an accepted pass: 2**bits - total <= total - 1.
                    tree.locate(draw if accepted else draw - total)
            if chosen is not None and (self.optimized or passes >= self.min_passes):
                return chosen[0], chosen[1], passes


class _WeightTree:
    """Exact cumulative weights over utility levels as a complete binary tree.

    Level ``j`` of ``L`` has count ``c_j`` and per-outcome weight
    ``a**j · 2**(shift·(L-1-j))`` with ``a = x**z``, ``shift = y·z``. A node
    covering levels ``[i, i+w)`` stores ``Σ c_j a**(j-i) 2**(shift·(i+w-1-j))``:
    its levels' weight divided by the common factor ``a**i·2**(shift·(L-i-w))``.
    So a parent ``(left of width w1, right of width w2)`` is
    ``left·2**(shift·w2) + a**w1·right``.
    """

    __slots__ = ("_layers", "_power", "_shift")

    def __init__(self, counts: list[int], a: int, shift: int) -> None:
        self._shift = shift
        powers: dict[int, int] = {}

        base = _exact_int(a)

        def power(width: int) -> int:
            value = powers.get(width)
            if value is None:
                value = powers[width] = base**width
            return value

        self._power = power
        layer = [(_exact_int(c), 1) for c in counts]
        layers = [layer]
        while len(layer) > 1:
            merged = []
            for i in range(0, len(layer) - 1, 2):
                (left, w1), (right, w2) = layer[i], layer[i + 1]
                merged.append(((left << (shift * w2)) + power(w1) * right, w1 + w2))
            if len(layer) % 2:
                merged.append(layer[-1])
            layer = merged
            layers.append(layer)
        self._layers = layers

    @property
    def total(self) -> int:
        return int(self._layers[-1][0][0])

    @property
    def level_count(self) -> int:
        return len(self._layers[0])

    def locate(self, draw: int, constant_work: bool = True) -> tuple[int, int]:
        """``(level, offset)`` with ``draw`` in the level's cumulative interval (0 <= draw < total).

        ``offset`` is the position of ``draw`` inside the level in units of
        one outcome's weight, i.e. a uniform index among that level's outcomes.
        ``constant_work=False`` computes only the branch taken (the right
        branch's division is skipped when going left): much faster when the
        weight sits in the low levels, but the work then depends on the path,
        i.e. on the data; only for the ``optimized`` batch variant.
        """
        index = 0
        shift = self._shift
        for depth in range(len(self._layers) - 1, 0, -1):
            children = self._layers[depth - 1]
            left_index = 2 * index
            if left_index + 1 >= len(children):
                index = left_index  # an odd node carried up unchanged
                continue
            (left, w1), (_, w2) = children[left_index], children[left_index + 1]
            # Both branches are computed on every step, so the operations of a
            # descent (one shift, one subtraction, one division per tree level)
            # do not depend on which way it turns, i.e. on where the weight is.
            scaled = draw >> (shift * w2)
            go_left = scaled < left
            if constant_work or not go_left:
                right = (draw - (left << (shift * w2))) // self._power(w1)
            draw = scaled if go_left else right
            index = left_index if go_left else left_index + 1
        return index, int(draw)


def locate_by_linear_scan(counts: list[int], a: int, shift: int, draw: int) -> tuple[int, int]:
    """The literal full scan (Ilvento Algorithm 2): cumulative sums level by level.

    Reference for `_WeightTree.locate` (same ``(level, offset)``); O(p·L), so
    only for small instances and tests.
    """
    count = len(counts)
    cumulative = 0
    found = None
    for j, c in enumerate(counts):
        weight = a**j << (shift * (count - 1 - j))
        if found is None and draw < cumulative + c * weight:
            found = (j, (draw - cumulative) // weight)
        cumulative += c * weight
    if found is None:
        raise ValueError(f"draw {draw} is not below the total weight {cumulative}")
    return found


def _round_ups(remainders: np.ndarray, denominator: int, bound: int, stream) -> np.ndarray:
    """0/1 per outcome: 1 with probability ``remainder/denominator``, exactly.

    One uniform ``V`` below the public ``bound`` per outcome (``denominator``
    divides ``bound``), up iff ``V < remainder·(bound/denominator)``. For a
    power of two up to 2**64 (the default) that is one 64-bit word per outcome,
    compared through its top ``log2(denominator)`` bits: the same shifts and
    comparisons whatever ``denominator`` is. Otherwise rejection draws, whose
    keystream use depends on the keystream only. ``bound = 1`` draws nothing.
    """
    size = remainders.size
    if bound == 1:
        return np.zeros(size, dtype=np.int64)
    if bound & (bound - 1) == 0 and bound <= 1 << 64:
        words = stream.random_uint64(size)
        # floor(V / 2**(64-d)) with d = log2(denominator) <= 64, as two shifts
        # below 64 bits each (a 64-bit shift of a uint64 is undefined in numpy).
        drop = 64 - (denominator.bit_length() - 1)
        top = (words >> np.uint64(drop // 2)) >> np.uint64(drop - drop // 2)
        if remainders.dtype == object:
            remainders = np.array([int(r) for r in remainders], dtype=np.uint64)
        return (top < remainders.astype(np.uint64)).astype(np.int64)
    scale = bound // denominator
    if bound <= 1 << 63:
        draws = stream.uniform_below(np.full(size, bound, dtype=np.int64))
        if remainders.dtype != object:
            return (draws < remainders * scale).astype(np.int64)
    else:
        draws = stream.uniform_below(np.full(size, bound, dtype=object))
    return np.array(
        [int(d) < int(r) * scale for d, r in zip(draws, remainders, strict=True)],
        dtype=np.int64,
    )


def _check_utility_denominator(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"utility_denominator must be a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"utility_denominator must be >= 1, got {value}")
    return int(value)


def _check_divides(numerators: np.ndarray, denominator: int, bound: int) -> None:
    """Refuse utilities the fixed-precision rounding cannot round exactly.

    Names the first utility whose reduced denominator does not divide ``bound``.
    """
    if bound % denominator == 0:
        return
    for i, numerator in enumerate(numerators):
        own = denominator // math.gcd(int(numerator), denominator)
        if bound % own:
            raise ValueError(
                f"utilities[{i}] has denominator {own}, which does not divide "
                f"utility_denominator={bound}: the randomized rounding draws one uniform "
                f"integer below utility_denominator per outcome, so every utility must be "
                f"a multiple of 1/utility_denominator; pass a utility_denominator that is a "
                f"multiple of {own} (e.g. {math.lcm(bound, own)}) or round the utilities to "
                f"multiples of 1/{bound} first"
            )
    raise InternalError(f"common denominator {denominator} does not divide {bound}")


def _check_int(value, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _check_exact_base(base) -> tuple[int, int, int]:
    try:
        x, y, z = base
    except (TypeError, ValueError):
        raise TypeError(
            f"exact_base must be a triple (x, y, z) of integers, got {base!r}"
        ) from None
    for name, value in (("x", x), ("y", y), ("z", z)):
        _check_int(value, f"exact_base {name}", 1)
    x, y, z = int(x), int(y), int(z)
    if y > _MAX_BASE_BITS:
        raise ValueError(f"exact_base y must be <= {_MAX_BASE_BITS}, got {y}")
    if x >= 1 << y:
        raise ValueError(f"exact_base needs x < 2**y so that the base is below 1, got x={x}, y={y}")
    return x, y, z


def _check_bounds(bounds) -> tuple[int, int]:
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise TypeError(
            f"utility_bounds must be a pair (lower, upper) of integers, got {bounds!r}"
        ) from None
    for name, value in (("lower", low), ("upper", high)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"utility_bounds {name} must be an integer, got {value!r}")
    low, high = int(low), int(high)
    if low > high:
        raise ValueError(
            f"utility_bounds ({low}, {high}) are reversed: the lower bound must be <= the upper"
        )
    return low, high


def _exact_utilities(utilities) -> tuple[np.ndarray, int]:
    """Utilities as exact integer numerators over one positive common denominator.

    Integer arrays pass through; floats and Fractions become exact rationals
    (a float is its exact binary value). Raises for empty input, NaN or
    infinite values and non-numeric types, naming the first bad position.
    """
    array = np.asarray(utilities)
    if array.ndim != 1:
        raise ValueError(f"utilities must be a 1-D array, got shape {array.shape}")
    if array.size == 0:
        raise ValueError("utilities is empty: the exponential mechanism needs at least one outcome")
    if array.dtype == bool:
        raise TypeError("utilities must be numbers, got a boolean array")
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int64) if array.dtype != np.uint64 else array.astype(object), 1
    if np.issubdtype(array.dtype, np.floating):
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            raise ValueError(
                f"utilities[{bad[0]}] is {array[bad[0]]}; utilities must be finite numbers "
                f"(no NaN or infinity)"
            )
        if np.all(array == np.floor(array)) and np.all(np.abs(array) < 2**53):
            return array.astype(np.int64), 1
        return _from_fractions([Fraction(float(v)) for v in array])
    if array.dtype == object:
        fractions = []
        for i, value in enumerate(array):
            if isinstance(value, bool) or not isinstance(value, int | float | Fraction | np.number):
                raise TypeError(f"utilities[{i}] must be a number, got {value!r}")
            if isinstance(value, float | np.floating) and not math.isfinite(value):
                raise ValueError(
                    f"utilities[{i}] is {value}; utilities must be finite numbers "
                    f"(no NaN or infinity)"
                )
            fractions.append(Fraction(value))
        return _from_fractions(fractions)
    raise TypeError(f"utilities must be numbers, got dtype {array.dtype}")


def _from_fractions(values: list[Fraction]) -> tuple[np.ndarray, int]:
    denominator = 1
    for value in values:
        denominator = math.lcm(denominator, value.denominator)
    numerators = [v.numerator * (denominator // v.denominator) for v in values]
    if denominator < 2**62 and max(abs(n) for n in numerators) < 2**62:
        return np.array(numerators, dtype=np.int64), denominator
    return np.array(numerators, dtype=object), denominator
