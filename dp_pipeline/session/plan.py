"""One query of a session, planned before any data is read: its query object, cost and columns.

A session query is a ``df.dp`` query (the same parameter objects, the same checks) run
in the session's context: its key, its privacy unit, and stream labels of its own,
(release id, "session query <index>", the session's digest, salted with the ledger's
id), so the noise of query ``index`` is determined by the key, the release id, the
index and the ledger, and no two queries of
a session (the same query asked twice included) share a stream. The cost (`events`,
the accountant's `PrivacyEvent` per noised vector or selection) and the margins of
error (`info`) are known here, before the data is touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.accounting import PrivacyEvent
from dp_pipeline.digest import digest_of
from dp_pipeline.errors import DPValueError, InternalError
from dp_pipeline.from_data.plan import PlannedStatistic, SelectedKey, plan_statistic
from dp_pipeline.mechanisms.registry import mechanism_to_dict
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.cost import ReleaseInfo
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.query.variance import VARIANCE_STATISTICS, VarianceSpec
from dp_pipeline.randomness import MasterKey
from dp_pipeline.selection.info import SelectionInfo
from dp_pipeline.selection.parameters import QuantileSelection, TopKSelection
from dp_pipeline.selection.query import QuantileQuery, TopKQuery

__all__ = ["AGGREGATION_VERBS", "SELECTION_VERBS", "PlannedQuery", "plan_query", "session_digest"]

AGGREGATION_VERBS = ("count", "sum", "mean", *VARIANCE_STATISTICS)
SELECTION_VERBS = ("quantile", "median", "top_k")

SessionQuery = QuerySpec | VarianceSpec | QuantileQuery | TopKQuery


def session_digest(population: str, release_id: str, salt: dict | None = None) -> str:
    """The digest every stream of a session carries: no ``df.dp`` call shares its noise.

    ``salt`` (the ledger's id, when the query runs) enters it, so the same release id
    in another ledger draws other noise (in one ledger a release id is single-use).
    """
    described = {"population": population, "release id": release_id}
    if salt is not None:
        described["salt"] = salt
    return digest_of({"session/v1": described})


def query_table(index: int) -> str:
    """The stream label naming query ``index`` of a session (its table label)."""
    return f"session query {index}"


@dataclass(frozen=True)
class PlannedQuery:
    """A session query with its run context, its cost and the columns it reads.

    ``query`` is what the engines run (a `QuerySpec`, `VarianceSpec`, `QuantileQuery` or
    `TopKQuery`);
    ``info`` its `ReleaseInfo` / `SelectionInfo` without diagnostics; ``events`` what it
    spends (a key selection's event included); ``selection`` the key selected from the
    data (None: every key declared); ``budget_figure`` the name and value of the budget
    argument it was given ("epsilon" or "rho"), None when it named its mechanism.
    """

    statistic: str
    query: SessionQuery
    info: ReleaseInfo | SelectionInfo
    columns: tuple[str, ...]
    budget_figure: tuple[str, Fraction] | None
    rebuild: Callable[[Fraction], PlannedQuery]
    selection: SelectedKey | None = None

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return self.info.events

    @property
    def margin_of_error(self):
        return self.info.margin_of_error

    def statistic_plan(self) -> PlannedStatistic:
        """A count, sum, mean, var or std as `dp_pipeline.from_data` runs it."""
        if not isinstance(self.query, QuerySpec | VarianceSpec) or not isinstance(
            self.info, ReleaseInfo
        ):
            raise InternalError(f"session query {self.statistic!r} is not an aggregation")
        return PlannedStatistic(self.query, self.selection, self.info)

    def canonical(self) -> dict:
        """Every parameter that can change what the query releases (JSON values)."""
        query = self.query
        if isinstance(query, QuerySpec | VarianceSpec):
            return query.canonical()
        if isinstance(query, QuantileQuery):
            return query.selection.canonical()
        return {
            "statistic": "top_k",
            "counts": query.counts.canonical(),
            "column": query.column,
            "k": query.k,
            "method": query.method,
            "mechanism": mechanism_to_dict(query.mechanism),
        }


def _figure(arguments: dict) -> tuple[str, Fraction] | None:
    """The budget argument a query was given, when it is a plain number."""
    for name in ("epsilon", "rho"):
        value = arguments.get(name)
        if value is None:
            continue
        try:
            return name, Fraction(value)
        except (TypeError, ValueError):
            return None  # a ready mechanism (a selection's BaseTwoExponential)
    return None


def plan_query(
    statistic: str,
    arguments: dict,
    *,
    key: MasterKey,
    population: str,
    release_id: str,
    privacy_unit: str | None,
    index: int,
    salt: dict | None = None,
) -> PlannedQuery:
    """Build and cost ``statistic`` with ``arguments`` (a ``df.dp`` call's, without the key,
    labels and privacy unit) as query ``index`` of a session; raise before any work.
    ``salt`` enters its streams' labels (`session_digest`), never its cost."""
    context = RunContext.build(
        key=key,
        release_id=release_id,
        table=query_table(index),
        release_digest=session_digest(population, release_id, salt),
    )
    query: SessionQuery
    info: ReleaseInfo | SelectionInfo
    selected_key: SelectedKey | None = None
    if statistic in AGGREGATION_VERBS:
        # A count, sum, mean, var or std, its key perhaps selected from the data (FROM_DATA):
        # the selection's event is in the cost, charged with the query.
        planned = plan_statistic(
            statistic,
            {
                **arguments,
                "key": key,
                "release_id": release_id,
                "table": context.table,
                "release_digest": context.release_digest,
                "privacy_unit": privacy_unit,
            },
        )
        query, info, selected_key = planned.spec, planned.info, planned.selection
        if isinstance(query, VarianceSpec):
            columns = (*query.cells.columns, query.column)
        else:
            columns = (*query.cells.columns, *((query.column,) if query.column else ()))
    elif statistic in ("quantile", "median"):
        selection = QuantileSelection.build(statistic, privacy_unit=privacy_unit, **arguments)
        query = QuantileQuery(selection, context)
        info = query.info()
        groups = () if selection.groups is None else selection.groups.columns
        columns = (*groups, selection.column)
    elif statistic == "top_k":
        selection = TopKSelection.build(privacy_unit=privacy_unit, **arguments)
        query = TopKQuery(selection, context)
        info = query.info()
        columns = tuple(selection.counts.cells.columns)
    else:
        raise InternalError(f"no session verb {statistic!r}")
    if privacy_unit is not None:
        columns = (*columns, privacy_unit)
    figure = _figure(arguments)

    def rebuild(value: Fraction) -> PlannedQuery:
        if figure is None:
            raise DPValueError("this query names its mechanism: no budget figure to change")
        changed = {**arguments, figure[0]: value}
        return plan_query(
            statistic,
            changed,
            key=key,
            population=population,
            release_id=release_id,
            privacy_unit=privacy_unit,
            index=index,
            salt=salt,
        )

    return PlannedQuery(
        statistic=statistic,
        query=query,
        info=info,
        columns=tuple(dict.fromkeys(columns)),
        budget_figure=figure,
        rebuild=rebuild,
        selection=selected_key,
    )
