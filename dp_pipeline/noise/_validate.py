"""Argument checks shared by the public samplers; messages name the parameter and the rule."""

from __future__ import annotations

import numbers
from fractions import Fraction

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.randomness import SecureStream
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = ["check_size", "check_stream", "nonnegative_rational", "positive_rational"]


def nonnegative_rational(value: object, name: str) -> Fraction:
    exact = exact_rational(value, name)
    if exact < 0:
        raise DPValueError(f"{name} must be >= 0, got {value!r}")
    return exact


def check_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, numbers.Integral):
        raise DPTypeError(f"size must be a non-negative int, got {size!r} ({type(size).__name__})")
    if size < 0:
        raise DPValueError(f"size must be a non-negative int, got {size!r}")
    return int(size)


def check_stream(stream: object) -> None:
    if not isinstance(stream, SecureStream):
        raise DPTypeError(
            f"stream must be a dp_pipeline.randomness.SecureStream (from derive_stream), "
            f"got {type(stream).__name__}"
        )
