"""`Session`: a budget for notebooks and jobs, each query recorded in the ledger before it reads.

A session holds the master key, the population, the privacy unit and a budget (ρ,
(ε, δ) or pure ε). Its verbs are ``df.dp``'s (``session.count(df, by=..., ...)``,
``sum``, ``mean``, ``quantile``, ``median``, ``top_k``), for pandas and Spark
DataFrames alike. Each query, in order:

1. is built and costed (`dp_pipeline.session.plan`): bad arguments are refused here;
2. is refused, before the DataFrame is touched, when the session's queries with it
   would exceed the session's budget (`dp_pipeline.session.budget.fits`, the tight
   composition's upper bound), naming the budget and the largest budget argument of
   the query that would fit;
3. has the DataFrame's type and column names checked (its schema, no row);
4. is reserved in the ledger (`dp_pipeline.release.ledger.Ledger.reserve`, SQLite by
   default) as release ``<release id>/<index>`` of the population, composed with every
   release of that population under its lifetime cap (shared with every other session
   and ``dp-release`` run on it), or refused there;
5. is recorded as ``reading`` just before the engine reads rows: from then on it is
   charged, in the ledger and in the session, even if the query then fails;
6. runs on the engine (`dp_pipeline.session.engine`) with noise from the key's streams
   labelled by (release id, query index), then is committed.

The same query asked twice is two queries: charged twice, each with independent noise
determined by the key, the release id and its index. A release id is single-use: a
session whose id has queries in the ledger is refused (a second session under it would
redraw the first one's noise). ``on_invalid="error"`` is refused in sessions: whether a
query fails would then be an exact, unaccounted bit about the data.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from dp_pipeline.accounting import PrivacyEvent
from dp_pipeline.errors import DPTypeError, DPValueError, InternalError
from dp_pipeline.query.domain import FROM_DATA
from dp_pipeline.query.signatures import REQUIRED, explicit_argument_error
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.key_binding import bind_key
from dp_pipeline.release.ledger.budget import (
    LedgerError,
    cap_dict,
    compose_accountants,
    describe_cap,
    largest_fitting,
    measure_spend,
    within_cap,
)
from dp_pipeline.release.ledger.identity import ReleaseIdentity
from dp_pipeline.release.ledger.records import BudgetExceededError, ReleaseIdReuseError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.locations import default_ledger
from dp_pipeline.release.spec.fields import TOKEN_PATTERN
from dp_pipeline.session.budget import Budget, SpendBounds, accountant_of, fits, remaining, spent
from dp_pipeline.session.engine import check_columns, engine_of, run_planned
from dp_pipeline.session.fingerprint import frame_fingerprint
from dp_pipeline.session.plan import PlannedQuery, plan_query
from dp_pipeline.session.records import COST_SURFACE, QUERY_SURFACE, QueryCost, QueryRecord
from dp_pipeline.session.reprs import bounds_text
from dp_pipeline.surface.verbs import VERBS, method_of

__all__ = ["QueryCost", "QueryCosts", "QueryRecord", "Session"]

_EMPTY_MANIFEST = {"files": {}, "published": "returned to the session's caller"}


def _budget_argument(value: object, name: str) -> Budget | None:
    if value is None or isinstance(value, Budget):
        return value
    raise DPTypeError(
        f"{name} must be a dp_pipeline.Budget, e.g. {name}=Budget(epsilon=1, delta=1e-6) "
        f"or {name}=Budget(rho=0.5), got {type(value).__name__}"
    )


def _token(value: object, name: str) -> str:
    if not isinstance(value, str) or not TOKEN_PATTERN.match(value):
        shown = repr(value) if isinstance(value, str) else type(value).__name__
        raise DPValueError(
            f"{name} = {shown[:80]}: must be 1-128 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit"
        )
    return value


def _selects_keys(arguments: dict) -> bool:
    domains = arguments.get("domains")
    return isinstance(domains, Mapping) and any(v is FROM_DATA for v in domains.values())


def _fresh_release_id() -> str:
    return f"session-{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"


def _budget_of_cap(cap: dict) -> Budget:
    values = {name: Fraction(text) for name, text in cap.items() if text is not None}
    # The ledger's recorded cap is the population's, whatever its delta: it was accepted
    # (on purpose, if large) when the population's first release was recorded.
    return Budget(**values, allow_large_delta=True)


class Session:
    """A privacy budget for notebooks and jobs, recorded in the budget ledger.

    ``Session(key=MasterKey(...), population="census", privacy_unit="person_id",
    budget=Budget(epsilon=1, delta=1e-6))``: every query (``session.count(df, ...)``,
    the ``df.dp`` verbs with the same arguments but the key, labels and privacy unit)
    is charged to ``budget`` and to the population's lifetime ``cap`` in the ``ledger``
    before the DataFrame is read, and refused if it would exceed either.

    Parameters:
        key: the `MasterKey` (never shown in a repr or an error).
        population: the people the data describe; every session and release on them
            must use the same name, so that the ledger composes them under one cap.
        privacy_unit: required: the column whose value is one unit (the guarantee covers
            a unit with all of its rows), or None for a per-record guarantee.
        budget: this session's `Budget`, composed over all of its queries.
        cap: the population's lifetime `Budget` in the ledger; needed when the ledger
            has no release of the population yet, then fixed (None: the ledger's).
        ledger: the ledger's path (default ``.dp_pipeline/ledger.sqlite``, as
            ``dp-release``) or a `Ledger`.
        release_id: names the session's noise streams and ledger entries
            (``<release_id>/<index>``); single-use. Default: a fresh id (time and
            random digits). Give one to make the noise reproducible for an audit.
    """

    def __init__(
        self,
        *,
        key: MasterKey,
        population: str,
        privacy_unit: str | None = REQUIRED,
        budget: Budget,
        cap: Budget | None = None,
        ledger: str | os.PathLike[str] | Ledger | None = None,
        release_id: str | None = None,
    ) -> None:
        if privacy_unit is REQUIRED:
            raise explicit_argument_error("Session({})", "privacy_unit")
        if privacy_unit is not None and (not isinstance(privacy_unit, str) or not privacy_unit):
            raise DPTypeError(
                f"privacy_unit must be a column name or None, got {type(privacy_unit).__name__}"
            )
        if not isinstance(key, MasterKey):
            raise DPTypeError(f"key must be a dp_pipeline MasterKey, got {type(key).__name__}")
        self._budget = _budget_argument(budget, "budget")
        if self._budget is None:
            raise DPValueError(
                "a session needs budget=Budget(epsilon=..., delta=...) or Budget(rho=...): "
                "what all of its queries may spend together"
            )
        cap = _budget_argument(cap, "cap")
        self._population = _token(population, "population")
        self._release_id = _token(
            _fresh_release_id() if release_id is None else release_id, "release_id"
        )
        self._key = key
        self._privacy_unit = privacy_unit
        if ledger is None:
            ledger = default_ledger()
        if not isinstance(ledger, Ledger):
            if not isinstance(ledger, str | os.PathLike):
                raise DPTypeError(
                    f"ledger must be a path, a ledger URL or a Ledger, got {type(ledger).__name__}"
                )
            ledger = Ledger(ledger, key=key)
        elif ledger.key is None:  # its rows are checked and sealed under the session's key
            ledger.key = key
        self._ledger = ledger
        # A key's budget lives in one ledger (key_binding); a key read from a file carries
        # its binding there too, so a copy of that file elsewhere is held to the same ledger.
        bind_key(key, ledger, key_file=key.source)
        self._ledger_id = ledger.meta("ledger_id")  # salts the noise (session.plan)
        self._cap = self._population_cap(cap)
        self._check_unused()
        self._nonce = secrets.token_hex(16)
        self._events: list[PrivacyEvent] = []
        self._records: list[QueryRecord] = []
        self._next_index = 0
        self._spent_cache: tuple[int, SpendBounds] | None = None
        self._lock = threading.Lock()
        self._costs = QueryCosts(self)

    # ----------------------------------------------------------------- construction

    def _population_cap(self, cap: Budget | None) -> Budget:
        recorded = self._ledger.populations().get(self._population)
        where = f"the ledger {str(self._ledger.path)!r}"
        if recorded is None:
            if cap is None:
                raise DPValueError(
                    f"population {self._population!r} has no cap in {where} yet: give its "
                    f"lifetime cap, Session(..., cap=Budget(epsilon=..., delta=...)) or "
                    f"cap=Budget(rho=...); every later session and release of the population "
                    f"shares it (cap=budget makes this session's budget the whole cap)"
                )
            return cap
        if cap is not None and cap_dict(cap) != recorded:
            raise LedgerError(
                f"population {self._population!r}: cap {describe_cap(cap_dict(cap))} differs "
                f"from the cap {describe_cap(recorded)} in {where}; a population's cap cannot "
                f"change once releases are recorded (omit cap= to use the ledger's)"
            )
        return _budget_of_cap(recorded)

    def _check_unused(self) -> None:
        prefix = f"{self._release_id}/"
        used = [e for e in self._ledger.history() if e.release_id.startswith(prefix)]
        if used:
            raise ReleaseIdReuseError(
                f"release id {self._release_id!r} already has {len(used)} session "
                f"quer{'y' if len(used) == 1 else 'ies'} in the ledger "
                f"{str(self._ledger.path)!r}; a session's release id is single-use (its "
                f"noise is determined by the key, the release id and the query's index, so "
                f"a second session under it would redraw the same noise on other data): "
                f"choose a new release_id, or omit it for a fresh one"
            )

    # ----------------------------------------------------------------- what it holds

    @property
    def cost(self) -> QueryCosts:
        """``session.cost.<verb>(...)``: what a query would cost, without data or spending."""
        return self._costs

    @property
    def population(self) -> str:
        return self._population

    @property
    def release_id(self) -> str:
        return self._release_id

    @property
    def privacy_unit(self) -> str | None:
        return self._privacy_unit

    @property
    def budget(self) -> Budget:
        return self._budget

    @property
    def cap(self) -> Budget:
        """The population's lifetime cap in the ledger (shared with other sessions)."""
        return self._cap

    @property
    def ledger(self) -> Ledger:
        return self._ledger

    @property
    def queries(self) -> tuple[QueryRecord, ...]:
        """Every query charged to this session, in order (failed ones included)."""
        return tuple(self._records)

    @property
    def spent(self) -> SpendBounds:
        """The session's queries composed by the accountant, in the budget's measure:
        ``(lower, upper)`` of ε at the budget's δ, or of ρ (exact)."""
        cached = self._spent_cache
        if cached is None or cached[0] != len(self._events):
            cached = (len(self._events), spent(self._events, self._budget))
            self._spent_cache = cached
        return cached[1]

    @property
    def remaining(self) -> SpendBounds:
        """The budget less `spent`: ``(limit - upper, limit - lower)``, at least 0."""
        return remaining(self.spent, self._budget)

    def __repr__(self) -> str:
        return (
            f"Session(population={self._population!r}, release_id={self._release_id!r}, "
            f"privacy_unit={self._privacy_unit!r}, budget={self._budget!r}, "
            f"queries={len(self._records)}, ledger={str(self._ledger.location)!r})"
        )

    def __reduce__(self):
        raise DPTypeError(
            "a Session cannot be pickled or copied: it holds the master key and its place "
            "in the ledger; create a new session (with a new release_id) where it is needed"
        )

    # ----------------------------------------------------------------- queries

    def _plan(
        self, statistic: str, arguments: dict, index: int, data: str | None = None
    ) -> PlannedQuery:
        if arguments.get("on_invalid") == "error":
            raise DPValueError(
                f'session.{statistic}(...): on_invalid="error" is refused in a session: '
                f"whether the query fails would be an exact, unaccounted fact about the data "
                f"(e.g. whether any value lies outside a guessed domain); use "
                f'on_invalid="drop" (invalid rows are dropped and counted in the result\'s '
                f'diagnostics), or a release spec, whose on_invalid = "error" decides on a '
                f"noisy, accounted count"
            )
        if statistic == "median":
            arguments = {**arguments, "q": Fraction(1, 2)}
        if _selects_keys(arguments) and (self._budget.measure == "rho" or not self._budget.delta):
            raise DPValueError(
                f"session.{statistic}(...): a key selected from the data (FROM_DATA) has no "
                f"finite zCDP ρ and no pure ε (a key held by one unit is released with a small "
                f"probability), so a session whose budget is {self._budget.describe()} cannot "
                f"charge it; use a session with Budget(epsilon=..., delta=...), or declare the "
                f"key's domain"
            )
        return plan_query(
            statistic,
            arguments,
            key=self._key,
            population=self._population,
            release_id=self._release_id,
            privacy_unit=self._privacy_unit,
            index=index,
            # The ledger's id alone (engine-independent: pandas and Spark draw alike).
            salt=None if data is None else {"ledger": self._ledger_id},
        )

    def _run(self, statistic: str, arguments: dict):
        df = arguments.pop("df")
        call = f"session.{statistic}(...)"
        with self._lock:
            index = self._next_index
            planned = self._plan(statistic, arguments, index)
            self._check_budget(planned, call)
            engine = engine_of(df)
            check_columns(df, planned.columns, call)
            ledger_id = f"{self._release_id}/{index}"
            reservation = self._reserve(planned, ledger_id, engine, call)
            # An index once reserved is never reused, so no two reads share its noise.
            self._next_index += 1
            self._ledger.advance(reservation, "reading")  # from here on, charged
            self._events.extend(planned.events)
            record = QueryRecord(index, statistic, ledger_id, engine, "reading", planned.info)
            position = len(self._records)
            self._records.append(record)
            # Read (charged): the same data is the same people, refused under another
            # population; the query's noise is salted with the ledger's id.
            data = frame_fingerprint(df, planned.columns, engine, self._key)
            self._ledger.record_input(reservation, data)
            planned = self._plan(statistic, arguments, index, data)
            result = run_planned(planned, df, engine)
            # Returned, never written: the remaining states in one transaction.
            self._ledger.commit_returned(reservation, _EMPTY_MANIFEST, engine)
            self._records[position] = replace(record, state="committed")
            return result

    def _check_budget(self, planned: PlannedQuery, call: str) -> None:
        if fits([*self._events, *planned.events], self._budget):
            return
        before = self.spent
        alone = spent(planned.events, self._budget)
        previous = [accountant_of(self._events).to_dict()] if self._events else []
        suggestion = self._largest_text(planned, previous, cap_dict(self._budget), "budget")
        raise BudgetExceededError(
            f"session {self._release_id!r}: {call} refused before reading any data: it "
            f"would take the session's budget {self._budget.describe()} over (the "
            f"{len(self._events)} earlier quer{'y' if len(self._events) == 1 else 'ies'} "
            f"spent {bounds_text(before)}; this query alone {bounds_text(alone)}). {suggestion}"
        )

    def _reserve(self, planned: PlannedQuery, ledger_id: str, engine: str, call: str):
        accountant = accountant_of(planned.events)
        state = accountant.to_dict()
        identity = ReleaseIdentity.of_parts(
            ledger_id,
            {
                "session": {"release id": self._release_id, "instance": self._nonce},
                "query": planned.canonical(),
                "planned mechanisms": state,
                "master key": self._key.fingerprint,
                "privacy unit": {"column": self._privacy_unit},
            },
        )
        try:
            reservation = self._ledger.reserve(
                population=self._population,
                release_id=ledger_id,
                accountant=accountant,
                fingerprint=f"not read yet: session {self._nonce}",
                cap=self._cap,
                identity=identity,
                engine=engine,
                largest=lambda previous, cap: self._largest_text(planned, previous, cap, "cap"),
                key_fingerprint=self._key.fingerprint,
            )
        except BudgetExceededError as error:
            raise BudgetExceededError(
                f"session {self._release_id!r}: {call} refused before reading any data by "
                f"the population's cap in the ledger: {error}"
            ) from None
        if reservation.outcome != "reserved":
            raise InternalError(
                f"session query {ledger_id!r} was {reservation.outcome} instead of reserved"
            )
        return reservation

    def _largest_text(self, planned: PlannedQuery, previous: list, cap: dict, what: str) -> str:
        """The largest budget argument of ``planned`` that would fit (or why none is said)."""
        if planned.budget_figure is None:
            return (
                "This query names its noise: a larger sigma2 or scale spends less, or give "
                "it a budget (epsilon= or rho=) to be told the largest that fits."
            )
        name, value = planned.budget_figure

        def state_at(figure: Fraction):
            try:
                return accountant_of(planned.rebuild(figure).events).to_dict()
            except (ValueError, TypeError):
                return None  # no such query (e.g. a figure below a calibration's range)

        figure = largest_fitting(value, previous, cap, state_at)
        whose = "session's budget" if what == "budget" else "population's cap"
        if figure is None:
            return f"Nothing fits: what is left of the {whose} is too small for any {name}=."
        return f"The largest {name}= of this query that fits the {whose} is {float(figure):.6g}."

    def _cost(self, statistic: str, arguments: dict) -> QueryCost:
        with self._lock:
            planned = self._plan(statistic, arguments, self._next_index)
            before = self.spent
            after_events = [*self._events, *planned.events]
            after = spent(after_events, self._budget)
            fits_budget = fits(after_events, self._budget)
            fits_cap = self._fits_cap(planned)
        increment = SpendBounds(
            max(after.lower - before.upper, 0),
            after.upper - before.lower,
            after.measure,
            after.delta,
            after.method,
        )
        return QueryCost(
            statistic=statistic,
            alone=spent(planned.events, self._budget),
            spent_before=before,
            spent_after=after,
            increment=increment,
            fits_budget=fits_budget,
            fits_cap=fits_cap,
            margin_of_error=planned.margin_of_error,
            info=planned.info,
        )

    def _fits_cap(self, planned: PlannedQuery) -> bool:
        """Whether the ledger would accept ``planned`` now (read only: nothing reserved)."""
        cap = cap_dict(self._cap)
        states = [
            entry.accountant
            for entry in self._ledger.history(self._population)
            if entry.status != "aborted"
        ]
        combined = compose_accountants([*states, accountant_of(planned.events).to_dict()])
        return within_cap(measure_spend(combined, cap), cap)


class QueryCosts:
    """``session.cost.<verb>(...)``: what a query would cost, without data or spending."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def __repr__(self) -> str:
        return f"<cost of a query in {self._session!r}>"


def _query(statistic: str) -> Callable[..., Any]:
    def run(self: Session, **arguments: Any) -> Any:
        return self._run(statistic, arguments)

    return method_of(VERBS[statistic], QUERY_SURFACE, run)


def _cost(statistic: str) -> Callable[..., QueryCost]:
    def run(self: QueryCosts, **arguments: Any) -> QueryCost:
        return self._session._cost(statistic, arguments)

    return method_of(VERBS[statistic], COST_SURFACE, run)


for _statistic in VERBS:
    setattr(Session, _statistic, _query(_statistic))
    setattr(QueryCosts, _statistic, _cost(_statistic))
