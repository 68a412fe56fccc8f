"""Means, variances and standard deviations of a release spec: their noisy aggregates.

A ``mean`` table is the engines' `dp_pipeline.query.aggregations.MeanQuery` (a noisy
clamped sum and a noisy count, mean = sum / max(count, 1) clipped into the bounds);
a ``var`` or ``std`` table is the engines' `dp_pipeline.query.variance.VarianceSpec`
(a noisy count, a noisy centred sum and a noisy sum of centred squares). Both are
built here from the spec, so the sensitivity vectors the accountant is told are the
ones the engines enforce (derivations in those modules: for a variance, centring
on the bounds' midpoint keeps the sums' shifts at L∞·W and L∞·W² granularity
units, W = (upper − lower) / granularity, instead of L∞·max(lower², upper²)).

Each noisy aggregate is one `PrivacyEvent`; a share of the budget is split equally
(in ρ for discrete Gaussians, in ε for discrete Laplaces) across a table's
aggregates, as the engines split a query's budget (`QueryBudget.calibrate`). An
explicit ``sigma2`` is every aggregate's. A margin of error is given per aggregate
in value units (noise units times granularity, or granularity²/4 for the centred
ones, `VarianceSpec.measure_unit`), never for the ratio itself (its denominator,
the noisy count, can be near zero).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from dp_pipeline.accounting import PrivacyEvent, margin_of_error
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.query.aggregations import MeanQuery, aggregation_query
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.query.variance import VarianceSpec
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.plan.queries import run_context
from dp_pipeline.release.spec.model import ReleaseSpec, TableSpec
from dp_pipeline.release.spec.statistics import MOMENT_STATISTICS, value_granularity

__all__ = [
    "MOMENT_STATISTICS",
    "MeasurePlan",
    "exact_margin",
    "margin_text",
    "mean_query",
    "measure_names",
    "measure_plans",
    "measure_vectors",
    "shared_queries",
    "split_by_table",
    "statistic_text",
    "value_fields",
    "value_margin",
    "variance_spec",
]

Mechanism = DiscreteGaussian | DiscreteLaplace
# The plan never draws noise: this key only binds a variance's queries to read their
# sensitivities (the run builds them again under the release's master key).
_PLANNING_KEY = MasterKey(bytes(32))
_PLANNING_NOISE = DiscreteGaussian(1)


@dataclass(frozen=True)
class MeasurePlan:
    """One noisy aggregate of a mean, var or std table: its event and margin of error.

    ``margin_of_error`` bounds the aggregate's noise at the plan's confidence, in the
    released value's units (a count's in rows, a sum's in units of the value, a
    sum of squares' in units of the value squared): exact, rounded up.
    """

    name: str  # "sum", "count", "centered_sum", "centered_sum_of_squares"
    event: PrivacyEvent
    margin_of_error: int | Fraction

    def to_dict(self) -> dict:
        mechanism = self.event.mechanism
        gaussian = isinstance(mechanism, DiscreteGaussian)
        return {
            "value": self.name,
            "mechanism": mechanism.name,
            "sigma2" if gaussian else "scale": str(
                mechanism.sigma2 if gaussian else mechanism.scale
            ),
            "sensitivity": list(self.event.sensitivity),
            "margin_of_error": exact_margin(self.margin_of_error),
        }


def _cells(spec: ReleaseSpec, table: TableSpec) -> dict:
    return dict(
        by=list(table.keys),
        domains={key: spec.domains[key] for key in table.keys},
        max_cells=table.max_cells,
        max_per_cell=table.max_per_cell,
        privacy_unit=spec.privacy_unit,
        neighbouring=spec.neighbouring,
        cell_limit=spec.cell_limit,
    )


def mean_query(table: TableSpec, spec: ReleaseSpec, mechanisms=None) -> MeanQuery:
    """The engines' mean query of a mean table (``mechanisms``: the sum's and the count's)."""
    noise, count_noise = mechanisms if mechanisms is not None else (None, None)
    query = aggregation_query(
        "mean",
        column=table.value,
        bounds=(table.lower, table.upper),
        granularity=value_granularity(table),
        noise=noise,
        count_noise=count_noise,
        allow_no_noise=True,
        **_cells(spec, table),
    )
    return query


def variance_spec(
    spec: ReleaseSpec,
    table: TableSpec,
    mechanisms=None,
    master: MasterKey | None = None,
    release_digest: str = "",
) -> VarianceSpec:
    """The engines' `VarianceSpec` of a var or std table in the release's run context.

    ``mechanisms``: (centred sum, count, centred squares), the order of its events.
    """
    context = run_context(spec, table, master or _PLANNING_KEY, release_digest)
    built = VarianceSpec.build(
        table.statistic,
        table.value,
        bounds=(table.lower, table.upper),
        granularity=value_granularity(table),
        noise=_PLANNING_NOISE,
        key=context.key,
        release_id=context.release_id,
        table=context.table,
        noise_partitions=context.noise_partitions,
        release_digest=context.release_digest,
        **_cells(spec, table),
    )
    if mechanisms is None:
        return built
    sum_noise, count_noise, squares_noise = mechanisms
    centered = built.centered.query.with_noise(sum_noise, count_noise)
    return replace(
        built,
        centered=QuerySpec.bind(centered, built.centered.context),
        squares=built.squares.with_noise(squares_noise),
    )


def measure_names(table: TableSpec) -> tuple[str, ...]:
    """The noisy aggregates of a mean, var or std table, in the order of their events."""
    if table.statistic == "mean":
        return ("sum", "count")
    return ("centered_sum", "count", "centered_sum_of_squares")


def measure_vectors(spec: ReleaseSpec, table: TableSpec) -> tuple[tuple[int, ...], ...]:
    """Each aggregate's sensitivity vector (noised integer units), in `measure_names` order."""
    if table.statistic == "mean":
        query = mean_query(table, spec)
        return (query.sensitivity("sum"), query.sensitivity("count"))
    variance = variance_spec(spec, table)
    return tuple(shifts for _, _, shifts in variance.measures())


def _unit(table: TableSpec, name: str) -> Fraction:
    """What one noised integer of aggregate ``name`` is worth in the released units."""
    step = value_granularity(table)
    if name == "count":
        return Fraction(1)
    if name == "sum":
        return step
    half = step / 2  # the centred values are multiples of granularity / 2 around c
    return half if name == "centered_sum" else half * half


def measure_plans(
    spec: ReleaseSpec, table: TableSpec, mechanisms, confidence: Fraction
) -> tuple[MeasurePlan, ...]:
    """The events and margins of a mean, var or std table run with ``mechanisms``
    (one per aggregate, `measure_names` order): the events of the engines' own query."""
    if table.statistic == "mean":
        events = mean_query(table, spec, mechanisms).events()
    else:
        events = variance_spec(spec, table, mechanisms).events()
    plans = []
    for name, event in zip(measure_names(table), events, strict=True):
        margin = margin_of_error(event.mechanism, confidence) * _unit(table, name)
        plans.append(MeasurePlan(name, event, int(margin) if margin.denominator == 1 else margin))
    return tuple(plans)


def shared_queries(tables, parts: dict, total: Fraction = Fraction(1)) -> list:
    """(share, vector) of every noised vector: a table's share split equally over its
    vectors (``parts[name]``: one, or one per aggregate), divided by ``total``."""
    return [(t.share / len(parts[t.name]) / total, v) for t in tables for v in parts[t.name]]


def split_by_table(tables, parts: dict, mechanisms):
    """The calibrated mechanisms (one per vector, in `shared_queries` order), table by table."""
    mechanisms = list(mechanisms)
    for table in tables:
        count = len(parts[table.name])
        yield table, mechanisms[:count]
        del mechanisms[:count]


def value_margin(table: TableSpec, event: PrivacyEvent, confidence: Fraction) -> int | Fraction:
    """A count's or sum's margin of error in units of the value (exact, rounded up).

    The noise is in granularity units: its margin times the granularity (a count's, 1).
    """
    margin = margin_of_error(event.mechanism, confidence)
    if table.statistic == "sum" and table.granularity is not None:
        margin = margin * table.granularity
        return int(margin) if margin.denominator == 1 else margin
    return int(margin)


def exact_margin(margin):
    """A margin as JSON: an integer as it is, a fraction of the value's units as 'p/q'."""
    if margin is None or isinstance(margin, int):
        return margin
    return int(margin) if margin.denominator == 1 else str(margin)


def value_fields(table: TableSpec, measures: tuple[MeasurePlan, ...]) -> dict:
    """What a plan's table entry adds for a mean, var, std or a sum of any granularity:
    its value column, bounds, granularity and each noisy aggregate (a sum of granularity
    1 adds nothing: its entry stays as it was)."""
    if table.statistic not in MOMENT_STATISTICS and table.granularity is None:
        return {}
    if table.statistic not in (*MOMENT_STATISTICS, "sum"):
        return {}
    entry = {
        "value": table.value,
        "lower": str(table.lower),
        "upper": str(table.upper),
        "granularity": str(value_granularity(table)),
    }
    if measures:
        entry["measures"] = [measure.to_dict() for measure in measures]
        entry["margin_of_error_meaning"] = (
            "none for the ratio; each noisy aggregate's margin is under measures, in units "
            "of the value (of its square for a sum of squares)"
        )
    return entry


_SHORT = {
    "count": "count",
    "sum": "sum",
    "centered_sum": "centred sum",
    "centered_sum_of_squares": "centred squares",
}


def margin_text(table_plan) -> str:
    """A noised table's margins of error in words: ``±m`` (a count or sum, in units of the
    value), or each noisy aggregate's of a mean, var or std (``count ±m, sum ±m``)."""
    if table_plan.measures:
        return ", ".join(
            f"{_SHORT[m.name]} ±{_figure(m.margin_of_error)}" for m in table_plan.measures
        )
    return f"±{_figure(table_plan.margin_of_error)}"


def _figure(margin: int | Fraction) -> str:
    if isinstance(margin, int) or margin.denominator == 1:
        return f"{int(margin):,}"
    return f"{float(margin):,.6f}".rstrip("0").rstrip(".")


def statistic_text(table: TableSpec) -> str:
    """A sum's, mean's, var's or std's statistic in words (its column, bounds, granularity)."""
    text = f"{table.statistic} of {table.value} in [{table.lower}, {table.upper}]"
    if table.granularity is not None and table.granularity != 1:
        text += f" step {table.granularity}"
    return text
