"""Readers of single spec fields: each checks one value and appends a problem naming its path.

A problem quotes the field path, the offending value and the rule; nothing
raises here, so `dp_pipeline.release.spec.load.parse_spec` reports every problem at once.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

from dp_pipeline.query.large_delta import large_delta_problem
from dp_pipeline.rational import exact_rational
from dp_pipeline.release.spec.limits import (
    INT64_RANGE,
    MAX_DIGITS,
    MAX_DOMAIN_VALUES,
    MAX_EXPONENT,
    SHARE_MIN,
    check_range,
    written_too_long,
)

__all__ = [
    "BUDGET_FIELDS",
    "COLUMN_PATTERN",
    "TOKEN_PATTERN",
    "check_column",
    "check_token",
    "large_delta_refused",
    "normalized_alike",
    "read_allow_large_delta",
    "read_choice",
    "read_domains",
    "read_integer",
    "read_positive",
    "read_rational",
    "read_share",
    "read_string",
    "show_value",
]

TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
COLUMN_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# The fields of [budget] and population.cap (allow_large_delta: dp_pipeline.query.large_delta).
BUDGET_FIELDS = ("rho", "epsilon", "delta", "allow_large_delta")


def read_string(section, key, path, problems, required=False) -> str | None:
    if key not in section:
        if required:
            problems.append(f"{path}.{key}: required field is missing")
        return None
    value = section[key]
    if not isinstance(value, str):
        problems.append(f"{path}.{key} = {show_value(value)}: must be a string")
        return None
    if required and not value.strip():
        problems.append(f"{path}.{key} = {show_value(value)}: must not be empty")
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


def read_allow_large_delta(section: dict, path: str, problems: list[str]) -> bool:
    """``allow_large_delta`` of a budget table: true or false (default false); anything
    else is a problem, and counts as false so that no typo opts in."""
    value = section.get("allow_large_delta", False)
    if isinstance(value, bool):
        return value
    problems.append(
        f"{path}.allow_large_delta = {show_value(value)}: must be true or false (true "
        "accepts a delta above the large-delta limit 1e-4 on purpose)"
    )
    return False


def large_delta_refused(delta: Fraction, path: str, opt_in: str | None, problems: list) -> bool:
    """Whether ``delta`` of the budget table ``path`` is above the large-δ limit (then a
    problem names ``opt_in``, by default ``<path>.allow_large_delta = true``)."""
    problem = large_delta_problem(
        delta, f"{path}.delta", opt_in or f"{path}.allow_large_delta = true"
    )
    if problem is not None:
        problems.append(problem)
    return problem is not None


def read_choice(section, key, path, choices, default, problems) -> str:
    value = section.get(key, default)
    if value not in choices:
        problems.append(f"{path}.{key} = {show_value(value)}: must be one of {', '.join(choices)}")
        return default
    return value


def show_value(value: Any) -> str:
    return _clipped(value)


def _clipped(value: Any, limit: int = 200) -> str:
    """The value as written in the spec, cut to ``limit`` characters (a hostile value may
    be ten thousand digits long, beyond what Python converts to text)."""
    try:
        text = str(value) if isinstance(value, Decimal) else repr(value)
    except ValueError:  # an integer beyond sys.get_int_max_str_digits()
        return f"a {type(value).__name__} too long to print"
    return text if len(text) <= limit else f"{text[: limit - 20]}...({len(text)} characters)"


def read_rational(value: Any, path: str, problems: list[str]) -> Fraction | None:
    """An exact rational from a TOML int, decimal or 'p/q' string (at most `MAX_DIGITS` digits)."""
    if written_too_long(value):
        problems.append(
            f"{path} = {_clipped(value)}: too many digits; a spec number is written with at "
            f"most {MAX_DIGITS} digits (numerator and denominator) and an exponent within "
            f"+-{MAX_EXPONENT}"
        )
        return None
    if isinstance(value, bool):
        problems.append(f"{path} = {show_value(value)}: must be a number or a 'p/q' string")
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
            problems.append(f"{path} = {show_value(value)}: {error}")
            return None
    problems.append(f"{path} = {show_value(value)}: must be a number or a 'p/q' string")
    return None


def read_positive(value: Any, path: str, problems: list[str]) -> Fraction | None:
    exact = read_rational(value, path, problems)
    if exact is not None and exact <= 0:
        problems.append(f"{path} = {show_value(value)}: must be > 0")
        return None
    return exact


def read_share(value: Any, path: str, problems: list[str]) -> Fraction | None:
    """A ``share`` of the release's budget: an exact rational in [SHARE_MIN, 1]."""
    share = read_positive(value, path, problems)
    problem = share and check_range(
        share,
        show_value(value),
        path,
        (SHARE_MIN, Fraction(1)),
        "a fraction of the release's budget",
    )
    if problem:
        problems.append(problem)
    return share


def check_token(value: str, path: str, problems: list[str]) -> None:
    if not TOKEN_PATTERN.match(value):
        problems.append(
            f"{path} = {show_value(value)}: must be 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def check_column(value: str, path: str, problems: list[str]) -> None:
    if not COLUMN_PATTERN.match(value):
        problems.append(
            f"{path} = {show_value(value)}: must be a column name (letters, digits, '_')"
        )


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
                    f"{path} = {show_value(raw)}: a range domain needs integer start and stop "
                    "(inclusive)"
                )
                continue
            if stop < start:
                problems.append(
                    f"{path} = {show_value(raw)}: empty domain "
                    f"(stop {show_value(stop)} < start {show_value(start)})"
                )
                continue
            if start < INT64_RANGE[0] or stop > INT64_RANGE[1]:
                problems.append(
                    f"{path} = {show_value(raw)}: start and stop must fit in a 64-bit signed "
                    "integer (both engines hold integer keys as int64)"
                )
                continue
            if stop - start + 1 > MAX_DOMAIN_VALUES:
                problems.append(
                    f"{path} = {show_value(raw)}: {stop - start + 1:,} values, above the "
                    f"{MAX_DOMAIN_VALUES:,} (2**40) one key may declare (cells are indexed "
                    "by int64); declare only the values the column takes, or coarsen it"
                )
                continue
            domains[column] = range(start, stop + 1)  # a Sequence; stays compact
        elif isinstance(raw, list):
            if not raw:
                problems.append(f"{path} = []: empty domain; list every value the column can take")
                continue
            kinds = {type(v) for v in raw}
            if kinds not in ({int}, {str}):
                problems.append(
                    f"{path} = {show_value(raw)}: values must be all integers or all strings"
                )
                continue
            if kinds == {int} and not INT64_RANGE[0] <= min(raw) <= max(raw) <= INT64_RANGE[1]:
                problems.append(
                    f"{path}: every integer value must fit in a 64-bit signed integer "
                    "(both engines hold integer keys as int64)"
                )
                continue
            seen: set[Any] = set()
            duplicates = sorted({v for v in raw if v in seen or seen.add(v)}, key=str)
            if duplicates:
                problems.append(
                    f"{path}: value(s) {duplicates!r} appear more than once; "
                    "domain values must be distinct"
                )
                continue
            alike = normalized_alike(raw) if kinds == {str} else None
            if alike is not None:
                problems.append(
                    f"{path}: values {alike[0]!a} and {alike[1]!a} are the same text "
                    "in Unicode normal form NFC but different code points; write each value "
                    "once, in one form (NFC), as the data writes it (keys match code point "
                    "for code point on both engines)"
                )
                continue
            domains[column] = tuple(raw)
        else:
            problems.append(
                f"{path} = {show_value(raw)}: a domain is a list of values or "
                "{ start = ..., stop = ... }"
            )
    return domains


def normalized_alike(values: Sequence[str]) -> tuple[str, str] | None:
    """The first two of ``values`` that differ but are equal under Unicode NFC, or None.

    A key is matched code point for code point on both engines (no normalization: Spark
    SQL has none, and one rule keeps the engines byte-identical), so two such values
    would be two cells of what a reader takes for one, each counting part of the rows.
    """
    first: dict[str, str] = {}
    for value in values:
        seen = first.setdefault(unicodedata.normalize("NFC", value), value)
        if seen != value:
            return seen, value
    return None
