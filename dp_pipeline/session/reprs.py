"""Short notebook reprs of a session's objects: one line each, the details on demand.

A dry run (`QueryCost`) or a charged query (`QueryRecord`) is shown as one line: what
it is (a mean says it is one query of two noisy measures, its sum and its count), ε
with the δ it is taken at (δ exact when it is a short decimal, else rounded UP to
three significant digits; ε's upper bound rounded UP, its lower bound DOWN: each shown
pair is still a valid guarantee), whether it fits and its margins of error. Every
field stays an attribute; ``details()`` lists them all.
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.figures import delta_text, rounded

__all__ = ["bounds_text", "cost_repr", "details_text", "measures_text", "record_repr"]


def bounds_text(bounds) -> str:
    """A `SpendBounds` as ``ε ≤ 0.445 at δ = 1e-6`` (with its lower bound when it differs),
    ``ρ 0.0125``, or ``nothing``."""
    if bounds.upper == 0:
        return "nothing"
    if bounds.measure == "rho":
        return f"ρ {rounded(Fraction(bounds.upper), up=True)}"
    upper = rounded(Fraction(bounds.upper), up=True) if bounds.upper != float("inf") else "∞"
    lower = rounded(Fraction(bounds.lower), up=False) if bounds.lower != float("inf") else "∞"
    at = "" if bounds.delta is None else f" at δ = {delta_text(bounds.delta)}"
    return f"ε ≤ {upper}{at}" if lower == upper else f"ε in [{lower}, {upper}]{at}"


def measures_text(info) -> str:
    """What the query measures: a mean is one query of two noisy measures."""
    measures = getattr(info, "measures", ())
    if len(measures) > 1:
        names = " and ".join(measure.value for measure in measures)
        return (
            f"{info.statistic}: one query of {len(measures)} noisy measures ({names}), "
            "each with its share of the budget"
        )
    return info.statistic


def _margins(margin) -> str:
    if isinstance(margin, dict):
        return ", ".join(f"±{value} ({name})" for name, value in margin.items())
    return f"±{margin}"


def cost_repr(cost) -> str:
    """``QueryCost(...)`` on one line."""
    fits = {
        (True, True): "fits the budget and the cap",
        (True, False): "does NOT fit the population's cap",
        (False, True): "does NOT fit the session's budget",
        (False, False): "fits neither the budget nor the cap",
    }[(bool(cost.fits_budget), bool(cost.fits_cap))]
    threshold = getattr(cost, "threshold", None)
    keys = "" if threshold is None else f"; keys released at threshold {threshold}"
    return (
        f"<QueryCost {measures_text(cost.info)}: alone {bounds_text(cost.alone)}; session "
        f"{bounds_text(cost.spent_before)} -> {bounds_text(cost.spent_after)}; {fits}; "
        f"margin {_margins(cost.margin_of_error)}{keys}; .details() for all>"
    )


def record_repr(record) -> str:
    """``QueryRecord(...)`` on one line."""
    info = record.info
    epsilon = getattr(info, "epsilon", None)
    delta = getattr(info, "delta", None)
    spend = ""
    if epsilon is not None:
        at = "" if not delta else f" at δ = {delta_text(Fraction(delta))}"
        spend = f", ε ≤ {rounded(Fraction(epsilon), up=True)}{at}"
    return (
        f"<QueryRecord #{record.index} {measures_text(info)}, {record.state} "
        f"({record.engine}){spend}; .details() for all>"
    )


def details_text(value) -> str:
    """Every field of the dataclass ``value``, one per line (the full reprs)."""
    fields = getattr(value, "__dataclass_fields__", {})
    lines = [type(value).__name__ + ":"]
    for name in fields:
        field_value = getattr(value, name)
        nested = getattr(field_value, "details", None)
        if callable(nested):  # a result's info: its own fields, not its one-line repr
            lines.append(f"  {name} = " + nested().replace("\n", "\n  "))
        else:
            lines.append(f"  {name} = {field_value!r}")
    return "\n".join(lines)
