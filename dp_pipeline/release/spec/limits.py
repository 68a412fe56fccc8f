"""The ranges a release spec's numbers must lie in, and the checks that enforce them.

A spec is hostile input: a budget of ``1e-100000`` or ``1e100000``, a domain
of every int64 or a fraction with ten thousand digits would otherwise reach the
accountant, numpy or the engines and fail there with a traceback (or run for
hours). Every limit here is far outside what a real release uses, and each one
is checked while the spec is read, before any data or ledger is touched.

- Rationals (budgets, shares, σ², quantile bounds) are written with at most
  `MAX_DIGITS` digits in their numerator and denominator (a decimal: at most
  `MAX_DIGITS` significant digits, its exponent within ±`MAX_EXPONENT`).
- ε (budget and cap) lies in [`EPSILON_RANGE`]; a positive δ in
  [`DELTA_MIN`, 1); ρ in [`RHO_RANGE`]; an explicit σ² in [`SIGMA2_RANGE`];
  a share in [`SHARE_MIN`, 1].
- Integers of a domain fit int64 (both engines hold keys as int64) and a
  domain has at most `MAX_DOMAIN_VALUES` values (cells are indexed by int64).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

from dp_pipeline.query.domain import MAX_CELL_LIMIT

__all__ = [
    "DELTA_MIN",
    "EPSILON_RANGE",
    "INT64_RANGE",
    "MAX_DIGITS",
    "MAX_DOMAIN_VALUES",
    "MAX_EXPONENT",
    "MAX_SYNTHETIC_PERSONS",
    "RHO_RANGE",
    "SHARE_MIN",
    "SIGMA2_RANGE",
    "check_range",
    "written_too_long",
]

MAX_DIGITS = 40
MAX_EXPONENT = 100
EPSILON_RANGE = (Fraction(1, 10**6), Fraction(10**3))
DELTA_MIN = Fraction(1, 10**100)
RHO_RANGE = (Fraction(1, 10**12), Fraction(10**4))
SIGMA2_RANGE = (Fraction(1, 100), Fraction(10**30))
SHARE_MIN = Fraction(1, 10**6)
INT64_RANGE = (-(2**63), 2**63 - 1)
MAX_DOMAIN_VALUES = MAX_CELL_LIMIT
MAX_SYNTHETIC_PERSONS = 10**9
_LIMIT = 10**MAX_DIGITS


def written_too_long(value: Any) -> bool:
    """Whether a TOML number or numeric string is written with more than `MAX_DIGITS`
    digits, or a decimal exponent beyond ±`MAX_EXPONENT`.

    Checked on the written form, before any exact conversion: turning ``1e999999999``
    into a `Fraction` would build a billion-digit integer.
    """
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) >= _LIMIT
    if isinstance(value, Decimal):
        if not value.is_finite() or value.is_zero():
            return False
        digits = len(value.as_tuple().digits)
        return digits > MAX_DIGITS or abs(value.adjusted()) > MAX_EXPONENT
    if isinstance(value, str):
        text = value.strip()
        if "/" in text:
            parts = [part.strip().lstrip("+-") for part in text.split("/", 1)]
            return any(len(part.lstrip("0")) > MAX_DIGITS for part in parts)
        try:
            number = Decimal(text)
        except ArithmeticError:
            return False  # not a number: exact_rational says so
        return written_too_long(number)
    return False


def check_range(
    value: Fraction, shown: str, path: str, bounds: tuple[Fraction, Fraction], why: str
) -> str | None:
    """A problem when ``value`` lies outside the closed interval ``bounds`` (None inside)."""
    low, high = bounds
    if low <= value <= high:
        return None
    return f"{path} = {shown}: must lie between {_short(low)} and {_short(high)} ({why})"


def _short(value: Fraction) -> str:
    """1e-06, 1000, 1e+30: the limits as a person writes them."""
    if value.denominator == 1 and value < 10**6:
        return str(value.numerator)
    return f"{float(value):.0e}".replace("e-0", "e-").replace("e+0", "e+")
