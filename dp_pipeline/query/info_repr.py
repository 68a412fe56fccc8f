"""One-line reprs of a result's info (`ReleaseInfo`, `SelectionInfo`), the details on demand.

A notebook shows ``result.dp.info`` as one short line: the statistic, each measure's
mechanism and margin of error, the spend as one valid pair (ε rounded UP at its δ,
`dp_pipeline.figures`) and the privacy unit. The diagnostics (input row counts, not
differentially private) are never part of the line; ``details()`` lists every field.
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.figures import delta_text, rounded

__all__ = ["info_details", "info_line"]


def _spend(info) -> str:
    epsilon = getattr(info, "epsilon", None)
    if epsilon is None:
        return ""
    delta = getattr(info, "delta", None)
    at = f" at δ = {delta_text(Fraction(delta))}" if delta else " (pure)"
    return f"; ε ≤ {rounded(Fraction(epsilon), up=True)}{at}"


def _measures(info) -> str:
    margins = getattr(info, "margin_of_error", None)
    if isinstance(margins, dict):  # ReleaseInfo: one margin per noisy measure
        shown = ", ".join(f"{name} ±{value}" for name, value in margins.items())
        return f"{info.mechanism}; margin {shown}"
    mechanism = getattr(info.mechanism, "name", type(info.mechanism).__name__)
    return f"{mechanism}" + ("" if margins is None else f"; margin ±{margins}")


def _keys(info) -> str:
    selection = getattr(info, "key_selection", None)
    if selection is None:
        return ""
    if selection.keys_kept is None:  # before a run: what a key needs to be released
        return f"; {selection.column} keys selected at threshold {selection.threshold}"
    return (
        f"; {selection.keys_kept} {selection.column} keys kept at threshold {selection.threshold}"
    )


def info_line(info) -> str:
    """``<ReleaseInfo count: count: discrete_gaussian; margin count ±4; ε ≤ 2.28 at δ = 1e-6;
    unit person_id; .details() for all>``: one line, no diagnostics."""
    unit = getattr(info, "privacy_unit", None)
    who = f"; unit {unit}" if unit else "; each row its own unit"
    return (
        f"<{type(info).__name__} {info.statistic}: {_measures(info)}{_keys(info)}"
        f"{_spend(info)}{who}; "
        ".details() for all>"
    )


def info_details(info) -> str:
    """Every field of the info dataclass, one per line (its diagnostics included: they
    are NOT differentially private, never publish them)."""
    fields = getattr(info, "__dataclass_fields__", {})
    lines = [type(info).__name__ + ":"]
    lines += [f"  {name} = {getattr(info, name)!r}" for name in fields]
    return "\n".join(lines)
