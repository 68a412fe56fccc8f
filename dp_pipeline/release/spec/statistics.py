"""Reading and checking the value fields of a spec table that clamps a numeric column.

``sum``, ``mean``, ``var`` and ``std`` tables read ``value``, ``lower``, ``upper``
and an optional ``granularity`` (default 1). The rules are the engines' own
(`dp_pipeline.query.bounds.ValueBounds`, `dp_pipeline.query.variance.VarianceSpec`),
checked here before anything is read, each problem naming its field:

- ``lower`` and ``upper`` are required (bounds never come from the data),
  ``lower < upper``, and both are integer multiples of ``granularity`` (values
  are rounded to the granularity grid, so clamping before or after rounding
  is the same);
- ``granularity`` is a positive rational;
- the summed units fit the exact sums (`sum_units_problem`): a sum or mean's
  largest |bound| in granularity units, a variance's centred width
  ``W = (upper - lower) / granularity`` and the squares' ``W**2``, each also
  times ``max_per_cell``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dp_pipeline.query.bounds import sum_units_problem
from dp_pipeline.release.spec.fields import (
    check_column,
    read_positive,
    read_rational,
    read_string,
    show_value,
)

__all__ = [
    "MOMENT_STATISTICS",
    "VALUE_STATISTICS",
    "check_value_units",
    "read_value_fields",
    "released_as_float",
    "value_granularity",
]

# Statistics of a clamped value column released from noisy sums (and a noisy count).
MOMENT_STATISTICS = ("mean", "var", "std")
VALUE_STATISTICS = ("sum", *MOMENT_STATISTICS)


def value_granularity(table: Any) -> Fraction:
    """The granularity a sum, mean, var or std table rounds its values to (default 1).

    A sum of granularity 1 keeps ``granularity = None`` in its `TableSpec` (the spec's
    identity is the one it had before granularities were allowed).
    """
    return Fraction(1) if table.granularity is None else Fraction(table.granularity)


def released_as_float(table: Any) -> bool:
    """Whether a table's published ``value`` is float64: a mean, variance or standard
    deviation (ratios), or a sum in fractional granularity units (its noisy units times
    the granularity, as the engines release it); int64 otherwise."""
    if table.statistic in MOMENT_STATISTICS:
        return True
    return table.statistic == "sum" and value_granularity(table).denominator != 1


def _bound_value(value: Fraction) -> int | Fraction:
    # Integral bounds stay Python ints: a sum's bounds are ints, as they always were.
    return int(value) if value.denominator == 1 else value


def read_value_fields(
    raw: dict, path: str, statistic: str, keys: list[str], problems: list[str]
) -> tuple[str | None, Any, Any, Fraction | None]:
    """(value column, lower, upper, granularity) of a sum, mean, var or std table.

    Appends every problem found (field, value and rule) to ``problems``; a bound with
    a problem is returned as None. ``granularity`` is None for a sum at granularity 1.
    """
    value = read_string(raw, "value", path, problems, required=True)
    if value is not None:
        check_column(value, f"{path}.value", problems)
        if statistic != "sum" and value in keys:
            problems.append(
                f"{path}.value = {value!r}: the {statistic}'s column cannot also be one of "
                f"the table's keys {list(keys)!r} (a key is a category of the cells, the "
                "value the number measured in them)"
            )
    granularity = Fraction(1)
    if "granularity" in raw:
        granularity = read_positive(raw["granularity"], f"{path}.granularity", problems)
    bounds: dict[str, Fraction | None] = {}
    for bound in ("lower", "upper"):
        if bound not in raw:
            problems.append(
                f"{path}.{bound}: required for a {statistic} (values are clamped into "
                "[lower, upper]; bounds never come from the data)"
            )
            bounds[bound] = None
            continue
        exact = read_rational(raw[bound], f"{path}.{bound}", problems)
        if exact is not None and granularity is not None and (exact / granularity).denominator != 1:
            problems.append(
                f"{path}.{bound} = {show_value(raw[bound])}: must be an integer multiple of "
                f"granularity = {granularity} (values are rounded to the granularity grid and "
                "noised as whole granularity units); choose bounds on the grid or another "
                "granularity"
            )
            exact = None
        bounds[bound] = exact
    lower, upper = bounds["lower"], bounds["upper"]
    if lower is not None and upper is not None and not lower < upper:
        problems.append(f"{path}: lower = {lower} must be < upper = {upper}")
        lower = upper = None
    if granularity is None:  # its own problem: the bounds cannot be checked against it
        lower = upper = None
    shown_granularity = None if statistic == "sum" and granularity == 1 else granularity
    return (
        value,
        None if lower is None else _bound_value(lower),
        None if upper is None else _bound_value(upper),
        shown_granularity,
    )


def check_value_units(
    raw: dict,
    path: str,
    statistic: str,
    bounds: tuple[Any, Any, Fraction],
    max_per_cell: int | None,
    problems: list[str],
) -> None:
    """The exact-sum limits of the engines, in granularity units, before anything is read.

    A sum or mean sums values of at most max(|lower|, |upper|) / granularity units; a
    variance sums centred values of at most W = (upper - lower) / granularity units and
    their squares, W**2 units (`dp_pipeline.query.variance`).
    """
    lower, upper, granularity = bounds
    if statistic in ("var", "std"):
        width = int((Fraction(upper) - Fraction(lower)) / granularity)
        summed = [("the centred values' width (upper - lower) / granularity", width)]
        summed.append(
            ("the squares of the centred values, ((upper - lower) / granularity)**2", width * width)
        )
        for what, units in summed:
            problem = sum_units_problem(units, None) or (
                isinstance(max_per_cell, int) and sum_units_problem(units, max_per_cell)
            )
            if problem:
                problems.append(
                    f"{path}: lower = {lower}, upper = {upper} and granularity = "
                    f"{granularity}: {what} is {units:,} units and {problem}; use a coarser "
                    "granularity, tighter bounds or a smaller max_per_cell"
                )
                return
        return
    units = {
        "lower": abs(int(Fraction(lower) / granularity)),
        "upper": abs(int(Fraction(upper) / granularity)),
    }
    side = max(units, key=lambda name: units[name])
    largest = units[side]
    if sum_units_problem(largest, None):
        problems.append(
            f"{path}.{side} = {show_value(raw[side])}: {sum_units_problem(largest, None)}; "
            "use tighter bounds, a coarser granularity or sum the column in coarser units "
            "(e.g. thousands)"
        )
    elif isinstance(max_per_cell, int) and sum_units_problem(largest, max_per_cell):
        shown = f"|{side}|" if granularity == 1 else f"|{side}| / granularity"
        problems.append(
            f"{path}.max_per_cell = {max_per_cell} with {shown} = {largest}: "
            f"{sum_units_problem(largest, max_per_cell)}; lower max_per_cell or use tighter "
            "bounds"
        )
