"""A count, sum, mean, variance or std with a key selected from the data, planned before reading.

Protocol (one query, two mechanisms, composed by the accountant):

1. Before reading. The selection is planned (`dp_pipeline.keyselect.plan_selection`: the
   exact threshold τ for ``selection_epsilon``, ``selection_delta``, ``max_cells`` and the
   neighbouring relation) and the statistic is built over a stand-in domain of
   2·``max_cells`` keys, so its noise is calibrated to the worst-case sensitivity (a unit
   on ``max_cells`` keys, 2·``max_cells`` under replace): the sensitivity it has over ANY
   released set. The query's cost (the statistic's events and `SelectionPlan.event`) and
   its margins are known here; bad parameters are refused here.
2. Reading. The released keys (`dp_pipeline.keyselect.select_keys`, or
   `select_keys_spark` streamed), then the statistic on the rows whose key is released,
   over exactly those keys (`bind_keys`), with the noise of step 1.

Guarantee: adaptive composition. The selection has the privacy profile of
`dp_pipeline.keyselect.plan` (Desfontaines et al., PoPETs 2022, for one key per unit);
given any released set the statistic's vectors move by at most the sensitivity of step 1,
so its events hold conditionally; the accountant composes both exactly
(`dp_pipeline.accounting`: the selection's count noise with the statistic's noise, its
infinite-loss atom q on the side), and the reported ε at δ = the statistic's δ + the
selection's is an upper bound of the whole query.

Rules of the key column: a null key (or, in a pandas object column, a value that is not a
string: a column of mixed types) makes its row invalid, dropped under
``on_invalid="drop"`` (counted in the diagnostics), refused under ``on_invalid="error"``
before any noise is drawn; it is never a key of its own. Without a privacy unit each row
is its own unit (one key each).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from dp_pipeline.digest import digest_of
from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.errors import DPValueError, InternalError
from dp_pipeline.keyselect import SelectionKey, SelectionPlan, plan_selection
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.cost import ReleaseInfo, release_info, with_key_selection
from dp_pipeline.query.domain import (
    DEFAULT_CELL_LIMIT,
    FROM_DATA,
    MAX_CELL_LIMIT,
    CellDomain,
    Domain,
    is_integer_value,
    positive_int,
)
from dp_pipeline.query.key_selection import KeySelectionInfo, pop_selection_arguments
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.query.variance import VARIANCE_STATISTICS, VarianceSpec
from dp_pipeline.randomness import MasterKey

__all__ = ["PlannedStatistic", "SelectedKey", "Statistic", "bind_keys", "plan_statistic"]

Statistic = QuerySpec | VarianceSpec
_NEIGHBOURINGS = ("add_remove", "replace")


@dataclass(frozen=True)
class SelectedKey:
    """The key column selected from the data and its plan; the labels of its streams."""

    column: str
    plan: SelectionPlan
    privacy_unit: str | None
    on_invalid: str
    context: RunContext
    labels: tuple[str, ...]
    info: KeySelectionInfo
    # The most cells the statistic may have over the released keys (the call's cell_limit).
    cell_limit: int = DEFAULT_CELL_LIMIT

    def selection_key(self) -> SelectionKey:
        """The per-key streams of this selection (driver only: from the master key)."""
        return SelectionKey.derive(self.context.master_key(), *self.labels)

    def salt(self) -> BoundingSalt:
        """The salt ranking each unit's keys (at most ``max_cells`` kept per unit)."""
        master: MasterKey = self.context.master_key()
        return BoundingSalt.derive(master, self.context.release_id, self.context.table)


@dataclass(frozen=True)
class PlannedStatistic:
    """``spec`` (over the stand-in domain when a key is selected: what is costed), the
    selection (None: every key declared) and ``info``, the cost of both."""

    spec: Statistic
    selection: SelectedKey | None
    info: ReleaseInfo


def _build(statistic: str, arguments: dict) -> Statistic:
    if statistic in VARIANCE_STATISTICS:
        return VarianceSpec.build(statistic, **arguments)
    return QuerySpec.build(statistic, **arguments)


def _context(spec: Statistic) -> RunContext:
    return spec.centered.context if isinstance(spec, VarianceSpec) else spec.context


def _plannable(max_cells: object, neighbouring: object) -> bool:
    return (
        is_integer_value(max_cells)
        and int(max_cells) >= 1  # type: ignore[call-overload]
        and neighbouring in _NEIGHBOURINGS
    )


def plan_statistic(statistic: str, arguments: Mapping[str, object]) -> PlannedStatistic:
    """Build and cost ``statistic`` (count, sum, mean, var, std) with ``arguments`` (a public
    call's, key and labels included); with a ``FROM_DATA`` domain, plan its key selection
    too (module docstring). Raises a one-line `DPError` naming the argument, before any
    data is read."""
    arguments = dict(arguments)
    parameters = pop_selection_arguments(arguments)
    domains = arguments.get("domains")
    opened = (
        [column for column, values in domains.items() if values is FROM_DATA]
        if isinstance(domains, Mapping)
        else []
    )
    if not opened:
        spec = _build(statistic, arguments)  # a missing domain is refused first
        if parameters.given:
            raise DPValueError(
                f"{parameters.given[0]}= applies to a key selected from the data; give "
                f"domains={{column: dp_pipeline.FROM_DATA}} for it, or leave "
                f"{parameters.given[0]}= out"
            )
        return PlannedStatistic(spec, None, release_info(spec))
    if len(opened) > 1:
        raise DPValueError(
            f"domains give FROM_DATA for {opened}: one key per query can be selected from the "
            f"data; declare the domains of the others (a range or a list of values)"
        )
    (column,) = opened
    missing = [
        name
        for name, value in (
            ("selection_epsilon", parameters.epsilon),
            ("selection_delta", parameters.delta),
        )
        if value is None
    ]
    if missing:
        raise DPValueError(
            f"domains[{column!r}] = FROM_DATA needs {' and '.join(f'{m}=' for m in missing)}: "
            f"the budget of the private selection of its keys (e.g. selection_epsilon=1, "
            f"selection_delta=1e-6)"
        )
    privacy_unit = arguments.get("privacy_unit")
    max_cells = arguments.get("max_cells", 1)
    neighbouring = arguments.get("neighbouring", "add_remove")
    on_invalid = arguments.get("on_invalid", "drop")
    plan = None
    if _plannable(max_cells, neighbouring):
        try:
            plan = plan_selection(
                noise=parameters.noise,
                epsilon=parameters.epsilon,
                delta=parameters.delta,
                # Without a privacy unit each row is its own unit, holding one key.
                max_cells=1 if privacy_unit is None else int(max_cells),  # type: ignore[call-overload]
                neighbouring=str(neighbouring),
                max_units=parameters.max_units,
            )
        except DPValueError as error:  # the plan's epsilon and delta are the selection's
            raise DPValueError(
                f"key selection of {column!r} (selection_epsilon, selection_delta): {error}"
            ) from None
    cell_limit = positive_int(arguments.get("cell_limit", DEFAULT_CELL_LIMIT), "cell_limit")
    stand_in = 2 * (plan.max_cells if plan is not None else 1)
    # The stand-in's cells are not released: the cell limit applies to the released keys'
    # (`bind_keys`), and here to the declared keys' product, which one key multiplies.
    spec = _build(
        statistic,
        {
            **arguments,
            "domains": {**domains, column: range(stand_in)},
            "cell_limit": max(cell_limit, MAX_CELL_LIMIT),
        },
    )
    if plan is None:
        raise InternalError("a query with bad max_cells or neighbouring was built")
    declared = math.prod(d.size for d in spec.cells.domains if d.column != column)
    if declared > cell_limit:
        raise DPValueError(
            f"the declared keys beside {column!r} have {declared:,} cells, above the cell "
            f"limit {cell_limit:,} before any key is selected; coarsen a domain or raise "
            f"cell_limit"
        )
    context = _context(spec)
    labels = (
        "key selection/v1",
        context.release_id,
        context.table,
        context.release_digest,
        digest_of(spec.canonical()),
        column,
    )
    selection_info = KeySelectionInfo(
        column=column,
        policy=plan.policy,
        noise=plan.noise,
        neighbouring=plan.neighbouring,
        max_cells=plan.max_cells,
        epsilon=plan.epsilon,
        delta=plan.delta,
        threshold=plan.threshold,
        event=plan.event(),
    )
    selected = SelectedKey(
        column=column,
        plan=plan,
        privacy_unit=privacy_unit if isinstance(privacy_unit, str) else None,
        on_invalid=str(on_invalid),
        context=context,
        labels=tuple(str(label) for label in labels),
        info=selection_info,
        cell_limit=cell_limit,
    )
    return PlannedStatistic(spec, selected, with_key_selection(release_info(spec), selection_info))


def bind_keys(
    spec: Statistic, column: str, keys: Sequence[object], cell_limit: int = DEFAULT_CELL_LIMIT
) -> Statistic:
    """``spec`` over exactly the released ``keys`` of ``column`` (its stand-in domain
    replaced), with the noise calibrated before reading. ``keys`` is not empty; a product
    of cells above ``cell_limit`` is refused (the number of keys kept is the selection's
    private output, so saying it discloses nothing more)."""
    domain = Domain(column, list(keys))
    others = math.prod(d.size for d in spec.cells.domains if d.column != column)
    if len(keys) * others > cell_limit:
        raise DPValueError(
            f"the selection of {column!r} kept at least {len(keys):,} keys: at least "
            f"{len(keys) * others:,} cells, above the cell limit {cell_limit:,}; raise "
            f"cell_limit, or the threshold (a smaller selection_epsilon or selection_delta)"
        )

    def rebound(query: QuerySpec) -> QuerySpec:
        cells = CellDomain(tuple(domain if d.column == column else d for d in query.cells.domains))
        return replace(query, query=replace(query.query, cells=cells))

    if isinstance(spec, VarianceSpec):
        return replace(spec, centered=rebound(spec.centered), squares=rebound(spec.squares))
    return rebound(spec)
