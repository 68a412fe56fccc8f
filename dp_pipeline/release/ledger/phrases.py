"""Spend against a cap in words that cannot be misread: every (ε, δ) shown is one valid pair.

The ledger measures a population's composed spend at two points of its privacy
curve: ε at the cap's δ and δ at the cap's ε (`dp_pipeline.release.ledger.budget.Spend`).
Printed side by side as ``epsilon=1.87, delta=3.2e-201`` they read as one guarantee
stronger than the truth. Here each figure is a phrase of its own with the point it
is taken at: ``ε 1.88 of 10 at δ = 1e-9`` and, separately, ``δ 3.21e-201 at ε = 10``.

Rounding is outward, so each shown pair stays a valid guarantee: a spent ε or δ
(an upper bound) is rounded UP to three significant digits, what is left of a cap
DOWN, and the δ a figure is taken at is shown exactly when it is a power of ten
(or a simple decimal) and otherwise rounded UP (ε at a larger δ is no larger, so the
pair still holds). A cap's own ε is exact when short, else rounded DOWN.
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.figures import delta_text, rounded

__all__ = ["cap_phrase", "delta_text", "left_phrase", "rounded", "spend_phrase", "spend_points"]


def _epsilon_text(epsilon: Fraction | str) -> str:
    """A cap's ε: exact when short, else rounded DOWN (a smaller cap is the safe claim)."""
    exact = Fraction(epsilon)
    shown = delta_text(exact) if exact else "0"
    return shown if Fraction(shown) == exact else rounded(exact, up=False)


def spend_phrase(spend: dict | None, cap: dict) -> str:
    """A composed spend (`Spend.to_dict()` or a ledger entry's ``cumulative``) against
    ``cap`` (exact strings): ``ε 1.88 of 10 at δ = 1e-9; δ 3.21e-201 at ε = 10``, or
    ``ρ 0.4 of 1``, or ``nothing`` before any release."""
    if spend is None:
        return "nothing"
    if cap.get("rho") is not None:
        if spend.get("rho") is None:
            return f"ρ unbounded of {cap['rho']}"
        return f"ρ {rounded(Fraction(spend['rho']), up=True)} of {cap['rho']}"
    parts = []
    epsilon_cap = _epsilon_text(cap["epsilon"])
    if spend.get("epsilon") is not None:
        parts.append(
            f"ε {rounded(spend['epsilon'], up=True)} of {epsilon_cap} at "
            f"δ = {delta_text(cap['delta'])}"
        )
    if spend.get("delta") is not None:
        parts.append(f"δ {rounded(spend['delta'], up=True)} at ε = {epsilon_cap}")
    return "; ".join(parts) or "nothing"


def left_phrase(spend: dict | None, cap: dict) -> str:
    """What is left of ``cap`` after ``spend``: the spend phrase, then ``, 8.12 left``
    (ε at the cap's δ, rounded down) or the ρ left (rounded down)."""
    if cap.get("rho") is not None:
        used = Fraction(0) if spend is None or spend.get("rho") is None else Fraction(spend["rho"])
        left = max(Fraction(cap["rho"]) - used, Fraction(0))
        return f"{spend_phrase(spend or {'rho': '0'}, cap)} spent, {rounded(left, up=False)} left"
    if spend is None:
        return f"nothing spent, the whole cap {cap_phrase(cap)} is left"
    if spend.get("epsilon") is None:
        return f"{spend_phrase(spend, cap)} spent"
    left = max(Fraction(cap["epsilon"]) - Fraction(spend["epsilon"]), Fraction(0))
    text = (
        f"ε {rounded(spend['epsilon'], up=True)} of {_epsilon_text(cap['epsilon'])} spent at "
        f"δ = {delta_text(cap['delta'])}, {rounded(left, up=False)} left"
    )
    if spend.get("delta") is not None:
        text += f"; δ {rounded(spend['delta'], up=True)} at ε = {_epsilon_text(cap['epsilon'])}"
    return text


def cap_phrase(cap: dict) -> str:
    """A cap as one valid pair: ``(ε = 10, δ = 1e-9)`` or ``ρ = 1``."""
    if cap.get("rho") is not None:
        return f"ρ = {cap['rho']}"
    return f"(ε = {_epsilon_text(cap['epsilon'])}, δ = {delta_text(cap['delta'])})"


def spend_points(spend: dict, cap: dict) -> dict:
    """A spend against ``cap`` as JSON whose every figure names its point: ``epsilon``
    (upper, lower) ``at_delta`` the cap's δ, ``delta`` (upper, lower) ``at_epsilon`` the
    cap's ε, or ``rho``; and ``text``, the `spend_phrase`."""
    points: dict = {"text": spend_phrase(spend, cap)}
    if cap.get("rho") is not None:
        points["rho"] = spend.get("rho")
        return points
    if spend.get("epsilon") is not None:
        points["epsilon"] = {
            "upper": spend["epsilon"],
            "lower": spend.get("epsilon_lower"),
            "at_delta": cap["delta"],
        }
    if spend.get("delta") is not None:
        points["delta"] = {
            "upper": spend["delta"],
            "lower": spend.get("delta_lower"),
            "at_epsilon": cap["epsilon"],
        }
    return points
