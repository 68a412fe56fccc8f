"""What a session reports of its queries (`QueryRecord`, `QueryCost`) and how its verbs look.

`QUERY_SURFACE` (``session.count(df, ...)``) and `COST_SURFACE` (``session.cost.count(...)``)
are ``df.dp``'s verbs (`dp_pipeline.surface.verbs`) without what the session holds: the key,
the release id, the table label and the privacy unit, refused in a call with an error
saying where they are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from dp_pipeline.accounting import PrivacyEvent
from dp_pipeline.query.cost import ReleaseInfo
from dp_pipeline.selection.info import SelectionInfo
from dp_pipeline.session.budget import SpendBounds
from dp_pipeline.session.reprs import cost_repr, details_text, record_repr
from dp_pipeline.surface.verbs import Surface

__all__ = ["COST_SURFACE", "QUERY_SURFACE", "QueryCost", "QueryRecord", "SparkDataFrame"]


class SparkDataFrame(Protocol):
    """A Spark DataFrame as a session's verbs take it (PySpark's classic and Connect
    DataFrames), typed without importing PySpark, an optional dependency."""

    @property
    def sparkSession(self) -> Any: ...  # noqa: N802  (PySpark's name)

    @property
    def schema(self) -> Any: ...


@dataclass(frozen=True, repr=False)
class QueryRecord:
    """One query of a session: its index, its ledger release id, the engine, its state
    ("reading": charged, running or failed; "committed": returned) and its public info
    (mechanisms, cost, margins of error; no diagnostics)."""

    index: int
    statistic: str
    ledger_id: str
    engine: str
    state: str
    info: ReleaseInfo | SelectionInfo

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return self.info.events

    def __repr__(self) -> str:
        return record_repr(self)

    def details(self) -> str:
        """Every field, in full."""
        return details_text(self)


@dataclass(frozen=True, repr=False)
class QueryCost:
    """What a query would cost in a session, computed without data and without spending.

    In the session budget's measure (ε at its δ, or ρ): ``alone`` is the query by
    itself, ``spent_before`` / ``spent_after`` the session's queries without / with it,
    ``increment`` a bracket of what it adds (after.lower - before.upper, after.upper -
    before.lower; tight composition is not additive). ``fits_budget`` and ``fits_cap``
    say whether the session's budget and the population's cap (every release of the
    population in the ledger) would accept it; ``margin_of_error`` and ``info`` are the
    result's, as the query would report them; ``threshold`` a key selection's (FROM_DATA).
    """

    statistic: str
    alone: SpendBounds
    spent_before: SpendBounds
    spent_after: SpendBounds
    increment: SpendBounds
    fits_budget: bool
    fits_cap: bool
    margin_of_error: object
    info: ReleaseInfo | SelectionInfo

    @property
    def fits(self) -> bool:
        """Whether the session would run the query now (its budget and the cap)."""
        return self.fits_budget and self.fits_cap

    @property
    def threshold(self) -> int | None:
        """With a key selected from the data (FROM_DATA): the least noisy count of distinct
        units a key needs to be released (None: every key declared)."""
        selection = getattr(self.info, "key_selection", None)
        return None if selection is None else selection.threshold

    def __repr__(self) -> str:
        return cost_repr(self)

    def details(self) -> str:
        """Every field, in full."""
        return details_text(self)


# What a session holds for all of its queries (never an argument of one of them).
SESSION_HELD = ("key", "release_id", "table", "privacy_unit")
_HELD_REASON = (
    "a session holds the key, the release id, the privacy unit and each query's stream "
    "labels for all of its queries (give them once, to Session(...))"
)
_DOCS = {
    "on_invalid": '"drop" (invalid rows are dropped and counted in the diagnostics); "error" '
    "is refused in a session (whether the query fails would be an exact fact about the data)",
    "df": "the pandas or Spark DataFrame to query (read only after the query is recorded "
    "in the ledger)",
}
_QUERY_RETURNS = (
    "what df.dp returns for a pandas DataFrame (attrs['dp'] states what was spent); for a "
    "Spark DataFrame, a count, sum or mean is the noisy Spark DataFrame (computed now, a "
    "local checkpoint) and a selection a small pandas DataFrame. The query is in "
    "session.queries."
)
_COST_RETURNS = (
    "a QueryCost: the query alone, the session's spend before and after it, the increment, "
    "whether the budget and the population's cap accept it, its margin of error and, with a "
    "FROM_DATA key, the threshold a key's noisy count must reach."
)
_MODULE = "dp_pipeline.session.session"

# A query's result is a pandas DataFrame or, for a Spark count, sum or mean, a Spark one.
QUERY_SURFACE = Surface(
    name="{}",
    call="session.{verb}({{}})",
    module=_MODULE,
    returns=Any,
    returns_text=_QUERY_RETURNS,
    selection_returns=Any,
    selection_returns_text=_QUERY_RETURNS,
    leading=("self", "df"),
    leading_types={"df": pd.DataFrame | SparkDataFrame},
    held=SESSION_HELD,
    held_reason=_HELD_REASON,
    docs=_DOCS,
)
COST_SURFACE = Surface(
    name="{}",
    call="session.cost.{verb}({{}})",
    module=_MODULE,
    returns=QueryCost,
    returns_text=_COST_RETURNS,
    selection_returns=QueryCost,
    selection_returns_text=_COST_RETURNS,
    leading=("self",),
    held=SESSION_HELD,
    held_reason=_HELD_REASON,
    docs=_DOCS,
)
