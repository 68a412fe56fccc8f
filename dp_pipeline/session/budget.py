"""A session's budget and what its queries spent of it, as the accountant's (lower, upper) bounds.

`Budget` is ρ (zCDP), (ε, δ), or ε alone (pure ε-DP, δ = 0), read and range-checked by
the same rule as a release spec's ``[budget]`` and ``population.cap``
(`dp_pipeline.release.spec.read_budget`), so a session's cap equals a spec's cap written
with the same numbers. A float is read as its shortest decimal text (``0.1`` is 1/10,
``1e-6`` is 1/10⁶), as TOML is.

`spent` composes every event of a session's queries with the tight accountant
(`dp_pipeline.accounting.PrivacyAccountant`, not a sum of ε): ε at the budget's δ
(its guaranteed upper bound and its lower bound), the exact ρ for a ρ budget, or the
exact pure ε (basic composition, tight for pure ε-DP) for δ = 0. `fits` is the
refusal test, the ledger's own criterion (`dp_pipeline.release.budget.within_cap`):
δ at the budget's ε, by its upper bound, at most the budget's δ; ρ at most the
budget's ρ; the pure ε at most the budget's ε.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from dp_pipeline.accounting import PrivacyAccountant, PrivacyEvent
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.large_delta import check_allow_flag
from dp_pipeline.release.ledger.phrases import delta_text
from dp_pipeline.release.spec.load import read_budget
from dp_pipeline.session.reprs import bounds_text

__all__ = [
    "Budget",
    "SpendBounds",
    "accountant_of",
    "fits",
    "float_down",
    "float_up",
    "remaining",
    "spent",
]


def _written(value: object, name: str) -> object:
    """``value`` as a spec would hold it: an int, a Decimal or a 'p/q' string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        raise DPTypeError(
            f"{name} must be a number (int, Fraction, Decimal or float), got {type(value).__name__}"
        )
    if isinstance(value, int | Decimal):
        return value
    if isinstance(value, numbers.Rational):
        return f"{value.numerator}/{value.denominator}"
    as_float = float(value)
    if not math.isfinite(as_float):
        raise DPValueError(f"{name} must be finite, got {value!r}")
    return Decimal(repr(as_float))


@dataclass(frozen=True, init=False)
class Budget:
    """A privacy budget: ``Budget(epsilon=1, delta=1e-6)``, ``Budget(rho=0.5)`` or
    ``Budget(epsilon=1)`` (pure ε-DP: only discrete Laplace and selections fit it).

    Exact rationals; ε in [1e-6, 1000], ρ in [1e-12, 10⁴], δ 0 or in [1e-100, 1), the
    ranges of a release spec. Bad values are refused naming the argument and the rule.
    δ above the large-δ limit 1e-4 (`dp_pipeline.query.large_delta`) is refused unless
    ``allow_large_delta=True``, as in a spec.
    """

    rho: Fraction | None
    epsilon: Fraction | None
    delta: Fraction | None
    # The opt-in is how the budget was accepted, not part of its value: not compared.
    allow_large_delta: bool = field(default=False, compare=False)

    def __init__(
        self, *, epsilon=None, delta=None, rho=None, allow_large_delta: bool = False
    ) -> None:
        written = {
            name: _written(value, f"Budget {name}")
            for name, value in (("rho", rho), ("epsilon", epsilon), ("delta", delta))
            if value is not None
        }
        written["allow_large_delta"] = check_allow_flag(allow_large_delta, "allow_large_delta")
        problems: list[str] = []
        read = read_budget(
            written, "Budget", problems, opt_in="Budget(..., allow_large_delta=True)"
        )
        if problems or read is None:
            raise DPValueError("; ".join(problems) or "Budget needs rho, or epsilon with delta")
        object.__setattr__(self, "rho", read.rho)
        object.__setattr__(self, "epsilon", read.epsilon)
        object.__setattr__(self, "delta", read.delta)
        # Kept so that the ledger, recording this as a population's cap, sees the opt-in.
        object.__setattr__(self, "allow_large_delta", written["allow_large_delta"])

    @property
    def measure(self) -> str:
        """What `spent` is stated in: "rho", or "epsilon" (at ``delta``)."""
        return "rho" if self.rho is not None else "epsilon"

    @property
    def limit(self) -> Fraction:
        """The budget's figure in `measure`'s units."""
        return self.rho if self.rho is not None else self.epsilon

    def describe(self) -> str:
        if self.rho is not None:
            return f"rho={self.rho}"
        return f"epsilon={self.epsilon}, delta={self.delta}"

    def __repr__(self) -> str:
        if self.rho is not None:
            return f"Budget(rho={self.rho})"
        # δ as written when it is a short decimal (1e-6), else its exact fraction.
        delta = delta_text(self.delta) if self.delta is not None else None
        if delta is None or Fraction(delta) != self.delta:
            delta = f"Fraction({self.delta.numerator}, {self.delta.denominator})"
        return f"Budget(epsilon={self.epsilon}, delta={delta})"


@dataclass(frozen=True)
class SpendBounds:
    """A figure of a budget as a bracket: ``lower`` <= the true value <= ``upper``.

    ``measure`` is "epsilon" (at ``delta``) or "rho"; ``method`` names how the
    accountant bounded it ("exact" when lower = upper by a closed form). Unpacks as
    ``lower, upper = bounds``.
    """

    lower: float | Fraction
    upper: float | Fraction
    measure: str
    delta: Fraction | None
    method: str

    def __iter__(self) -> Iterator[float | Fraction]:
        return iter((self.lower, self.upper))

    def __repr__(self) -> str:
        # ε beside the δ it is taken at, rounded outwards (`dp_pipeline.session.reprs`).
        return f"SpendBounds({bounds_text(self)}, method={self.method!r})"


def accountant_of(events: Sequence[PrivacyEvent]) -> PrivacyAccountant:
    """A fresh accountant holding ``events``."""
    accountant = PrivacyAccountant()
    for event in events:
        accountant.add_event(event)
    return accountant


def float_down(value: Fraction) -> float:
    """The largest float not above ``value``: the accountant's ε or δ argument rounded in
    the safe direction (a smaller ε gives a larger δ, a smaller δ a larger ε)."""
    as_float = float(value)
    return math.nextafter(as_float, -math.inf) if Fraction(as_float) > value else as_float


def float_up(value: Fraction) -> float:
    """The least float not below ``value``."""
    as_float = float(value)
    return math.nextafter(as_float, math.inf) if Fraction(as_float) < value else as_float


def _pure_epsilon(accountant: PrivacyAccountant) -> Fraction | None:
    """The exact pure ε of the composition (basic composition), None if some event
    is not pure ε-DP (a discrete Gaussian)."""
    try:
        return accountant.pure_epsilon()
    except DPValueError:
        return None


def spent(events: Sequence[PrivacyEvent], budget: Budget) -> SpendBounds:
    """What ``events`` compose to in ``budget``'s measure, as the accountant's bracket.

    ε at δ: `PrivacyAccountant.epsilon` (its upper bound is the guarantee). ρ: the exact
    sum (CKS 2020 Prop. 5 per coordinate). Pure ε (δ = 0): the exact sum of the events'
    pure ε (infinite, as ``math.inf``, when some event is not pure ε-DP).
    """
    measure, delta = budget.measure, budget.delta if budget.rho is None else None
    if not events:
        return SpendBounds(Fraction(0), Fraction(0), measure, delta, "exact")
    accountant = accountant_of(events)
    if budget.rho is not None:
        rho = accountant.rho()
        return SpendBounds(rho, rho, measure, None, "exact")
    if budget.delta == 0:
        total = _pure_epsilon(accountant)
        if total is None:
            return SpendBounds(math.inf, math.inf, measure, delta, "not pure epsilon-DP")
        return SpendBounds(total, total, measure, delta, "exact")
    bound = accountant.epsilon(float_down(budget.delta))
    return SpendBounds(bound.lower, bound.upper, measure, delta, bound.method)


def remaining(spent_bounds: SpendBounds, budget: Budget) -> SpendBounds:
    """The budget's figure less ``spent_bounds``: (limit - upper, limit - lower), at least 0
    (floats rounded outwards: the lower end down, the upper end up).

    For ε this is a reading of the bracket, not a promise that a query of that ε fits:
    tight composition is not additive, so whether a query fits is decided by `fits`
    on the whole composition (``Session.cost`` says it for a given query)."""
    limit = budget.limit

    def left(value, down: bool):
        if value == math.inf:
            return Fraction(0)
        exact = max(limit - Fraction(value), Fraction(0))
        if isinstance(value, Fraction):
            return exact
        return float_down(exact) if down else float_up(exact)

    return SpendBounds(
        left(spent_bounds.upper, down=True),
        left(spent_bounds.lower, down=False),
        spent_bounds.measure,
        spent_bounds.delta,
        spent_bounds.method,
    )


def fits(events: Sequence[PrivacyEvent], budget: Budget) -> bool:
    """Whether ``events`` composed stay within ``budget`` by the accountant's upper bound."""
    if not events:
        return True
    accountant = accountant_of(events)
    if budget.rho is not None:
        return accountant.rho() <= budget.rho
    if budget.delta == 0:
        total = _pure_epsilon(accountant)
        return total is not None and total <= budget.epsilon
    return Fraction(accountant.delta(float_down(budget.epsilon)).upper) <= budget.delta
