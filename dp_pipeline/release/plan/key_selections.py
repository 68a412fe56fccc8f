"""The key selections of a release (``[domains] column = "from_data"``) in its plan.

Budget. A selection with its own (ε_o, δ_o) takes them off ``[budget]`` first; the
rest, (ε', δ') = (ε - Σε_o, δ - Σδ_o), is shared: a selection with ``share`` s plans
at (s·ε', s·δ'), and the tables and the invalid-row count share what is left,
(1 - S)·(ε', δ') with S the selections' shares, by their own shares (renormalised),
exactly as a release without selections shares its budget. By basic composition the
parts sum to at most (ε, δ); the plan then proves the whole: the accountant composes
every table's event with each selection's event (`SelectionPlan.event`: its count noise
plus an infinite-loss atom of mass q, Desfontaines et al. 2022 / `dp_pipeline.keyselect.plan`),
and the plan is refused unless its δ at the budget's ε is at most the budget's δ.

Sensitivity of a table grouped by selected keys: planned over a stand-in domain of
``max_cells`` values for each selected key (so its L0 vector is the largest any set of
released keys allows); the tables are then computed on exactly the released keys
(`dp_pipeline.release.tables.selected_keys`), whose vector can only be shorter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from dp_pipeline.errors import DPValueError, PlanError
from dp_pipeline.keyselect import SelectionPlan, plan_selection
from dp_pipeline.release.ledger.budget import accountant_type
from dp_pipeline.release.spec.model import Budget, ReleaseSpec, replaced
from dp_pipeline.release.spec.selection import KeySelectionSpec

if TYPE_CHECKING:  # the plan module calls this one: its type only
    from dp_pipeline.release.plan.release_plan import ReleasePlan

__all__ = [
    "KeySelectionPlan",
    "plan_key_selections",
    "plan_selected_release",
    "report_entry",
    "selection_plans",
    "unresolved",
]


@dataclass(frozen=True)
class KeySelectionPlan:
    """One selected key column: its settings, its exact plan and (after a run) how many
    keys were released. The number of keys the data had is never recorded."""

    spec: KeySelectionSpec
    selection: SelectionPlan
    kept: int | None = None

    @property
    def column(self) -> str:
        return self.spec.column

    def to_dict(self) -> dict:
        plan = self.selection
        entry = {
            **self.spec.to_dict(),
            "policy": plan.policy,
            "epsilon": str(plan.epsilon),
            "delta": str(plan.delta),
            "threshold": plan.threshold,
            "scale": None if plan.scale is None else str(plan.scale),
            "sigma2": None if plan.sigma2 is None else str(plan.sigma2),
            "delta_upper": float(plan.delta_upper),
            "single_unit_release": float(plan.single_unit_release),
            "keys_kept": self.kept,
            "meaning": (
                "keys released: those whose noisy count of distinct privacy units (each unit "
                f"holding at most {plan.max_cells} key(s)) reached the threshold; the number "
                "of keys in the data is not published"
            ),
        }
        return entry


def unresolved(spec: ReleaseSpec) -> bool:
    """Whether ``spec`` has selected keys whose domain is not known yet (plan time)."""
    return any(column not in spec.domains for column in spec.key_selections)


def _own_rest(spec: ReleaseSpec) -> tuple[Fraction, Fraction] | None:
    """(ε', δ'): the budget once the selections' own (ε, δ) are taken off, or None."""
    return _rest_of(spec.key_selections, spec.budget)


def _rest_of(selections: dict, budget) -> tuple[Fraction, Fraction] | None:
    if budget is None or budget.epsilon is None:
        return None
    own = [s for s in selections.values() if s.share is None]
    return (
        budget.epsilon - sum((s.epsilon for s in own), Fraction(0)),
        budget.delta - sum((s.delta for s in own), Fraction(0)),
    )


def selection_plans(plan: ReleasePlan) -> tuple[KeySelectionPlan, ...]:
    """The selections of a `ReleasePlan`, each with, after a run (its spec's domain of the
    column then holds the released keys), how many keys were kept. Planned again from
    the spec (`plan_key_selections`, deterministic and cached): the plan the run used."""
    spec = plan.spec
    domains = spec.domains
    return tuple(
        replace(entry, kept=len(domains[entry.column]) if entry.column in domains else None)
        for entry in selection_plans_of(spec)
    )


def report_entry(plan: ReleasePlan) -> dict:
    """``{"key_selections": [...]}`` for a plan's ``to_dict`` (each selection's figures and
    keys kept); empty without selections, so other reports keep their bytes."""
    selections = selection_plans(plan)
    return {"key_selections": [s.to_dict() for s in selections]} if selections else {}


@lru_cache(maxsize=32)
def _planned(selections, budget, neighbouring, synthetic, persons) -> tuple:
    # Only what a selection's plan depends on (all hashable): see `plan_key_selections`.
    rest = _rest_of(dict(selections), budget)
    units = persons if synthetic else None
    return tuple(_plan_one(selection, rest, neighbouring, units) for _, selection in selections)


def plan_key_selections(spec: ReleaseSpec) -> tuple[KeySelectionPlan, ...]:
    """Each selection's exact plan (threshold, noise, δ); `PlanError` naming the field
    when its budget is too small for any key to be released (its threshold above the
    most units a key can have: ``max_units``, or a synthetic input's persons), with the
    threshold and the least epsilon that would release one, before anything is read."""
    return tuple(replace(entry, kept=None) for entry in selection_plans_of(spec))


def selection_plans_of(spec: ReleaseSpec) -> tuple[KeySelectionPlan, ...]:
    return _planned(
        tuple(sorted(spec.key_selections.items())),
        spec.budget,
        spec.neighbouring,
        not spec.input_path and spec.input_table is None,
        spec.synthetic_persons,
    )


def _plan_one(selection: KeySelectionSpec, rest, neighbouring: str, persons) -> KeySelectionPlan:
    column = selection.column
    if selection.share is not None:
        if rest is None:
            raise PlanError(
                f"key_selection.{column}.share: the release has no (epsilon, delta) budget "
                "to share; give the selection its own epsilon and delta"
            )
        epsilon, delta = selection.share * rest[0], selection.share * rest[1]
    else:
        epsilon, delta = selection.epsilon, selection.delta
    try:
        plan = plan_selection(
            noise=selection.noise,
            epsilon=epsilon,
            delta=delta,
            max_cells=selection.max_cells,
            neighbouring=neighbouring,
            max_units=selection.max_units if selection.max_units is not None else persons,
        )
        plan.event()  # a plan the accountant cannot compose is refused here
    except DPValueError as error:
        raise PlanError(f"key_selection.{column}: {error}") from None
    return KeySelectionPlan(selection, plan)


def _stand_in(spec: ReleaseSpec, column: str):
    """A domain of ``max_cells`` values (of the key's type) for planning the tables."""
    size = max(
        [t.max_cells for t in spec.tables if column in t.keys and t.max_cells is not None] or [1]
    )
    if spec.key_selections[column].type == "integer":
        return range(size)
    return tuple(str(i) for i in range(size))


def _tables_spec(spec: ReleaseSpec) -> ReleaseSpec:
    """The spec the tables are planned with: stand-in domains, and the budget the
    selections leave (shares renormalised to it; module docstring)."""
    domains = dict(spec.domains)
    for column in spec.key_selections:
        domains[column] = _stand_in(spec, column)
    changes: dict = {"domains": domains}
    rest = _own_rest(spec)
    shared = sum((s.share for s in spec.key_selections.values() if s.share), Fraction(0))
    if rest is not None and any(t.share is not None for t in spec.tables):
        left = 1 - shared
        changes["budget"] = Budget(epsilon=rest[0] * left, delta=rest[1] * left)
        changes["tables"] = tuple(replace(t, share=t.share / left) for t in spec.tables)
        if spec.invalid_rows is not None and spec.invalid_rows.share is not None:
            changes["invalid_rows"] = replace(
                spec.invalid_rows, share=spec.invalid_rows.share / left
            )
    return replaced(spec, **changes)


def plan_selected_release(
    spec: ReleaseSpec, plan_tables: Any, confidence: Fraction, input_present: bool
) -> ReleasePlan:
    """The `ReleasePlan` of a spec with selected keys: ``plan_tables`` (`plan_release`)
    plans the tables on `_tables_spec`, then every selection's event joins the
    accountant and the whole release is proven against ``[budget]``."""
    selections = plan_key_selections(spec)
    base = plan_tables(_tables_spec(spec), confidence, input_present=input_present)
    accountant = accountant_type()()
    for table in base.tables:
        accountant.add_event(table.event)
    if base.invalid_count is not None:
        accountant.add_event(base.invalid_count.event)
    for selection in selections:
        accountant.add_event(selection.selection.event())
    budget = spec.budget
    report_delta = budget.delta if budget is not None and budget.delta else base.report_delta
    try:
        epsilon_tight = accountant.epsilon(report_delta)
    except DPValueError:
        raise PlanError(
            f"the key selections alone have delta above {float(report_delta):.3g} (the delta "
            "the release reports its epsilon at); lower the selections' delta"
        ) from None
    delta_tight = None
    if budget is not None and budget.epsilon is not None:
        delta_tight = accountant.delta(budget.epsilon)
        if Fraction(delta_tight.upper) > budget.delta:
            raise PlanError(
                f"the release's delta at epsilon={budget.epsilon} is at most "
                f"{float(delta_tight.upper):.3g} ({delta_tight.method}) with its key "
                f"selections, above budget.delta = {budget.delta}; lower the selections' "
                "share or raise the budget"
            )
    originals = {t.name: t for t in spec.tables}
    tables = tuple(replace(t, table=originals[t.table.name]) for t in base.tables)
    return replace(
        base,
        spec=spec,
        tables=tables,
        accountant=accountant,
        rho=None,
        report_delta=report_delta,
        epsilon_tight=epsilon_tight,
        delta_tight=delta_tight,
        epsilon_zcdp=None,
    )
