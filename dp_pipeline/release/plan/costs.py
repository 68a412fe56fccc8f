"""What one table of a release spec costs before calibration: its sensitivity vector and events.

From the spec's contribution bounds and neighbouring relation only (no data):
the worst-case neighbour difference of a table's cells, and for a selection
the exponential-mechanism event and the pure ε that fits a zCDP share.
"""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.accounting import PrivacyEvent
from dp_pipeline.errors import PlanError
from dp_pipeline.mechanisms import DiscreteLaplace
from dp_pipeline.query.budget import sqrt_down as query_sqrt_down
from dp_pipeline.release.plan.queries import table_sensitivity
from dp_pipeline.release.spec.model import ReleaseSpec, TableSpec
from dp_pipeline.selection.algorithms import (
    one_shot_scale,
    quantile_mechanism,
    top_k_mechanism,
)

__all__ = [
    "PlanError",
    "selection_epsilon_for_rho",
    "selection_event",
    "selection_runs",
    "sensitivity_vector",
    "sqrt_down",
]


def sensitivity_vector(spec: ReleaseSpec, table: TableSpec) -> tuple[int, ...]:
    """Per-coordinate bound on how much one privacy unit can change the table's cells.

    The sensitivity of the table's key-free query (`dp_pipeline.release.plan.queries`), the
    object the engines run, so plan and release agree. For a top_k table these are its
    candidates' counts (what one-shot noise is added to).
    """
    return table_sensitivity(spec, table)


def selection_runs(table: TableSpec, neighbouring: str) -> int:
    """How many exponential-mechanism runs one privacy unit can influence.

    A quantile per group: after bounding, a unit holds one value in one group, so adding
    or removing it changes one group's rank losses (by at most 1): parallel composition,
    one run. Replacing it can move the value to another group: two runs. Peeling top-k:
    k rounds (Durfee & Rogers 2019). One-shot top-k: one noisy histogram.
    """
    if table.statistic == "top_k":
        return table.k if table.method == "peeling" else 1
    return 2 if neighbouring == "replace" and table.keys else 1


def sqrt_down(value: Fraction, what: str) -> Fraction:
    """The largest multiple of 10^-15 (relative to the value's size) not above sqrt(value)."""
    root = query_sqrt_down(value)
    if root <= 0:
        raise PlanError(f"{what}: the budget share is too small for any selection ({value})")
    return root


def selection_event(spec: ReleaseSpec, table: TableSpec, epsilon: Fraction) -> PrivacyEvent:
    """The `PrivacyEvent` of a selection table spending at most pure ``epsilon``.

    quantile / median: `BaseTwoExponential` (Δu = 1, not monotone) at ε/runs per run.
    top_k peeling: k rounds at ε/k, Δu = max_per_cell, monotone under add/remove.
    top_k one-shot: discrete Laplace of scale Δ₁/ε on every candidate's count.
    """
    neighbouring = spec.neighbouring
    runs = selection_runs(table, neighbouring)
    if table.statistic in ("quantile", "median"):
        return PrivacyEvent(quantile_mechanism(epsilon / runs), (1,), runs)
    if table.method == "peeling":
        mechanism = top_k_mechanism(
            epsilon,
            table.k,
            utility_sensitivity=table.max_per_cell,
            monotone=neighbouring == "add_remove",
        )
        return PrivacyEvent(mechanism, (1,), runs)
    vector = sensitivity_vector(spec, table)
    return PrivacyEvent(DiscreteLaplace(one_shot_scale(epsilon, sum(vector))), vector, 1)


def selection_epsilon_for_rho(spec: ReleaseSpec, table: TableSpec, rho: Fraction) -> Fraction:
    """The pure ε whose `selection_event` is at most ``rho``-zCDP (rounded down).

    The exponential mechanism is ε-bounded-range, hence ε²/8-zCDP (Cesar & Rogers 2021):
    r runs at ε/r cost ε²/(8r). One-shot discrete Laplace of scale Δ₁/ε on a vector with
    shifts m_i costs Σ(m_i·ε/Δ₁)²/2.
    """
    what = f"table {table.name!r}"
    if table.statistic == "top_k" and table.method == "one_shot":
        vector = sensitivity_vector(spec, table)
        return sqrt_down(2 * rho * sum(vector) ** 2 / sum(m * m for m in vector), what)
    return sqrt_down(8 * selection_runs(table, spec.neighbouring) * rho, what)
