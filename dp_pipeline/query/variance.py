"""Variance and standard deviation: `VarianceSpec`, three noisy aggregates, their post-processing.

Estimator (the approach of PipelineDP's and Tumult's variance: a mean and a variance from a
noisy count, a noisy sum and a noisy sum of squares of *normalised* values). Every value
``x`` is clamped into ``[lower, upper]`` and centred on the midpoint ``c = (lower + upper)/2``:
the engines round ``2x − lower − upper`` to an integer ``e`` of granularity units, clamped
into ``[−W, W]`` with ``W = (upper − lower) / granularity``, so ``x − c = e · granularity/2``
on the grid of half granularities around ``c``. Per cell three integer vectors get exact
discrete noise from their own keyed streams:

- ``count``: rows per cell, sensitivity L∞ (`dp_pipeline.query.sensitivity`);
- ``centered_sum``: Σe, a sum with bounds ``[−W, W]``: L∞·W per coordinate under
  add/remove (|e| <= W; in value units L∞·(upper − lower)/2, where the raw values
  would give L∞·max(|lower|, |upper|)) and L∞·2W under replace;
- ``centered_sum_of_squares``: Σe², a sum with bounds ``[0, W²]``: L∞·W² under both
  (a unit's squares in a cell lie in ``[0, L∞·W²]``).

Centring is why the sensitivities are small: without it the squares' bound would be
``max(lower², upper²)``, not ``((upper − lower)/2)²``. These are the sensitivities
`dp_pipeline.query.sensitivity.sensitivity_vector` gives the two sums and the count, so
the accountant is told exactly three `PrivacyEvent`s; with a budget (``epsilon`` /
``rho``) each vector gets an equal share of ρ (`QueryBudget.calibrate`), and the result's
``budget_split`` states it.

Post-processing (no privacy cost): with ``n = max(noisy count, 1)``, ``m1 = Σe / n`` and
``m2 = Σe² / n``, ``var = clip(m2 − m1², 0, W²) · (granularity/2)²``, i.e. the estimate of
E[(x − c)²] − (E[x − c])² clamped into ``[0, ((upper − lower)/2)²]``; ``std = sqrt(var)``.

Margins of error are given for the three noisy aggregates (in value units: the centred
sum's in units of x, the squares' in units of x²), not for ``var`` or ``std``: these are
ratios of noisy quantities whose denominator (the noisy count) can be near zero, and a
valid interval would need a bound on the true count, which is private.

Rows. The count and the centred sum come from one bounding (one mean query), so they
keep the same rows. The squares are a second query over the same labels (the same
bounding salt: the same cells per unit); when a unit has more than ``max_per_cell`` rows
in a cell its kept rows are ranked by their value, so the squares may keep other rows of
that unit than the sum does. Each aggregate is still bounded as its sensitivity says, so
the guarantee holds on every path; only the estimator's consistency in such cells is
affected (never without a privacy unit, or with at most ``max_per_cell`` rows per unit).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dp_pipeline.accounting.events import PrivacyEvent
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.aggregation_checks import Mechanism, check_summed_column, checked_noise
from dp_pipeline.query.aggregations import aggregation_query
from dp_pipeline.query.bounds import ValueBounds, sum_units_problem
from dp_pipeline.query.budget import QueryBudget
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.domain import CellDomain
from dp_pipeline.query.signatures import require_explicit
from dp_pipeline.query.spec import QuerySpec

__all__ = ["VARIANCE_STATISTICS", "VARIANCE_SUMMARIES", "VarianceSpec", "variance_columns"]

VARIANCE_STATISTICS = ("var", "std")
_CONTEXT_ARGUMENTS = ("key", "release_id", "table", "noise_partitions", "release_digest")
_CENTERED = "{}__dp_centered"  # 2x − lower − upper, what the mean query sums
_SQUARED = "{}__dp_squared"  # e², what the squares query sums

_ESTIMATOR = """

    From a noisy count n, a noisy sum S1 and a noisy sum of squares S2 of the values
    clamped into ``bounds`` and centred on their midpoint c (rounded to multiples of
    granularity/2 around c): var = clip(S2/n - (S1/n)**2, 0, ((upper - lower)/2)**2),
    n = max(count, 1). Centring keeps the sums' sensitivities at L∞·(upper - lower)/2
    (twice that under replace) and L∞·((upper - lower)/2)**2. A budget is split equally in ρ
    across the three; the accountant composes their three events. Margins of error
    are those of the three noisy aggregates; none is given for the ratio itself."""
VARIANCE_SUMMARIES = {
    "var": "Noisy population variance of ``column`` per cell: by + count, var." + _ESTIMATOR,
    "std": "Noisy standard deviation (square root of `var`) of ``column`` per cell: by + "
    "count, std." + _ESTIMATOR,
}

MEASURE_NAMES = {"sum": "centered_sum", "count": "count"}


@dataclass(frozen=True)
class VarianceSpec:
    """A variance or standard deviation: a mean query over the centred values (count and
    centred sum, one bounding) and a sum query over their squares, in one run context.

    ``column`` is the user's value column, ``bounds`` its `ValueBounds`; ``centered`` and
    ``squares`` are the two `QuerySpec`s the engines run over the derived columns
    `derived_columns` names. Its cost is the three events of those queries.
    """

    statistic: str
    column: str
    bounds: ValueBounds
    centered: QuerySpec
    squares: QuerySpec

    @classmethod
    def build(
        cls,
        statistic: str,
        column: str,
        *,
        bounds: Any = None,
        granularity: Any = 1,
        noise: Mechanism | None = None,
        count_noise: Mechanism | None = None,
        epsilon: Any = None,
        delta: Any = None,
        rho: Any = None,
        allow_large_delta: bool = False,
        **arguments: Any,
    ) -> VarianceSpec:
        """Validate everything that does not need the data; raise before any work.

        ``arguments``: those of `CountQuery.build` and `RunContext.build`. ``noise`` (and
        ``count_noise``, default ``noise``) name the mechanisms (``noise`` for both sums),
        or a budget is split equally in ρ across the three noisy aggregates.
        """
        call = f"{statistic}({column!r}, {{}})"
        require_explicit(call, arguments)
        if statistic not in VARIANCE_STATISTICS:
            raise DPValueError(f"statistic must be one of {VARIANCE_STATISTICS}, got {statistic!r}")
        if not isinstance(column, str):
            raise DPTypeError(
                f"{statistic} needs column=<name of the value column>, got {column!r}"
            )
        if bounds is None:
            raise DPValueError(
                f"{statistic} of column {column!r} needs bounds=(lower, upper); bounds are "
                f"never taken from the data"
            )
        value_bounds = ValueBounds.build(bounds, granularity)
        width = value_bounds.upper_units - value_bounds.lower_units
        if width == 0:
            raise DPValueError(
                f"bounds {bounds!r}: lower equals upper, so every clamped value is the same; "
                f"declare bounds with lower < upper"
            )
        problem = sum_units_problem(width * width, None)
        if problem is not None:
            raise DPValueError(
                f"bounds {bounds!r} with granularity {granularity!r}: the squares of the "
                f"centred values reach ((upper - lower) / granularity)**2 = {width * width:,} "
                f"units and {problem}; use a coarser granularity or tighter bounds"
            )
        count_noise = checked_noise(count_noise, "count_noise", True)
        budget = QueryBudget.build(
            noise=noise, epsilon=epsilon, delta=delta, rho=rho, allow_large_delta=allow_large_delta
        )
        context = RunContext.build(
            **{k: arguments.pop(k) for k in _CONTEXT_ARGUMENTS if k in arguments}
        )
        if delta is not None:
            arguments["delta"] = delta if budget is None else budget.delta
        if budget is not None and count_noise is not None:
            raise DPValueError(
                f"count_noise={count_noise!r} with a budget: the budget calibrates the count "
                f"and both sums; give noise= and count_noise= instead"
            )
        granted = {"noise": noise, "allow_no_noise": budget is not None}
        span = value_bounds.upper - value_bounds.lower
        centered = aggregation_query(
            "mean",
            column=_CENTERED.format(column),
            bounds=(-span, span),
            granularity=value_bounds.granularity,
            count_noise=count_noise,
            **granted,
            **arguments,
        )
        check_summed_column(statistic, column, centered.cells, centered.privacy_unit, bounds)
        squares = aggregation_query(
            "sum",
            column=_SQUARED.format(column),
            bounds=(0, width * width),
            granularity=1,
            **granted,
            **arguments,
        )
        if budget is not None:
            vectors = [centered.sensitivity(m) for m in ("sum", "count")]
            sum_noise, count_mechanism, squares_noise = budget.calibrate(
                [*vectors, squares.sensitivity("sum")]
            )
            centered = centered.with_noise(sum_noise, count_mechanism)
            squares = squares.with_noise(squares_noise)
        return cls(
            statistic,
            column,
            value_bounds,
            QuerySpec.bind(centered, context),
            QuerySpec.bind(squares, context),
        )

    @property
    def width(self) -> int:
        """W = (upper − lower) / granularity: the centred values lie in [−W, W]."""
        return self.bounds.upper_units - self.bounds.lower_units

    @property
    def derived_columns(self) -> tuple[str, str]:
        """(the centred column, the squares column) the engines read beside the input's."""
        return (self.centered.column or "", self.squares.column or "")

    # What `dp_pipeline.query.cost.release_info` reads.
    @property
    def cells(self) -> CellDomain:
        return self.centered.cells

    @property
    def privacy_unit(self) -> str | None:
        return self.centered.privacy_unit

    @property
    def confidence(self) -> Fraction:
        return self.centered.confidence

    @property
    def delta(self) -> Fraction:
        return self.centered.delta

    @property
    def effective_max_cells(self) -> int:
        return self.centered.effective_max_cells

    @property
    def effective_max_per_cell(self) -> int:
        return self.centered.effective_max_per_cell

    @property
    def table(self) -> str:
        return self.centered.table

    def measures(self) -> tuple[tuple[str, Mechanism, tuple[int, ...]], ...]:
        """(aggregate, mechanism, sensitivity vector): count, centred sum, centred squares."""
        named = tuple((MEASURE_NAMES[v], m, s) for v, m, s in self.centered.measures())
        ((_, squares_noise, squares_shift),) = self.squares.measures()
        return (*named, ("centered_sum_of_squares", squares_noise, squares_shift))

    def events(self) -> tuple[PrivacyEvent, ...]:
        """The three noisy aggregates' `PrivacyEvent`s, in `measures` order."""
        return (*self.centered.events(), *self.squares.events())

    def measure_unit(self, value: str) -> Fraction:
        """What one noised integer unit of ``value`` is worth in the released units."""
        half = self.bounds.granularity / 2
        return {"count": Fraction(1), "centered_sum": half, "centered_sum_of_squares": half * half}[
            value
        ]

    def canonical(self) -> dict:
        """Every parameter that can change a released number (both queries' own)."""
        return {
            "statistic": self.statistic,
            "column": self.column,
            "centered": self.centered.canonical(),
            "squares": self.squares.canonical(),
        }


def variance_columns(
    spec: VarianceSpec, centered: dict[str, np.ndarray], squares: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Post-process the noisy integer vectors into ``count`` and ``var`` (or ``std``).

    ``centered``: the mean query's noisy "count" and "sum" (Σe); ``squares``: the squares
    query's noisy "sum" (Σe²). ``var = clip(m2 − m1², 0, W²) · (granularity/2)²`` with
    ``m1, m2`` the centred moments over ``max(count, 1)``; float64 on the driver, the
    same operations for both engines (the noise itself is integer).
    """
    count = centered["count"]
    n = np.maximum(count, 1).astype(np.float64)
    m1 = centered["sum"].astype(np.float64) / n
    m2 = squares["sum"].astype(np.float64) / n
    width = float(spec.width)
    units = np.clip(m2 - m1 * m1, 0.0, width * width)
    granularity = spec.bounds.granularity
    scale = float(granularity.numerator**2) / float(4 * granularity.denominator**2)
    variance = units * scale
    out = {"count": count}
    out[spec.statistic] = variance if spec.statistic == "var" else np.sqrt(variance)
    return out
