"""Figures shown to people, rounded outward so that each shown pair stays a valid guarantee.

An upper bound (a spent ε or δ) is rounded UP to three significant digits, a lower bound
or what is left DOWN; the δ a figure is taken at is shown exactly when it is a short
decimal (``1e-9``) and otherwise rounded UP (ε at a larger δ is no larger). Used by the
ledger's summaries and by the one-line reprs of results and session records.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

__all__ = ["delta_text", "rounded"]

_DIGITS = 3


def rounded(value: float | Fraction | str, *, up: bool, digits: int = _DIGITS) -> str:
    """``value`` (>= 0) to ``digits`` significant digits, rounded up or down, as short text
    (``1.88``, ``3.21e-201``, ``0``)."""
    exact = Fraction(value) if not isinstance(value, Fraction) else value
    if exact == 0:
        return "0"
    with localcontext() as context:
        context.prec = digits
        context.rounding = ROUND_CEILING if up else ROUND_FLOOR
        # Decimal(numerator) / denominator is rounded once, in the given direction.
        decimal = Decimal(exact.numerator) / Decimal(exact.denominator)
    return _short(decimal)


def _short(decimal: Decimal) -> str:
    """``decimal`` as plain text when it is between 1e-4 and 1e6, else scientific."""
    if decimal != 0 and not Decimal("1e-4") <= abs(decimal) < Decimal("1e6"):
        mantissa, exponent = f"{decimal.normalize():e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    text = format(decimal.normalize(), "f")
    return text


def delta_text(delta: Fraction | str) -> str:
    """A δ a figure is taken at: exact when it is a short decimal (``1e-9``, ``2.5e-7``),
    else rounded UP to three significant digits."""
    exact = Fraction(delta)
    if exact == 0:
        return "0"
    denominator = exact.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator == 1:  # a finite decimal: shown exactly if it is short
        places = max(twos, fives)
        digits = str(exact.numerator * 10**places // exact.denominator)
        if len(digits.rstrip("0")) <= 6:
            return _short(Decimal(digits).scaleb(-places))
    return rounded(exact, up=True)
