"""Argument checks shared by the accounting modules (errors name the argument and the rule)."""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

from dp_pipeline.errors import DPTypeError, DPValueError

# What an accounting function takes for ε, δ or ρ: any real number (read as a float).
Real = float | int | Fraction

__all__ = [
    "Real",
    "check_delta",
    "check_epsilon",
    "check_integer_sensitivity",
    "check_rho",
    "round_up",
]


def _as_float(value: object, name: str) -> float:
    if isinstance(value, bool) or value is None:
        raise DPTypeError(f"{name} must be a real number, got {value!r}")
    if not isinstance(value, numbers.Real):
        raise DPTypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    result = float(value)
    if math.isnan(result):
        raise DPValueError(f"{name} must be a number, got {value!r}")
    return result


def check_epsilon(value: object, name: str = "epsilon") -> float:
    """ε as a float; it must be finite and >= 0."""
    epsilon = _as_float(value, name)
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise DPValueError(f"{name} must be finite and >= 0, got {value!r}")
    return epsilon


def check_delta(value: object, name: str = "delta") -> float:
    """δ as a float; it must lie strictly between 0 and 1."""
    delta = _as_float(value, name)
    if not 0 < delta < 1:
        raise DPValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return delta


def check_rho(value: object, name: str = "rho") -> float:
    """ρ (zCDP) as a float; it must be finite and >= 0."""
    rho = _as_float(value, name)
    if not (rho >= 0 and math.isfinite(rho)):
        raise DPValueError(f"{name} must be finite and >= 0, got {value!r}")
    return rho


def check_integer_sensitivity(value: object, name: str = "sensitivity") -> int:
    """A sensitivity (shift) of a discrete mechanism: an integer >= 1."""
    if isinstance(value, bool) or value is None:
        raise DPTypeError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(value, numbers.Integral) or (
        isinstance(value, Fraction) and value.denominator == 1
    ):
        shift = int(value)
    else:
        raise DPTypeError(
            f"{name} must be an integer >= 1 for a discrete mechanism (integer-valued "
            f"queries move by whole units), got {value!r}"
        )
    if shift < 1:
        raise DPValueError(f"{name} must be an integer >= 1, got {value!r}")
    return shift


def round_up(value: float, ulps: int = 4) -> float:
    """``value`` moved up by a few units in the last place (guards float rounding of a bound)."""
    for _ in range(ulps):
        value = math.nextafter(value, math.inf)
    return value
