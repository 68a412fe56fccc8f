"""Budget arithmetic of the ledger: compose recorded releases and measure them against a cap.

Pure (no SQLite, clock or host); the guarantee is the accountant's upper bound,
compared with the population's cap in the safe direction. `dp_pipeline.release.ledger.store`
is the transactional store that calls it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.errors import LedgerError
from dp_pipeline.query.large_delta import large_delta_problem
from dp_pipeline.release.ledger.phrases import left_phrase, spend_phrase

__all__ = [
    "LedgerError",
    "Spend",
    "accountant_type",
    "cap_dict",
    "check_new_cap",
    "compose_accountants",
    "compose_events",
    "describe_cap",
    "largest_fitting",
    "largest_fitting_text",
    "left_text",
    "measure_spend",
    "spend_text",
    "state_events",
    "within_cap",
]


def accountant_type():
    """The accountant class, `dp_pipeline.accounting.PrivacyAccountant`."""
    return PrivacyAccountant


def compose_accountants(states: Iterable[dict]):
    """One accountant holding every event of the given ``to_dict()`` states."""
    return compose_events(event for state in states for event in state_events(state))


def state_events(state: dict) -> list:
    """The events of one accountant ``to_dict()`` state (restored through the registry)."""
    return list(accountant_type().from_dict(state).events)


def compose_events(events: Iterable) -> PrivacyAccountant:
    """One accountant holding ``events`` (each restored once, composed as often as needed)."""
    combined = accountant_type()()
    for event in events:
        combined.add_event(event)
    return combined


def cap_dict(cap) -> dict[str, str | None]:
    """A cap (any object with rho / epsilon / delta attributes) as exact strings."""
    values = {name: getattr(cap, name, None) for name in ("rho", "epsilon", "delta")}
    if values["rho"] is None and values["epsilon"] is None:
        raise LedgerError("a population cap needs rho, or epsilon with delta")
    return {k: None if v is None else str(Fraction(v)) for k, v in values.items()}


def check_new_cap(cap, cap_state: dict) -> None:
    """Refuse to record ``cap`` (its exact strings ``cap_state``) as a new population's
    cap when its δ is above the large-δ limit and ``cap`` does not carry
    ``allow_large_delta`` (a spec's ``population.cap`` or a `dp_pipeline.Budget` that
    opted in): the same rule as every other δ (`dp_pipeline.query.large_delta`)."""
    if cap_state["delta"] is None or getattr(cap, "allow_large_delta", False):
        return
    problem = large_delta_problem(
        Fraction(cap_state["delta"]),
        "the population cap's delta",
        "population.cap's allow_large_delta = true (a spec) or "
        "Budget(..., allow_large_delta=True) (a session)",
    )
    if problem is not None:
        raise LedgerError(problem)


def describe_cap(cap: dict) -> str:
    if cap["rho"] is not None:
        return f"rho <= {cap['rho']}"
    return f"(epsilon={cap['epsilon']}, delta={cap['delta']})"


@dataclass(frozen=True)
class Spend:
    """A composed guarantee measured against a cap: the accountant's bracket of each figure.

    ``epsilon`` / ``epsilon_lower`` bracket ε at the cap's δ, and ``delta`` /
    ``delta_lower`` bracket δ at the cap's ε: each pair is taken at the same point, so
    lower <= upper. The cap is compared with the upper bounds only.
    """

    rho: Fraction | None
    epsilon: float | None  # at the cap's delta (upper bound), if the cap is (ε, δ)
    delta: float | None  # at the cap's epsilon (upper bound), if the cap is (ε, δ)
    method: str
    epsilon_lower: float | None = None  # at the cap's delta, with ``epsilon``
    delta_lower: float | None = None  # at the cap's epsilon, with ``delta``

    def to_dict(self) -> dict:
        described = {
            "rho": None if self.rho is None else str(self.rho),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "method": self.method,
        }
        if self.epsilon_lower is not None:
            described["epsilon_lower"] = self.epsilon_lower
        if self.delta_lower is not None:
            described["delta_lower"] = self.delta_lower
        return described


def measure_spend(accountant, cap: dict) -> Spend:
    rho = None
    try:
        rho = Fraction(accountant.rho())
    except (TypeError, ValueError, ArithmeticError):
        rho = None  # a mechanism without a finite zCDP bound
    if cap["rho"] is not None:
        return Spend(rho, None, None, "zcdp")
    epsilon_cap, delta_cap = Fraction(cap["epsilon"]), Fraction(cap["delta"])
    epsilon = epsilon_lower = None
    method = ""
    if delta_cap > 0:
        epsilon_bound = accountant.epsilon(delta_cap)
        epsilon, method = float(epsilon_bound.upper), epsilon_bound.method
        epsilon_lower = float(epsilon_bound.lower)
    delta_bound = accountant.delta(epsilon_cap)
    return Spend(
        rho,
        epsilon,
        float(delta_bound.upper),
        method or delta_bound.method,
        epsilon_lower=epsilon_lower,
        delta_lower=float(delta_bound.lower),
    )


def within_cap(spend: Spend, cap: dict) -> bool:
    if cap["rho"] is not None:
        return spend.rho is not None and spend.rho <= Fraction(cap["rho"])
    return spend.delta is not None and Fraction(spend.delta) <= Fraction(cap["delta"])


def left_text(spend: Spend | None, cap: dict) -> str:
    """How much of the cap is left after ``spend`` (None: nothing spent yet), each figure
    with the point it is taken at (`dp_pipeline.release.ledger.phrases.left_phrase`)."""
    return left_phrase(None if spend is None else spend.to_dict(), cap)


def spend_text(spend: Spend, cap: dict) -> str:
    """``spend`` against ``cap``: ``ε 1.88 of 10 at δ = 1e-9; δ 3.21e-201 at ε = 10``."""
    return spend_phrase(spend.to_dict(), cap)


def _round_down(value: Fraction, digits: int = 3) -> Fraction:
    """``value`` (> 0) rounded DOWN to ``digits`` significant decimal digits, exactly."""
    exponent = len(str(value.numerator // value.denominator)) - digits
    if value < 1:  # leading zeros after the point: count them exactly
        exponent = -digits
        while value * Fraction(10) ** (-exponent - digits + 1) < 1:
            exponent -= 1
    step = Fraction(10) ** exponent
    return (value // step) * step


def largest_fitting(
    value: Fraction,
    previous_states: list[dict],
    cap: dict,
    state_at: Callable[[Fraction], dict | None],
    *,
    steps: int = 40,
) -> Fraction | None:
    """The largest budget figure, at most ``value``, whose release still fits ``cap``.

    ``state_at(v)`` is the accountant state (``to_dict()``) of the release planned with
    the figure ``v`` (its epsilon at its delta, or its rho) in place of ``value``, or
    None if no plan exists for ``v``. Bisection on the figure (the plan's noise grows as
    it shrinks, so the spend is monotone in it) keeps a lower end that fits by the
    accountant's upper bound composed with ``previous_states`` (`within_cap`, the
    check of `Ledger.reserve`); the answer is that end rounded DOWN to three
    significant digits and checked again, so what it suggests fits. None: nothing fits
    (the cap is spent, or no smaller figure was found to fit).
    """

    def fits(figure: Fraction) -> bool:
        state = state_at(figure)
        if state is None:
            return False
        spend = measure_spend(compose_accountants([*previous_states, state]), cap)
        return within_cap(spend, cap)

    if previous_states and not within_cap(
        measure_spend(compose_accountants(previous_states), cap), cap
    ):
        return None
    if fits(value):
        return value
    low, high = Fraction(0), Fraction(value)
    for _ in range(steps):
        middle = (low + high) / 2
        if fits(middle):
            low = middle
        else:
            high = middle
        if low and high - low <= low / 10_000:
            break
    while low > 0:
        suggested = _round_down(low)
        if fits(suggested):
            return suggested
        low = suggested - suggested / 1000  # not monotone here: step below and retry
    return None


def largest_fitting_text(name: str, figure: Fraction | None, delta: Fraction | None) -> str:
    """The sentence a refusal adds: the largest ``name`` (epsilon or rho) that fits."""
    if figure is None:
        return "Nothing fits: what is left of the cap is too small for any budget."
    shown = f"{float(figure):.6g}"
    if name == "epsilon" and delta:
        return f"The largest epsilon at this delta that fits is {shown}."
    return f"The largest {name} that fits is {shown}."
