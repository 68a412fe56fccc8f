"""Readers of single spec fields: each checks one value and appends a problem naming its path.

A problem quotes the field path, the offending value and the rule; nothing
raises here, so `dp_pipeline.release.spec.parse_spec` reports every problem at once.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

from dp_pipeline.rational import exact_rational

__all__ = [
    "COLUMN_PATTERN",
    "TOKEN_PATTERN",
    "check_column",
    "check_token",
    "read_choice",
    "read_domains",
    "read_integer",
    "read_positive",
    "read_rational",
    "read_string",
    "show_value",
]

TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
COLUMN_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def read_string(section, key, path, problems, required=False) -> str | None:
    if key not in section:
        if required:
            problems.append(f"{path}.{key}: required field is missing")
        return None
    value = section[key]
    if not isinstance(value, str):
        problems.append(f"{path}.{key} = {value!r}: must be a string")
        return None
    if required and not value.strip():
        problems.append(f"{path}.{key} = {value!r}: must not be empty")
        return None
    return value


def read_integer(section, key, path, problems, default=None) -> int | None:
    if key not in section:
        return default
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{path}.{key} = {show_value(value)}: must be an integer")
        return None
    return value


def read_choice(section, key, path, choices, default, problems) -> str:
    value = section.get(key, default)
    if value not in choices:
        problems.append(f"{path}.{key} = {show_value(value)}: must be one of {', '.join(choices)}")
        return default
    return value


def show_value(value: Any) -> str:
    return str(value) if isinstance(value, Decimal) else repr(value)


def read_rational(value: Any, path: str, problems: list[str]) -> Fraction | None:
    """An exact rational from a TOML int, decimal or 'p/q' string."""
    if isinstance(value, bool):
        problems.append(f"{path} = {value!r}: must be a number or a 'p/q' string")
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            problems.append(f"{path} = {value}: must be finite")
            return None
        return Fraction(value)
    if isinstance(value, str):
        try:
            return exact_rational(value, path)
        except ValueError as error:
            problems.append(f"{path} = {value!r}: {error}")
            return None
    problems.append(f"{path} = {show_value(value)}: must be a number or a 'p/q' string")
    return None


def read_positive(value: Any, path: str, problems: list[str]) -> Fraction | None:
    exact = read_rational(value, path, problems)
    if exact is not None and exact <= 0:
        problems.append(f"{path} = {show_value(value)}: must be > 0")
        return None
    return exact


def check_token(value: str, path: str, problems: list[str]) -> None:
    if not TOKEN_PATTERN.match(value):
        problems.append(
            f"{path} = {value!r}: must be 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def check_column(value: str, path: str, problems: list[str]) -> None:
    if not COLUMN_PATTERN.match(value):
        problems.append(f"{path} = {value!r}: must be a column name (letters, digits, '_')")


def read_domains(section: dict, problems: list[str]) -> dict[str, range | tuple[Any, ...]]:
    domains: dict[str, range | tuple[Any, ...]] = {}
    for column, raw in section.items():
        path = f"domains.{column}"
        check_column(column, path, problems)
        if isinstance(raw, dict):
            unknown = [k for k in raw if k not in ("start", "stop")]
            if unknown:
                problems.append(
                    f"{path}.{unknown[0]}: unknown field; a range domain has start and stop"
                )
                continue
            start, stop = raw.get("start"), raw.get("stop")
            if any(isinstance(v, bool) or not isinstance(v, int) for v in (start, stop)):
                problems.append(
                    f"{path} = {raw!r}: a range domain needs integer start and stop (inclusive)"
                )
                continue
            if stop < start:
                problems.append(f"{path} = {raw!r}: empty domain (stop {stop} < start {start})")
                continue
            domains[column] = range(start, stop + 1)  # a Sequence; stays compact
        elif isinstance(raw, list):
            if not raw:
                problems.append(f"{path} = []: empty domain; list every value the column can take")
                continue
            kinds = {type(v) for v in raw}
            if kinds not in ({int}, {str}):
                problems.append(f"{path} = {raw!r}: values must be all integers or all strings")
                continue
            seen: set[Any] = set()
            duplicates = sorted({v for v in raw if v in seen or seen.add(v)}, key=str)
            if duplicates:
                problems.append(
                    f"{path}: value(s) {duplicates!r} appear more than once; "
                    "domain values must be distinct"
                )
                continue
            domains[column] = tuple(raw)
        else:
            problems.append(
                f"{path} = {show_value(raw)}: a domain is a list of values or "
                "{ start = ..., stop = ... }"
            )
    return domains
