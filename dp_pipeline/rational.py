"""Exact rational parameters for the noise path.

Every privacy-relevant parameter (σ², a Laplace scale) is held as a
`fractions.Fraction`. This module is the one place where user input becomes
such a value.

Accepted inputs: ``int`` (and numpy integers), ``Fraction``, ``Decimal``, a
string ``"p/q"`` or a decimal string such as ``"2.5"``, and ``float`` by the
documented conservative rule below. ``bool`` and ``None`` are refused.

Float rule (never lowers the noise): a float ``x`` becomes
``max(Fraction(repr(x)), Fraction(x))``. ``repr(x)`` is the shortest decimal
that round-trips to ``x`` (what the user most likely typed, e.g. ``0.1`` ->
``1/10``); ``Fraction(x)`` is the exact binary value the program holds. Taking
the larger of the two means the parameter is never below either reading of
the float, so a σ² or scale passed as a float is never silently rounded down.
"""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal
from fractions import Fraction

from dp_pipeline.errors import DPTypeError, DPValueError

__all__ = ["RationalLike", "exact_rational", "float_to_rational_up", "positive_rational"]

# What a public call takes for an exact number, read by `exact_rational` (a float by the
# rule above: never below either reading of it).
RationalLike = Fraction | int | str | Decimal | float

_RATIO = re.compile(r"^\s*([+-]?\d+)\s*/\s*(\d+)\s*$")
_DECIMAL = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")


def float_to_rational_up(value: float) -> Fraction:
    """Convert a finite float to a rational that is >= both its decimal and binary readings."""
    return max(Fraction(repr(float(value))), Fraction(float(value)))


def exact_rational(value: object, name: str) -> Fraction:
    """Return ``value`` as an exact ``Fraction``.

    Raises ``TypeError`` for bool, None and unsupported types and ``ValueError``
    for NaN, infinities and malformed strings; each message names ``name``.
    """
    if isinstance(value, bool) or value is None:
        raise DPTypeError(
            f"{name} must be an int, a Fraction or a 'p/q' string, got {value!r} "
            f"({type(value).__name__})"
        )
    if isinstance(value, Fraction):
        return value
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise DPValueError(f"{name} must be finite, got {value!r}")
        return Fraction(value)
    if isinstance(value, numbers.Real):  # float, numpy floating
        as_float = float(value)
        if not math.isfinite(as_float):
            raise DPValueError(
                f"{name} must be finite, got {value!r}; pass an exact value such as "
                f"Fraction(5, 2) or the string '5/2'"
            )
        return float_to_rational_up(as_float)
    if isinstance(value, str):
        match = _RATIO.match(value)
        if match:
            numerator, denominator = int(match.group(1)), int(match.group(2))
            if denominator == 0:
                raise DPValueError(f"{name}: {value!r} has a zero denominator")
            return Fraction(numerator, denominator)
        if _DECIMAL.match(value):
            return Fraction(value.strip())
        raise DPValueError(
            f"{name}: cannot read {value!r} as an exact rational; "
            f"write an integer, a 'p/q' fraction such as '7/3', or a decimal such as '2.5'"
        )
    raise DPTypeError(
        f"{name} must be an int, a Fraction or a 'p/q' string, got {type(value).__name__}"
    )


def positive_rational(value: object, name: str) -> Fraction:
    """Return ``value`` as an exact ``Fraction`` that must be > 0."""
    exact = exact_rational(value, name)
    if exact <= 0:
        raise DPValueError(f"{name} must be > 0, got {value!r}")
    return exact
