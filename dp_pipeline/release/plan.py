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

import time
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.accounting.ledger import accountant_type
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.release.spec import ReleaseSpec, TableSpec

__all__ = ["CONFIDENCE", "PlanError", "ReleasePlan", "TablePlan", "plan_release"]

CONFIDENCE = Fraction(95, 100)
# The δ at which a ρ-budget release reports its ε when neither budget nor cap names one.
DEFAULT_REPORT_DELTA = Fraction(1, 10**10)


class PlanError(ValueError):
    """The spec's noise parameters do not meet its budget (nothing was read or spent)."""


def _accounting():
    """The accountant's calibration, margin and conversion functions."""
    from dp_pipeline.accounting import (
        calibrate_discrete_gaussian,
        calibrate_discrete_laplace,
        margin_of_error,
        zcdp_to_epsilon,
    )

    return calibrate_discrete_gaussian, calibrate_discrete_laplace, margin_of_error, zcdp_to_epsilon


def sensitivity_vector(table: TableSpec, neighbouring: str) -> tuple[int, ...]:
    """Per-coordinate bound on how much one privacy unit can change the table's cells."""
    if neighbouring == "add_remove":
        return (table.per_cell_bound,) * table.max_cells
    if table.statistic == "sum":
        move = table.max_per_cell * max(
            max(abs(table.lower), abs(table.upper)), table.upper - table.lower
        )
    else:
        move = table.max_per_cell
    return (move,) * (2 * table.max_cells)


@dataclass(frozen=True)
class TablePlan:
    """One table's noise: mechanism (exact parameter), sensitivity, ρ and margin of error."""

    table: TableSpec
    mechanism: DiscreteGaussian | DiscreteLaplace
    sensitivity: tuple[int, ...]
    rho: Fraction | None  # ρ = ||Δ||²/(2σ²) for a discrete Gaussian; None for Laplace
    margin_of_error: int  # |noise| <= margin with probability >= CONFIDENCE, per cell

    @property
    def parameter(self) -> Fraction:
        if isinstance(self.mechanism, DiscreteGaussian):
            return self.mechanism.sigma2
        return self.mechanism.scale


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

    def table(self, name: str) -> TablePlan:
        for table in self.tables:
            if table.table.name == name:
                return table
        raise KeyError(name)

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
            "tables": [
                {
                    "name": t.table.name,
                    "keys": list(t.table.keys),
                    "statistic": t.table.statistic,
                    "cells": t.table.cells,
                    "mechanism": t.mechanism.name,
                    "sigma2" if isinstance(t.mechanism, DiscreteGaussian) else "scale": str(
                        t.parameter
                    ),
                    "sensitivity": list(t.sensitivity),
                    "share": None if t.table.share is None else str(t.table.share),
                    "rho": None if t.rho is None else str(t.rho),
                    "margin_of_error": t.margin_of_error,
                }
                for t in self.tables
            ],
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
        }


def _bound(bound) -> dict:
    return {"lower": float(bound.lower), "upper": float(bound.upper), "method": bound.method}


def plan_release(spec: ReleaseSpec, confidence: Fraction = CONFIDENCE) -> ReleasePlan:
    """Calibrate every table and prove the release's guarantee; raise `PlanError` if unmet."""
    started = time.perf_counter()
    calibrate_gaussian, calibrate_laplace, margin_of_error, zcdp_to_epsilon = _accounting()
    vectors = [sensitivity_vector(t, spec.neighbouring) for t in spec.tables]
    budget = spec.budget
    if spec.noise == "discrete_gaussian":
        if spec.tables[0].sigma2 is not None:
            parameters = [t.sigma2 for t in spec.tables]
        else:
            parameters = calibrate_gaussian(
                epsilon=budget.epsilon,
                delta=budget.delta,
                rho=budget.rho,
                queries=[(t.share, v) for t, v in zip(spec.tables, vectors, strict=True)],
            )
        mechanisms = [DiscreteGaussian(p) for p in parameters]
    else:
        # Pure-ε calibration: meets any (ε, δ) budget with the same ε.
        parameters = calibrate_laplace(
            epsilon=budget.epsilon,
            queries=[(t.share, v) for t, v in zip(spec.tables, vectors, strict=True)],
        )
        mechanisms = [DiscreteLaplace(p) for p in parameters]

    accountant = accountant_type()()
    tables = []
    for table, vector, mechanism in zip(spec.tables, vectors, mechanisms, strict=True):
        accountant.add(mechanism, sensitivity=vector, count=1)
        rho = None
        if isinstance(mechanism, DiscreteGaussian):
            rho = Fraction(sum(s * s for s in vector)) / (2 * mechanism.sigma2)
        tables.append(
            TablePlan(table, mechanism, vector, rho, int(margin_of_error(mechanism, confidence)))
        )

    report_delta = _report_delta(spec)
    rho_total = Fraction(accountant.rho()) if spec.noise == "discrete_gaussian" else None
    epsilon_tight = accountant.epsilon(report_delta)
    delta_tight = None
    if budget is not None and budget.epsilon is not None:
        delta_tight = accountant.delta(budget.epsilon)
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
    )


def _report_delta(spec: ReleaseSpec) -> Fraction:
    for budget in (spec.budget, spec.cap):
        if budget is not None and budget.delta:
            return budget.delta
    return DEFAULT_REPORT_DELTA


def format_plan(plan: ReleasePlan) -> str:
    """The plan as a human-readable table (what ``dp-release plan`` prints)."""
    spec = plan.spec
    lines = [
        f"release {spec.release_id} on population {spec.population} "
        f"({spec.neighbouring}, {spec.noise}, {spec.noise_partitions} noise partitions)",
        f"budget: {spec.budget.describe() if spec.budget else 'explicit sigma2'}"
        + (f"; population cap: {spec.cap.describe()}" if spec.cap else ""),
        "",
        f"{'table':<26}{'cells':>10}  {'sigma2 / scale':>22}{'rho share':>12}{'margin (95%)':>14}",
    ]
    for table in plan.tables:
        share = "" if table.rho is None or not plan.rho else f"{float(table.rho / plan.rho):.4f}"
        parameter = table.parameter
        shown = str(parameter) if len(str(parameter)) <= 22 else f"{float(parameter):.6g}"
        lines.append(
            f"{table.table.name:<26}{table.table.cells:>10}  {shown:>22}{share:>12}"
            f"{'±' + str(table.margin_of_error):>14}"
        )
    lines.append("")
    delta = float(plan.report_delta)
    tight = plan.epsilon_tight
    lines.append(
        f"epsilon at delta={delta:.3g}: tight {float(tight.upper):.6g} ({tight.method}, "
        f"lower bound {float(tight.lower):.6g})"
    )
    if plan.epsilon_zcdp is not None:
        lines.append(
            f"epsilon at delta={delta:.3g}: zCDP conversion {plan.epsilon_zcdp:.6g} "
            f"(rho = {float(plan.rho):.6g}); tight bound saves "
            f"{plan.epsilon_zcdp - float(tight.upper):.4g}"
        )
    if plan.delta_tight is not None:
        lines.append(
            f"delta at epsilon={float(spec.budget.epsilon):.6g}: "
            f"{float(plan.delta_tight.upper):.4g} (budget {float(spec.budget.delta):.3g})"
        )
    lines.append(f"planned in {plan.seconds:.3f} s, before reading any data")
    return "\n".join(lines)
