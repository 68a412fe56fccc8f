"""The budget ledger: a persistent, transactional record of what each population has spent.

A ledger lives at a location (`dp_pipeline.release.ledger_location`): a SQLite file
(stdlib ``sqlite3``, the embedded default: `sqlite_backend`) or a PostgreSQL database
(psycopg 3, for runs on many hosts: `postgres_backend`). Both hold the same tables
(`dp_pipeline.release.ledger.schema`) and this module applies the same rules to both;
the backends only differ in how a transaction is made serializable and how a
run's lease is held. For every
population it keeps its cap and every release's mechanisms (the accountant's
``to_dict()``, restored through the closed registry of
`dp_pipeline.mechanisms.registry`), its state (``reserved -> reading -> noised
-> publishing -> committed``, or ``aborted`` while nothing was read;
`dp_pipeline.release.ledger.records`), the run token and owner (host:pid) of
the run holding it, input fingerprint (a keyed HMAC of the input computed by
the caller, never the data), identity (`dp_pipeline.release.ledger.identity`: the
digest of the whole canonical spec and the fingerprint, part by part), where
it publishes, when its publication started, and the digests of the files it
published (`dp_pipeline.release.publish.manifest`).

Guarantee. `Ledger.reserve` composes, with the accountant, every committed
and reserved release of the population plus the new one, and refuses the new
one if the composition's upper bound exceeds the cap. The check and the
insert run in one serializable transaction (SQLite: ``BEGIN IMMEDIATE``, the
file's write lock taken before reading; PostgreSQL: ``SERIALIZABLE`` under the
population's advisory lock), so two processes, on any hosts, can never both see
the same remaining budget (no double spend). Reserved releases count as spent until they are
committed or aborted: a crashed job errs on the side of privacy.

Release ids are single-use across the whole ledger: re-running a committed
id with the same identity (same canonical spec, same input bytes, same key)
is allowed without new spend, because it redraws identical noise, and it must
publish the same bytes; with any other identity it is refused, naming the
parts that differ, because the same noise on other data, or other noise on
the same data, reveals the truth.

This module reserves; the moves of a reservation along the release protocol
(`advance`, `mark_publishing`, `commit`, `abort`) are in
`dp_pipeline.release.ledger.moves`, the reads (`history`, `spent`) in
`dp_pipeline.release.ledger.view`.

The budget is anchored to the data and the key. A ledger records the public
fingerprint of the master key of its first keyed reservation and refuses any
other key (under another key the same input has another fingerprint, so the
input checks below could not recognise it); the key's home records the ledger
(`dp_pipeline.release.key_binding`). An input fingerprint, or content digest (names
excluded), already recorded under another population with the same privacy unit is
refused, naming that population, unless the reservation declares that population in
``shared_input_with`` (recorded in the row's ``input_override``). A `Ledger` given
its key checks and seals every row it writes (`dp_pipeline.release.ledger.integrity`).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Sequence

from dp_pipeline.errors import InternalError
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release import protocol
from dp_pipeline.release.ledger import postgres_backend, sqlite_backend
from dp_pipeline.release.ledger.anchors import bind_key_fingerprint, check_input
from dp_pipeline.release.ledger.budget import (
    LedgerError,
    cap_dict,
    check_new_cap,
    compose_events,
    describe_cap,
    left_text,
    measure_spend,
    spend_text,
    state_events,
    within_cap,
)
from dp_pipeline.release.ledger.identity import ReleaseIdentity
from dp_pipeline.release.ledger.integrity import seal, verify_population
from dp_pipeline.release.ledger.moves import LedgerMoves
from dp_pipeline.release.ledger.records import (
    BudgetExceededError,
    InputReuseError,
    Reservation,
    canonical_json,
    check_reuse,
    now_text,
    owner,
)
from dp_pipeline.release.ledger.verification import RowsCheck, check_rows
from dp_pipeline.release.ledger.view import LedgerReading, LedgerView, read_ledger
from dp_pipeline.release.ledger_location import LedgerLocation, ledger_location
from dp_pipeline.release.protocol import Checkpoint, row_state

__all__ = ["Ledger", "LedgerView", "read_ledger"]


class Ledger(LedgerMoves, LedgerReading):
    """A budget ledger at ``location``: a SQLite file (a path or ``sqlite:///path``, created
    on first use with its parent folder) or ``postgresql://...`` (its tables created on
    first use). An older schema is migrated in one transaction; a newer one is refused.
    ``timeout`` (s) bounds the wait for another run's write. ``key``, the master key the
    ledger is bound to, authenticates its rows (`dp_pipeline.release.ledger.integrity`):
    a ledger sealed under it refuses rows changed by hand, and its writes need it."""

    def __init__(
        self,
        location: str | os.PathLike[str] | LedgerLocation,
        timeout: float = 120.0,
        *,
        key: MasterKey | None = None,
    ) -> None:
        self.key = key  # authenticates rows (`integrity`); None: an unkeyed ledger's user
        self.location = ledger_location(location)
        self.path = self.location.path  # the SQLite file (None for a server ledger)
        if self.location.kind == "postgresql":
            self._backend = postgres_backend.PostgresBackend(self.location, timeout)
        else:
            self._backend = sqlite_backend.SqliteBackend(self.location, timeout)
        self._leases: dict[str, object] = {}

    def _write(self, work, *, action: str, population: str | None, release_id: str):
        """``work`` in one write transaction, between the check of the population's rows
        and the sealing of this write's row (`dp_pipeline.release.ledger.integrity`)."""

        def sealed(connection):
            if population is not None:
                verify_population(connection, self.key, population, self.location.shown)
            result = work(connection)
            seal(connection, self.key, release_id, population, self.location.shown)
            return result

        return self._backend.write(sealed, action=action, lock=population)

    def close(self) -> None:
        """Close the server connection, if any (a lease keeps its own until it ends)."""
        self._backend.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close()

    def lease(self, release_id: str, action: str = "running it") -> _HeldLease:
        """The lease a run of ``release_id`` holds for its whole life.

        SQLite: an OS lock beside the file (`RunLease`); server: an advisory lock on a
        connection of its own (`postgres_backend.ServerLease`). While this ledger holds
        it, every move of the release's reservation first checks that it is still held.
        """
        return _HeldLease(self, release_id, self._backend.lease(release_id, action))

    def _check_lease(self, release_id: str) -> None:
        lease = self._leases.get(release_id)
        if lease is not None:
            lease.check()

    # ------------------------------------------------------------------ reserve

    def reserve(
        self,
        *,
        population: str,
        release_id: str,
        accountant,
        fingerprint: str,
        cap,
        identity: ReleaseIdentity | None = None,
        output: str | None = None,
        engine: str | None = None,
        largest: Callable[[list[dict], dict], str] | None = None,
        key_fingerprint: str | None = None,
        shared_input_with: Sequence[str] = (),
        content: str | None = None,
    ) -> Reservation:
        """Reserve ``accountant``'s spend for ``release_id`` on ``population``, or refuse.

        Raises `BudgetExceededError` if the tight composition (upper bound) of
        every committed and reserved release of the population plus this one
        exceeds ``cap``; `ReleaseIdReuseError` if the id was used with another
        identity (spec, input or key: the message lists the parts that differ),
        another plan or another population; `LedgerError` if ``cap`` differs
        from the population's recorded cap. ``output`` is where the release
        will be published (recorded so that `abort` can refuse a published one),
        ``engine`` what publishes it (recorded for messages). The reservation
        carries a new run token; resuming a reservation gives it a new token,
        so the run it was taken from can no longer move it. A caller running
        the release holds its `lease` meanwhile. Without ``identity`` (a ledger
        used outside `run_release`) the release is identified by its mechanisms
        and its fingerprint alone. ``largest(previous_states, cap)``, if given, says
        in a refusal over the cap the largest budget of this release that would fit
        (`dp_pipeline.release.plan.release_plan.fitting_budget_text`); it runs after the write
        lock is released. ``key_fingerprint`` (the master key's public fingerprint) is
        recorded by the first keyed reservation and must match it afterwards
        (`LedgerError` otherwise). `InputReuseError` if ``fingerprint`` is recorded
        under another population with the same privacy unit, unless that population
        is in ``shared_input_with`` (the override is recorded with the release); the same
        for ``content`` (the input's keyed content digest, names excluded: a copy of an
        input under another name or folder is the same input).
        """
        try:
            return self._reserve(
                population,
                release_id,
                accountant,
                fingerprint,
                cap,
                identity,
                output,
                engine,
                key_fingerprint,
                tuple(shared_input_with),
                content,
            )
        except BudgetExceededError as error:
            previous_states = getattr(error, "previous_states", None)
            if largest is None or previous_states is None:
                raise
            suggestion = largest(previous_states, cap_dict(cap))
            raise BudgetExceededError(f"{error} {suggestion}") from None

    def _reserve(
        self,
        population,
        release_id,
        accountant,
        fingerprint,
        cap,
        identity,
        output,
        engine,
        key_fingerprint,
        shared_input_with,
        content=None,
    ) -> Reservation:
        cap_state = cap_dict(cap)
        state = accountant.to_dict()
        if identity is None:
            identity = ReleaseIdentity.of_parts(
                release_id, {"planned mechanisms": state, "input data": fingerprint}
            )
        if not isinstance(identity, ReleaseIdentity) or identity.release_id != release_id:
            raise LedgerError(f"release {release_id!r}: reserve needs the release's own identity")
        state_text = canonical_json(state)
        identity_text = canonical_json(identity.to_dict())

        def work(connection) -> Reservation:
            if key_fingerprint is not None:
                bind_key_fingerprint(connection, key_fingerprint, self.location.shown)
            row = connection.execute(
                "SELECT cap FROM populations WHERE name = ?", (population,)
            ).fetchone()
            if row is None:
                check_new_cap(cap, cap_state)
                connection.execute(
                    "INSERT INTO populations (name, cap, created_at) VALUES (?, ?, ?)",
                    (population, canonical_json(cap_state), now_text()),
                )
            elif json.loads(row["cap"]) != cap_state:
                raise LedgerError(
                    f"population {population!r}: the spec's cap {describe_cap(cap_state)} "
                    f"differs from the ledger's cap {describe_cap(json.loads(row['cap']))}; "
                    "a population's cap cannot change once releases are recorded"
                )
            existing = connection.execute(
                "SELECT * FROM releases WHERE release_id = ?", (release_id,)
            ).fetchone()
            if existing is not None:
                outcome = check_reuse(existing, population, fingerprint, state_text, identity)
                if outcome is not None:
                    return self._reuse(connection, existing, outcome, identity, cap_state, engine)
            override = check_input(
                connection, release_id, population, (fingerprint, content), identity,
                shared_input_with,
            )  # fmt: skip
            others = connection.execute(
                "SELECT accountant FROM releases WHERE population = ? AND status IN "
                "('reserved', 'committed') AND release_id != ?",
                (population, release_id),
            ).fetchall()
            previous_states = [json.loads(r["accountant"]) for r in others]
            # Each recorded state is restored once, then composed (held under the lock).
            previous = [event for other in previous_states for event in state_events(other)]
            own = state_events(state)
            before = measure_spend(compose_events(previous), cap_state) if previous_states else None
            cumulative = measure_spend(compose_events([*previous, *own]), cap_state)
            if not within_cap(cumulative, cap_state):
                alone = measure_spend(compose_events(own), cap_state)
                refusal = BudgetExceededError(
                    f"release {release_id!r} refused: population {population!r} would exceed "
                    f"its cap {describe_cap(cap_state)} "
                    f"({len(previous_states)} earlier release(s) + this one: "
                    f"{spend_text(cumulative, cap_state)}; this release alone: "
                    f"{spend_text(alone, cap_state)}). "
                    f"Left before this release: {left_text(before, cap_state)}. "
                    "Nothing was read or written."
                )
                # What it was refused against: `reserve` says what would fit, unlocked.
                refusal.previous_states = previous_states
                raise refusal
            guarantee = measure_spend(compose_events(own), cap_state).to_dict()
            reserved_at = now_text()
            token = secrets.token_hex(16)
            values = (
                population,
                "reserved",
                fingerprint,
                state_text,
                canonical_json(guarantee),
                canonical_json(cumulative.to_dict()),
                reserved_at,
                None,
                owner(),
                output,
                identity_text,
                None,
                "reserved",
                token,
                engine,
                None,
                override,
                content,
                release_id,
            )
            if existing is None:
                connection.execute(
                    "INSERT INTO releases (population, status, fingerprint, accountant, "
                    "guarantee, cumulative, reserved_at, finished_at, owner, output, identity, "
                    "published_at, state, token, engine, manifest, input_override, content, "
                    "release_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    values,
                )
            else:  # an aborted id, run again
                connection.execute(
                    "UPDATE releases SET population = ?, status = ?, fingerprint = ?, "
                    "accountant = ?, guarantee = ?, cumulative = ?, reserved_at = ?, "
                    "finished_at = ?, owner = ?, output = ?, identity = ?, published_at = ?, "
                    "state = ?, token = ?, engine = ?, manifest = ?, input_override = ?, "
                    "content = ? WHERE release_id = ?",
                    values,
                )
            protocol.checkpoint(Checkpoint.MID_RESERVE)
            return Reservation(
                release_id,
                population,
                "reserved",
                guarantee,
                cumulative.to_dict(),
                cap_state,
                reserved_at,
                left_text(cumulative, cap_state),
                token=token,
                digest=identity.digest,
            )

        return self._write(
            work, action=f"reserving {release_id!r}", population=population, release_id=release_id
        )

    def _reuse(self, connection, existing, outcome, identity, cap_state, engine) -> Reservation:
        """The reservation of a run that resumes or re-emits ``existing`` (no new spend)."""
        token = None
        if outcome == "resumed":  # take the reservation over: the old token moves nothing
            token = secrets.token_hex(16)
            connection.execute(
                "UPDATE releases SET token = ?, owner = ?, state = ?, "
                "engine = CASE WHEN manifest IS NULL THEN ? ELSE engine END "
                "WHERE release_id = ?",
                (token, owner(), row_state(existing), engine, existing["release_id"]),
            )
        manifest = existing["manifest"]
        return Reservation(
            existing["release_id"],
            existing["population"],
            outcome,
            json.loads(existing["guarantee"]),
            json.loads(existing["cumulative"]),
            cap_state,
            existing["reserved_at"],
            "unchanged (no new spend)",
            token=token,
            digest=identity.digest,
            state=row_state(existing),
            manifest=None if manifest is None else json.loads(manifest),
            engine=existing["engine"],
        )

    def record_input(self, reservation: Reservation, fingerprint: str) -> None:
        """Record the input fingerprint of a `dp_pipeline.Session` query, taken once it is
        reading (charged), as its fingerprint and content digest; `InputReuseError` (the
        query stays charged) when another population with the same privacy unit holds it."""
        release_id = reservation.release_id

        def work(connection) -> None:
            row = self._held(connection, reservation, "recording its input")
            identity = ReleaseIdentity.from_dict(json.loads(row["identity"]))
            inputs = (fingerprint, fingerprint)
            check_input(connection, release_id, reservation.population, inputs, identity, ())
            connection.execute(
                "UPDATE releases SET fingerprint = ?, content = ? WHERE release_id = ?",
                (fingerprint, fingerprint, release_id),
            )

        try:
            self._write(
                work,
                action=f"recording the input of {release_id!r}",
                population=reservation.population,
                release_id=release_id,
            )
        except InputReuseError as error:
            name, other = error.holder
            raise InputReuseError(
                f"session query {release_id!r} refused: its DataFrame holds the same rows as "
                f"release {other!r} of population {name!r} (same keyed fingerprint, same "
                f"privacy unit). The same people are one population: query them under "
                f"population={name!r}. This query stays charged to {reservation.population!r} "
                "(its data was read to be recognised); nothing was returned"
            ) from None

    def record_move(self, name: str, move: dict, key_fingerprint: str | None = None) -> None:
        """Append ``move`` to the JSON list ``ledger_meta[name]`` ("moved_to", "moved_from"),
        binding ``key_fingerprint`` first if given (`dp_pipeline.release.key_binding`)."""

        def work(connection) -> None:
            if key_fingerprint is not None:
                bind_key_fingerprint(connection, key_fingerprint, self.location.shown)
            row = connection.execute(
                "SELECT value FROM ledger_meta WHERE name = ?", (name,)
            ).fetchone()
            moves = [*([] if row is None else json.loads(row["value"])), move]
            connection.execute("DELETE FROM ledger_meta WHERE name = ?", (name,))
            connection.execute(
                "INSERT INTO ledger_meta (name, value) VALUES (?, ?)", (name, canonical_json(moves))
            )

        self._backend.write(work, action=f"recording {name}")

    def seal_now(self) -> None:
        """Record this ledger's key (if it records none) and authenticate its rows now, in
        one write under the key (`integrity.seal`; adopts rows only if never sealed)."""
        if self.key is None:
            raise InternalError("seal_now needs the ledger's key")
        key = self.key

        def work(connection) -> None:
            bind_key_fingerprint(connection, key.fingerprint, self.location.shown)

        self._write(work, action="authenticating the ledger", population=None, release_id=None)

    def rows_check(self, populations) -> RowsCheck:
        """Whether ``populations``' rows verify under this ledger's key (`check_rows`)."""
        return self._backend.read(
            lambda c: check_rows(c, self.key, populations, self.location.shown),
            action="checking the ledger",
        )


class _HeldLease:
    """``with ledger.lease(...) as lease:`` the backend's lease, known to its ledger meanwhile."""

    def __init__(self, ledger: Ledger, release_id: str, lease) -> None:
        self._ledger = ledger
        self._release_id = release_id
        self._lease = lease

    def __enter__(self):
        held = self._lease.__enter__()
        self._ledger._leases[self._release_id] = self._lease
        return held

    def __exit__(self, kind, value, traceback) -> None:
        self._ledger._leases.pop(self._release_id, None)
        self._lease.__exit__(kind, value, traceback)
