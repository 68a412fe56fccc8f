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

The sampler (randomized rounding with a fixed keystream, the weight tree, the
timing defence) is `dp_pipeline.noise.exponential`, which also states what it
must do to keep this guarantee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms.exponential_base import (
    MAX_BASE_BITS,
    choose_base,
    ln_bounds,
    log_not_above,
)
from dp_pipeline.noise.exponential import (
    DEFAULT_UTILITY_DENOMINATOR,
    exponential_sample,
    exponential_sample_with_passes,
)
from dp_pipeline.rational import positive_rational

__all__ = ["DEFAULT_UTILITY_DENOMINATOR", "BaseTwoExponential"]

# pure_epsilon is reported rounded up to a multiple of this.
_EPSILON_GRID = 1 << 64


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
            raise DPTypeError(f"monotone must be True or False, got {self.monotone!r}")
        if not isinstance(self.optimized, bool):
            raise DPTypeError(f"optimized must be True or False, got {self.optimized!r}")
        _check_int(self.min_passes, "min_passes", 1)
        _check_int(self.tail_bits, "tail_bits", 1)
        _check_int(self.base_bits, "base_bits", 1)
        if self.base_bits > MAX_BASE_BITS:
            raise DPValueError(f"base_bits must be <= {MAX_BASE_BITS}, got {self.base_bits}")
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
            if not log_not_above(Fraction(1 << y, x), z, target):
                raise DPValueError(
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

    @property
    def bounded_range_epsilon(self) -> Fraction:
        """The bounded-range ε (Durfee & Rogers 2019): `pure_epsilon`, an exact upper bound
        on the range of the log-probability ratio between neighbours (`zcdp_rho` has the
        proof). The accountant composes the mechanism by this range's exact privacy curve
        (`dp_pipeline.accounting.bounded_range`), not as randomized response at ε."""
        return self.pure_epsilon

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
        ε-DP alone gives; ρ is what `PrivacyAccountant.rho` reports. For (ε, δ) the
        accountant uses the exact bounded-range curve (`bounded_range_epsilon`), tighter
        than the `privacy_loss_pmfs` pair for a few runs, and caps it by this ρ.
        """
        return self.pure_epsilon**2 / 8

    def privacy_loss_pmfs(self) -> tuple[np.ndarray, np.ndarray]:
        """A dominating pair ``(p, q)`` for the privacy loss: randomized response at ε.

        Every pure ε-DP mechanism is dominated by randomized response with
        ``p = [e^ε/(1+e^ε), 1/(1+e^ε)]``, ``q = p[::-1]`` (Kairouz, Oh &
        Viswanath 2015, Theorem 2.1; Zhu, Dong & Wang 2022, Lemma 10). ε is
        `pure_epsilon` nudged up by one float ulp before the floats are formed,
        so ``log(p/q)`` is not below the exact ε by float rounding. Valid for any
        pure ε-DP mechanism; `PrivacyAccountant` composes this one by its tighter
        bounded-range curve instead (`bounded_range_epsilon`).
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

        ``utilities`` is a 1-D array of losses (lower is better), each a multiple
        of ``1/utility_denominator`` (a public bound, default ``2**64``; 1 declares
        integer utilities). Exact; randomness from ``stream`` only (see
        `dp_pipeline.noise.exponential.exponential_sample`).
        """
        return exponential_sample(
            self, utilities, stream, size, utility_denominator=utility_denominator
        )

    def sample_with_passes(
        self, utilities, stream, *, utility_denominator: int = DEFAULT_UTILITY_DENOMINATOR
    ) -> tuple[int, int]:
        """``(index, passes)``: the selection and the number of rejection-loop passes run."""
        return exponential_sample_with_passes(
            self, utilities, stream, utility_denominator=utility_denominator
        )


def _check_int(value, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise DPTypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise DPValueError(f"{name} must be >= {minimum}, got {value}")


def _check_exact_base(base) -> tuple[int, int, int]:
    try:
        x, y, z = base
    except (TypeError, ValueError):
        raise DPTypeError(
            f"exact_base must be a triple (x, y, z) of integers, got {base!r}"
        ) from None
    for name, value in (("x", x), ("y", y), ("z", z)):
        _check_int(value, f"exact_base {name}", 1)
    x, y, z = int(x), int(y), int(z)
    if y > MAX_BASE_BITS:
        raise DPValueError(f"exact_base y must be <= {MAX_BASE_BITS}, got {y}")
    if x >= 1 << y:
        raise DPValueError(
            f"exact_base needs x < 2**y so that the base is below 1, got x={x}, y={y}"
        )
    return x, y, z


def _check_bounds(bounds) -> tuple[int, int]:
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise DPTypeError(
            f"utility_bounds must be a pair (lower, upper) of integers, got {bounds!r}"
        ) from None
    for name, value in (("lower", low), ("upper", high)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise DPTypeError(f"utility_bounds {name} must be an integer, got {value!r}")
    low, high = int(low), int(high)
    if low > high:
        raise DPValueError(
            f"utility_bounds ({low}, {high}) are reversed: the lower bound must be <= the upper"
        )
    return low, high
