"""The checks of a DP aggregation's parameters, all made before any data is read.

Each refuses a bad argument with an error naming the parameter, the value and the rule
(a noise that is not a discrete Gaussian or Laplace, a privacy unit that is also a key,
an unknown neighbouring relation or invalid-row rule, a confidence or δ outside (0, 1),
a summed column without bounds, bounds past the exact-sum limits). The query
objects of `dp_pipeline.query.aggregations` are built only from what these return.
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.query.bounds import ValueBounds, sum_units_problem
from dp_pipeline.query.domain import build_cell_domain, positive_int
from dp_pipeline.query.sensitivity import NEIGHBOURING
from dp_pipeline.rational import exact_rational

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_REPORT_DELTA",
    "ON_INVALID",
    "Mechanism",
    "check_summed_column",
    "checked_noise",
    "checked_parameters",
    "summed_value_bounds",
]

Mechanism = DiscreteGaussian | DiscreteLaplace
ON_INVALID = ("drop", "error")
DEFAULT_CONFIDENCE = Fraction(95, 100)
DEFAULT_REPORT_DELTA = Fraction(1, 10**6)


def checked_noise(noise: object, name: str, allow_none: bool) -> Mechanism | None:
    """``noise`` if it is a discrete Gaussian or Laplace (or None when ``allow_none``)."""
    if noise is None and allow_none:
        return None
    if not isinstance(noise, DiscreteGaussian | DiscreteLaplace):
        raise DPTypeError(
            f"{name} must be a DiscreteGaussian or DiscreteLaplace, got {type(noise).__name__}"
        )
    return noise


def checked_parameters(
    *,
    by: object,
    domains: object,
    noise: object,
    privacy_unit: object,
    max_cells: object,
    max_per_cell: object,
    neighbouring: object,
    on_invalid: object,
    cell_limit: object,
    confidence: object,
    delta: object,
    allow_no_noise: bool,
) -> dict:
    """The validated fields every aggregation shares, by name (cells built from ``by`` and
    ``domains``; ``delta`` None is the default report δ); raises on the first bad one."""
    noise = checked_noise(noise, "noise", allow_no_noise)
    cells = build_cell_domain(by, domains, cell_limit)
    if privacy_unit is not None and not isinstance(privacy_unit, str):
        raise DPTypeError(f"privacy_unit must be a column name or None, got {privacy_unit!r}")
    if privacy_unit in cells.columns:
        raise DPValueError(f"privacy_unit {privacy_unit!r} cannot also be a key column")
    if neighbouring not in NEIGHBOURING:
        raise DPValueError(f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}")
    if on_invalid not in ON_INVALID:
        raise DPValueError(f"on_invalid must be one of {ON_INVALID}, got {on_invalid!r}")
    confidence = exact_rational(confidence, "confidence")
    if not 0 < confidence < 1:
        raise DPValueError(f"confidence must be in (0, 1), got {confidence}")
    delta = DEFAULT_REPORT_DELTA if delta is None else exact_rational(delta, "delta")
    if not 0 < delta < 1:
        raise DPValueError(f"delta must be in (0, 1), got {delta}")
    return dict(
        cells=cells,
        noise=noise,
        privacy_unit=privacy_unit,
        max_cells=positive_int(max_cells, "max_cells"),
        max_per_cell=positive_int(max_per_cell, "max_per_cell"),
        neighbouring=neighbouring,
        on_invalid=on_invalid,
        confidence=confidence,
        delta=delta,
    )


def check_summed_column(statistic, column, cells, privacy_unit, bounds) -> None:
    """Refuse a summed ``column`` that is not a name, is a key or the unit, or has no bounds."""
    if not isinstance(column, str):
        raise DPTypeError(f"{statistic} needs column=<name of the summed column>, got {column!r}")
    if column in cells.columns or column == privacy_unit:
        raise DPValueError(f"summed column {column!r} cannot be a key or privacy unit column")
    if bounds is None:
        raise DPValueError(
            f"{statistic} of column {column!r} needs bounds=(lower, upper); bounds are "
            f"never taken from the data"
        )


def summed_value_bounds(query, bounds, granularity) -> ValueBounds:
    """``bounds`` and ``granularity`` as `ValueBounds`, refused when they break the sum
    limits with ``query``'s ``max_per_cell`` (`dp_pipeline.query.bounds.sum_units_problem`)."""
    value_bounds = ValueBounds.build(bounds, granularity)
    problem = sum_units_problem(value_bounds.max_abs_units, query.effective_max_per_cell)
    if problem is not None:
        raise DPValueError(
            f"max_per_cell {query.max_per_cell} with bounds {bounds!r} and granularity "
            f"{granularity!r}: {problem}; lower max_per_cell, use tighter bounds or a "
            f"coarser granularity"
        )
    return value_bounds
