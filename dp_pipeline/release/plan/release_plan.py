"""Planning a release on the driver, before any data is read.

`plan_release` turns a validated spec into exact rational noise parameters
per table (the accountant's calibration: smallest safe σ², rounded up) and
proves the whole release's guarantee with the accountant: the tight bound
(multivariate discrete Gaussian by FFT, CKS Section 4) and, beside it, what
the zCDP conversion alone would give (CKS Cor. 13). If the tight bound does
not meet the spec's budget the plan fails with `PlanError` and nothing runs.

Sensitivity. Under add/remove one privacy unit changes at most
``max_cells`` (L0) cells of a table, each by at most ``per_cell_bound``
(L∞ rows, times max(|lower|, |upper|) for a sum). Under replace, up to 2·L0
cells change; for a sum the cell a unit leaves and the one it enters may be
the same, so each coordinate is bounded by L∞·max(max(|l|, |u|), u - l).
The accountant takes the worst pattern these per-coordinate bounds allow.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from fractions import Fraction

from dp_pipeline.accounting import (
    PrivacyAccountant,
    PrivacyEvent,
    calibrate_discrete_laplace,
    calibrate_zcdp_shares,
    margin_of_error,
    zcdp_to_epsilon,
)
from dp_pipeline.accounting.noise_variance import noise_variance
from dp_pipeline.errors import DPKeyError
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.release.ledger.budget import accountant_type, largest_fitting, largest_fitting_text
from dp_pipeline.release.plan import moments
from dp_pipeline.release.plan.costs import (
    PlanError,
    selection_epsilon_for_rho,
    selection_event,
    sensitivity_vector,
)
from dp_pipeline.release.plan.key_selections import plan_selected_release, report_entry, unresolved
from dp_pipeline.release.plan.postprocess import (
    check_postprocess_engine,
    check_postprocess_variances,
)
from dp_pipeline.release.plan.preflight import check_machine
from dp_pipeline.release.plan.queries import table_query
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError, TableSpec, replaced
from dp_pipeline.selection.algorithms import (
    quantile_rank_error_bound,
)

__all__ = [
    "CONFIDENCE",
    "PlanError",
    "ReleasePlan",
    "TablePlan",
    "fitting_budget_text",
    "plan_release",
]

CONFIDENCE = Fraction(95, 100)
# The δ at which a ρ-budget release reports its ε when neither budget nor cap names one.
RELEASE_REPORT_DELTA = Fraction(1, 10**10)
# Tables whose vector is noised (a top_k: its candidates' counts, one-shot noise).
NOISED = ("count", "sum", "top_k")


def _accounting():
    """The accountant's calibration, margin and conversion functions."""
    return calibrate_zcdp_shares, calibrate_discrete_laplace, margin_of_error, zcdp_to_epsilon


@dataclass(frozen=True)
class TablePlan:
    """One table's mechanism (exact parameters), sensitivity, ρ and margin of error.

    count / sum: ``margin_of_error`` bounds each cell's noise at CONFIDENCE. quantile /
    median: it is the rank error t (the released value's rank loss exceeds the best
    candidate's by less than t at CONFIDENCE, `quantile_rank_error_bound`). top_k: the
    noisy counts' margin (one-shot) or None (peeling).
    """

    table: TableSpec
    event: PrivacyEvent  # what the table costs: the record the accountant and ledger take
    margin_of_error: int | Fraction | None
    # mean / var / std: every noisy aggregate (`event` is the first's); margin_of_error None.
    measures: tuple[moments.MeasurePlan, ...] = ()

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """Every event of the table: one, or one per aggregate of a mean, var or std."""
        return tuple(m.event for m in self.measures) if self.measures else (self.event,)

    @property
    def rho(self) -> Fraction:
        """This table's exact zCDP ρ, the accountant's reading of `events` (a release
        accounted in pure ε reports none: `ReleasePlan.rho` is None)."""
        accountant = PrivacyAccountant()
        for event in self.events:
            accountant.add_event(event)
        return Fraction(accountant.rho())

    @property
    def epsilon(self) -> Fraction | None:
        """A selection table's pure ε (all runs), the accountant's reading of `event`."""
        if not self.table.is_selection:
            return None
        return PrivacyAccountant().add_event(self.event).pure_epsilon()

    @property
    def mechanism(self) -> DiscreteGaussian | DiscreteLaplace | BaseTwoExponential:
        return self.event.mechanism

    @property
    def sensitivity(self) -> tuple[int, ...]:
        return self.event.sensitivity

    @property
    def runs(self) -> int:
        """Independent runs of the mechanism one unit can influence."""
        return self.event.count

    @property
    def parameter(self) -> Fraction:
        """σ² (discrete Gaussian), scale (discrete Laplace) or pure ε (selection tables)."""
        if self.table.is_selection:
            return self.epsilon
        if isinstance(self.mechanism, DiscreteGaussian):
            return self.mechanism.sigma2
        return self.mechanism.scale

    @property
    def parameter_name(self) -> str:
        if self.table.is_selection:
            return "epsilon"
        return "sigma2" if isinstance(self.mechanism, DiscreteGaussian) else "scale"

    @property
    def noise_sd(self) -> float | None:
        """Standard deviation of a noised table's per-cell noise (report only, not noise).

        The square root of the exact variance of the noise drawn
        (`dp_pipeline.accounting.noise_variance`): for a discrete Gaussian at most σ
        (CKS 2020, Proposition 5), far below it for σ² < 1; for a discrete Laplace of
        scale t, sqrt(2·e^{-1/t}) / (1 - e^{-1/t}).
        """
        if isinstance(self.mechanism, DiscreteGaussian | DiscreteLaplace):
            return math.sqrt(noise_variance(self.mechanism))
        return None


@dataclass(frozen=True)
class InvalidCountPlan:
    """The noisy invalid-row count of ``on_invalid = "error"``: its event and threshold.

    The count is of the privacy units with at least one invalid row (each row its
    own unit under ``each_row``); adding, removing or replacing one unit moves it by
    at most 1, so its sensitivity is (1,) under either relation. Its noise is
    calibrated and composed with the tables' like one more one-cell table.
    """

    event: PrivacyEvent
    margin_of_error: int
    threshold: int
    share: Fraction | None

    @property
    def mechanism(self) -> DiscreteGaussian | DiscreteLaplace:
        return self.event.mechanism

    def to_dict(self, *, zcdp: bool) -> dict:
        mechanism = self.mechanism
        gaussian = isinstance(mechanism, DiscreteGaussian)
        rho = PrivacyAccountant().add_event(self.event).rho() if zcdp else None
        return {
            "counts": "privacy units with at least one invalid row (rows whose unit cannot "
            "be read, a null unit or a malformed CSV row, count together as one unit; "
            "without a unit column, invalid rows)",
            "mechanism": mechanism.name,
            "sigma2" if gaussian else "scale": str(
                mechanism.sigma2 if gaussian else mechanism.scale
            ),
            "sensitivity": list(self.event.sensitivity),
            "share": None if self.share is None else str(self.share),
            "rho": None if rho is None else str(Fraction(rho)),
            "threshold": self.threshold,
            "margin_of_error": self.margin_of_error,
            "decision": "the release is refused when the noisy count is above the threshold",
        }


@dataclass(frozen=True)
class ReleasePlan:
    """The proven plan of a release: per-table noise and the release's guarantee."""

    spec: ReleaseSpec
    tables: tuple[TablePlan, ...]
    accountant: object
    rho: Fraction | None
    report_delta: Fraction
    epsilon_tight: object  # EpsilonBound at report_delta
    delta_tight: object | None  # DeltaBound at the budget's epsilon
    epsilon_zcdp: float | None  # ε at report_delta from ρ alone (zCDP conversion)
    seconds: float
    # on_invalid = "error": the noisy invalid-row count (part of `accountant`), else None.
    invalid_count: InvalidCountPlan | None = None

    def table(self, name: str) -> TablePlan:
        for table in self.tables:
            if table.table.name == name:
                return table
        raise DPKeyError(
            f"the plan has no table {name!r}; its tables: {[t.table.name for t in self.tables]}"
        )

    def to_dict(self) -> dict:
        budget = self.spec.budget
        return {
            "release_id": self.spec.release_id,
            "population": self.spec.population,
            "neighbouring": self.spec.neighbouring,
            "noise": self.spec.noise,
            "budget": None if budget is None else budget.to_dict(),
            "cap": None if self.spec.cap is None else self.spec.cap.to_dict(),
            "confidence": str(CONFIDENCE),
            "tables": [_table_dict(t, zcdp=self.rho is not None) for t in self.tables],
            "guarantee": {
                "rho": None if self.rho is None else str(self.rho),
                "delta_reference": str(self.report_delta),
                "epsilon_tight": _bound(self.epsilon_tight),
                "delta_tight": None if self.delta_tight is None else _bound(self.delta_tight),
                "epsilon_zcdp": self.epsilon_zcdp,
                "bound_gap": (
                    None
                    if self.epsilon_zcdp is None
                    else self.epsilon_zcdp - float(self.epsilon_tight.upper)
                ),
            },
            "accountant": self.accountant.to_dict(),
            "planning_seconds": self.seconds,
            "invalid_rows": (
                None
                if self.invalid_count is None
                else self.invalid_count.to_dict(zcdp=self.rho is not None)
            ),
        } | report_entry(self)


def _table_dict(plan: TablePlan, *, zcdp: bool) -> dict:
    table = plan.table
    entry = {
        "name": table.name,
        "keys": list(table.keys),
        "statistic": table.statistic,
        "cells": table.cells,
        "mechanism": plan.mechanism.name,
        plan.parameter_name: str(plan.parameter),
        "sensitivity": list(plan.sensitivity),
        "share": None if table.share is None else str(table.share),
        "rho": str(plan.rho) if zcdp else None,
        "margin_of_error": moments.exact_margin(plan.margin_of_error),
    }
    entry.update(moments.value_fields(table, plan.measures))
    if table.is_selection:
        entry["runs"] = plan.runs
        if isinstance(plan.mechanism, DiscreteLaplace):
            entry["scale"] = str(plan.mechanism.scale)
        if table.statistic == "top_k":
            entry.update(k=table.k, method=table.method, candidates=table.candidates)
            if isinstance(plan.mechanism, DiscreteLaplace):
                entry["margin_of_error_meaning"] = "noisy count of each reported candidate"
        else:
            entry.update(
                value=table.value,
                q=str(table.q),
                lower=str(table.lower),
                upper=str(table.upper),
                granularity=str(table.granularity),
                candidates=table.candidates,
                margin_of_error_meaning="rank error (values between the released one and "
                "the true quantile)",
            )
        if isinstance(plan.mechanism, BaseTwoExponential):
            entry["base"] = str(plan.mechanism.base)
            entry["min_passes"] = plan.mechanism.min_passes
    return entry


def _bound(bound) -> dict:
    return {"lower": float(bound.lower), "upper": float(bound.upper), "method": bound.method}


def plan_release(
    spec: ReleaseSpec, confidence: Fraction = CONFIDENCE, *, input_present: bool = True
) -> ReleasePlan:
    """Calibrate every table and prove the release's guarantee; raise `PlanError` if unmet.

    Noised tables (count, sum) get their share of the budget as σ² (discrete Gaussian)
    or a scale (discrete Laplace); selection tables (quantile, median, top_k) get theirs
    as a pure ε: the share of ε in a discrete Laplace release, and in a discrete Gaussian
    release the ε whose zCDP ρ (ε²/8 per exponential-mechanism run) is the share of ρ.
    For an (ε, δ) budget the common noise scale is searched with every mechanism in the
    composition (`calibrate_zcdp_shares`). Raises `SpecError` first when the machine
    cannot run the spec (`check_machine`: a missing input, an input of another format,
    an output folder that is a file; Spark without PySpark is `run_release`'s check,
    `check_engine`, since a plan is the same on every install) or the combined tables
    cannot be post-processed where the engine would (`check_postprocess_engine`).
    ``input_present=False`` plans a release whose input may not exist yet (the input
    is not checked; ``dp-release plan`` reports its problems as notes).
    """
    if unresolved(spec):  # keys selected from the data: planned by `key_selections`
        return plan_selected_release(spec, plan_release, confidence, input_present)
    started = time.perf_counter()
    # `dp-release plan` refuses what `run` would, with the same error, before any budget.
    check_machine(spec, input_present=input_present)
    check_postprocess_engine(spec)
    calibrate_zcdp_shares, calibrate_laplace, margin_of_error, zcdp_to_epsilon = _accounting()

    vectors = {t.name: sensitivity_vector(spec, t) for t in spec.tables if t.statistic in NOISED}
    noised = [t for t in spec.tables if not t.is_selection]
    # Each noised table's vectors: one, or one per aggregate of a mean / var / std, which
    # share the table's budget equally (`dp_pipeline.release.plan.moments`).
    parts = {
        t.name: moments.measure_vectors(spec, t)
        if t.statistic in moments.MOMENT_STATISTICS
        else (vectors[t.name],)
        for t in noised
    }
    measured: dict[str, tuple[moments.MeasurePlan, ...]] = {}
    selections = [t for t in spec.tables if t.is_selection]
    budget = spec.budget
    # One PrivacyEvent per table: the record the accountant, the report and the ledger read.
    events: dict[str, PrivacyEvent] = {}

    def noised_event(table, mechanisms) -> PrivacyEvent:
        if table.statistic in moments.MOMENT_STATISTICS:
            measured[table.name] = moments.measure_plans(spec, table, mechanisms, confidence)
            return measured[table.name][0].event
        (mechanism,) = mechanisms
        (event,) = table_query(spec, table).with_noise(mechanism).events()
        return event

    invalid = spec.invalid_rows if spec.on_invalid == "error" else None
    if spec.on_invalid == "error" and invalid is None:
        raise PlanError(
            'input.on_invalid = "error" needs input.invalid_share (or invalid_sigma2) and '
            "input.invalid_threshold: the decision is made on a noisy, accounted count"
        )
    # The invalid-row count: one more noised query of sensitivity (1,) (see InvalidCountPlan).
    invalid_queries = [] if invalid is None or invalid.share is None else [(invalid.share, (1,))]
    invalid_event = None
    if spec.noise == "discrete_gaussian" and noised and noised[0].sigma2 is not None:
        for table in noised:
            count = len(parts[table.name])
            events[table.name] = noised_event(table, [DiscreteGaussian(table.sigma2)] * count)
        if invalid is not None:
            invalid_event = PrivacyEvent(DiscreteGaussian(invalid.sigma2), (1,), 1)
    elif spec.noise == "discrete_gaussian":

        def builder(table):
            def build(rho):
                event = selection_event(spec, table, selection_epsilon_for_rho(spec, table, rho))
                # The calibration takes (mechanism, sensitivity, count) triples.
                return event.mechanism, event.sensitivity, event.count

            return build

        sigma2s, built = calibrate_zcdp_shares(
            epsilon=budget.epsilon,
            delta=budget.delta,
            rho=budget.rho,
            queries=moments.shared_queries(noised, parts) + invalid_queries,
            others=[(t.share, builder(t)) for t in selections],
        )
        if invalid_queries:
            invalid_event = PrivacyEvent(DiscreteGaussian(sigma2s.pop()), (1,), 1)
        for table, chosen in moments.split_by_table(noised, parts, sigma2s):
            events[table.name] = noised_event(table, [DiscreteGaussian(v) for v in chosen])
        for table, (mechanism, sensitivity, runs) in zip(selections, built, strict=True):
            events[table.name] = PrivacyEvent(mechanism, tuple(sensitivity), runs)
    else:
        # Pure ε composes additively: every table spends its share of ε.
        shares = [t.share for t in noised] + [share for share, _ in invalid_queries]
        noised_share = sum(shares, Fraction(0))
        if shares:
            scales = calibrate_laplace(
                epsilon=budget.epsilon * noised_share,
                queries=moments.shared_queries(noised, parts, noised_share)
                + [(share / noised_share, vector) for share, vector in invalid_queries],
            )
            if invalid_queries:
                invalid_event = PrivacyEvent(DiscreteLaplace(scales.pop()), (1,), 1)
            for table, chosen in moments.split_by_table(noised, parts, scales):
                events[table.name] = noised_event(table, [DiscreteLaplace(v) for v in chosen])
        for table in selections:
            events[table.name] = selection_event(spec, table, table.share * budget.epsilon)

    accountant = accountant_type()()
    tables = []
    for table in spec.tables:
        event = events[table.name]
        if table.name in measured:
            for measure in measured[table.name]:
                accountant.add_event(measure.event)
            tables.append(TablePlan(table, event, None, measured[table.name]))
            continue
        accountant.add_event(event)
        if table.is_selection:
            tables.append(_selection_plan(table, event, confidence))
        else:  # in units of the value (a sum's noise is in granularity units)
            tables.append(TablePlan(table, event, moments.value_margin(table, event, confidence)))
    invalid_count = None
    if invalid_event is not None:
        accountant.add_event(invalid_event)
        margin = int(margin_of_error(invalid_event.mechanism, confidence))
        invalid_count = InvalidCountPlan(invalid_event, margin, invalid.threshold, invalid.share)

    # The calibrated variances must suit the post-processing's solver: refused here,
    # before any budget, rather than by a failed solve after the noise is drawn.
    check_postprocess_variances(spec, {p.table.name: p.mechanism for p in tables})
    report_delta = _report_delta(spec)
    rho_total = Fraction(accountant.rho()) if spec.noise == "discrete_gaussian" else None
    epsilon_tight = accountant.epsilon(report_delta)
    delta_tight = None
    if budget is not None and budget.epsilon is not None:
        # A discrete Laplace release is pure ε-DP: basic composition proves δ = 0 directly.
        method = "pure_dp" if spec.noise == "discrete_laplace" else None
        delta_tight = accountant.delta(budget.epsilon, method=method)
        if Fraction(delta_tight.upper) > budget.delta:
            raise PlanError(
                f"the release's delta at epsilon={budget.epsilon} is at most "
                f"{float(delta_tight.upper):.3g} ({delta_tight.method}), above budget.delta = "
                f"{budget.delta}; lower the tables' sigma2 or raise the budget"
            )
    if budget is not None and budget.rho is not None and rho_total > budget.rho:
        raise PlanError(
            f"the release's rho is {rho_total} ({float(rho_total):.6g}), above budget.rho = "
            f"{budget.rho}; raise the tables' sigma2 or the budget"
        )
    epsilon_zcdp = None
    if rho_total is not None:
        epsilon_zcdp = float(zcdp_to_epsilon(rho_total, report_delta))
    return ReleasePlan(
        spec=spec,
        tables=tuple(tables),
        accountant=accountant,
        rho=rho_total,
        report_delta=report_delta,
        epsilon_tight=epsilon_tight,
        delta_tight=delta_tight,
        epsilon_zcdp=epsilon_zcdp,
        seconds=time.perf_counter() - started,
        invalid_count=invalid_count,
    )


def _selection_plan(table, event: PrivacyEvent, confidence) -> TablePlan:
    mechanism = event.mechanism
    if isinstance(mechanism, DiscreteLaplace):  # one-shot top-k: a noisy histogram
        margin = int(margin_of_error(mechanism, confidence))
    else:
        margin = None
        if table.statistic in ("quantile", "median"):
            margin = quantile_rank_error_bound(mechanism, table.candidates, 1 - confidence)
    return TablePlan(table, event, margin)


def _report_delta(spec: ReleaseSpec) -> Fraction:
    for budget in (spec.budget, spec.cap):
        if budget is not None and budget.delta:
            return budget.delta
    return RELEASE_REPORT_DELTA


def fitting_budget_text(spec: ReleaseSpec, previous_states: list[dict], cap: dict) -> str:
    """The largest budget of ``spec`` that fits ``cap`` after ``previous_states``, in words.

    The spec's epsilon (at its own delta) or rho is searched by `largest_fitting`: each
    candidate is planned exactly as `plan_release` plans the spec, and composed by the
    ledger's accountant, so the figure suggested (rounded down) is one ``run`` accepts.
    A spec with explicit sigma2 has no budget to scale: the sentence says so.
    """
    budget = spec.budget
    if budget is None:
        return "The spec sets sigma2 explicitly; raise it to spend less."
    name = "rho" if budget.rho is not None else "epsilon"

    def state_at(figure: Fraction) -> dict | None:
        scaled = replaced(spec, budget=replace(budget, **{name: figure}))
        try:
            return plan_release(scaled, input_present=False).accountant.to_dict()
        except (PlanError, SpecError):
            return None

    figure = largest_fitting(getattr(budget, name), previous_states, cap, state_at)
    return largest_fitting_text(name, figure, budget.delta)
