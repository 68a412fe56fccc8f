"""The budget ledger: a persistent, transactional record of what each population has spent.

SQLite (stdlib ``sqlite3``) by default; the path is configurable. For every
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
insert run in one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write
lock before reading, so two processes can never both see the same remaining
budget (no double spend). Reserved releases count as spent until they are
committed or aborted: a crashed job errs on the side of privacy.

Release ids are single-use across the whole ledger: re-running a committed
id with the same identity (same canonical spec, same input bytes, same key)
is allowed without new spend, because it redraws identical noise, and it must
publish the same bytes; with any other identity it is refused, naming the
parts that differ, because the same noise on other data, or other noise on
the same data, reveals the truth.

Every move of a reservation (`advance`, `mark_publishing`, `commit`) checks
the run token and the identity digest of the `Reservation` it is given: a run
whose reservation was aborted, taken over or reserved again by another run
moves nothing. `abort` is allowed only in state ``reserved`` (nothing read),
only while the release id's lease (`dp_pipeline.release.ledger.lease`) is free (no
run of it is alive), and only while no hidden folder of its output exists.

A new ledger's folder is created owner-only (0700) and its file 0600.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path

from dp_pipeline.errors import InternalError
from dp_pipeline.release.keys import private_folder
from dp_pipeline.release.ledger.budget import (
    LedgerError,
    Spend,
    cap_dict,
    compose_accountants,
    describe_cap,
    left_text,
    measure_spend,
    spend_text,
    within_cap,
)
from dp_pipeline.release.ledger.identity import ReleaseIdentity
from dp_pipeline.release.ledger.lease import RunLease, lease_path
from dp_pipeline.release.ledger.records import (
    ADDED_COLUMNS,
    SCHEMA,
    STATES,
    BudgetExceededError,
    ImmediateTransaction,
    LedgerEntry,
    Reservation,
    canonical_json,
    check_reuse,
    entry_from_row,
    now_text,
    owner,
    row_state,
)
from dp_pipeline.release.publish.manifest import check_same_bytes, hidden_folders

__all__ = ["Ledger", "LedgerView", "read_ledger"]


class Ledger:
    """A SQLite budget ledger at ``path`` (created on first use, with its parent folder)."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 120.0) -> None:
        self.path = Path(path)
        private_folder(self.path.parent)
        # A new ledger file is the owner's only (SQLite's journal files copy its mode).
        with suppress(FileExistsError):
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self._timeout = timeout
        with closing(self._connect()) as connection:
            connection.executescript(SCHEMA)
            present = {row["name"] for row in connection.execute("PRAGMA table_info(releases)")}
            for column, kind in ADDED_COLUMNS.items():
                if column not in present:
                    connection.execute(f"ALTER TABLE releases ADD COLUMN {column} {kind}")

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
        connection = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA foreign_keys = ON")
        return connection

    def _transaction(self):
        return ImmediateTransaction(self._connect())

    def lease(self, release_id: str, action: str = "running it") -> RunLease:
        """The lease a run of ``release_id`` holds for its whole life (`RunLease`)."""
        return RunLease(lease_path(self.path, release_id), release_id, action)

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
        lock is released.
        """
        try:
            return self._reserve(
                population, release_id, accountant, fingerprint, cap, identity, output, engine
            )
        except BudgetExceededError as error:
            previous_states = getattr(error, "previous_states", None)
            if largest is None or previous_states is None:
                raise
            suggestion = largest(previous_states, cap_dict(cap))
            raise BudgetExceededError(f"{error} {suggestion}") from None

    def _reserve(
        self, population, release_id, accountant, fingerprint, cap, identity, output, engine
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
        with self._transaction() as connection:
            row = connection.execute(
                "SELECT cap FROM populations WHERE name = ?", (population,)
            ).fetchone()
            if row is None:
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
            others = connection.execute(
                "SELECT accountant FROM releases WHERE population = ? AND status IN "
                "('reserved', 'committed') AND release_id != ?",
                (population, release_id),
            ).fetchall()
            previous_states = [json.loads(r["accountant"]) for r in others]
            before = (
                measure_spend(compose_accountants(previous_states), cap_state)
                if previous_states
                else None
            )
            cumulative = measure_spend(compose_accountants([*previous_states, state]), cap_state)
            if not within_cap(cumulative, cap_state):
                alone = measure_spend(compose_accountants([state]), cap_state)
                refusal = BudgetExceededError(
                    f"release {release_id!r} refused: population {population!r} would exceed "
                    f"its cap {describe_cap(cap_state)} "
                    f"({len(previous_states)} earlier release(s) + this one: "
                    f"{spend_text(cumulative)}; this release alone: {spend_text(alone)}). "
                    f"Left before this release: {left_text(before, cap_state)}. "
                    "Nothing was read or written."
                )
                # What it was refused against: `reserve` says what would fit, unlocked.
                refusal.previous_states = previous_states
                raise refusal
            guarantee = measure_spend(compose_accountants([state]), cap_state).to_dict()
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
                release_id,
            )
            if existing is None:
                connection.execute(
                    "INSERT INTO releases (population, status, fingerprint, accountant, "
                    "guarantee, cumulative, reserved_at, finished_at, owner, output, identity, "
                    "published_at, state, token, engine, manifest, release_id) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    values,
                )
            else:  # an aborted id, run again
                connection.execute(
                    "UPDATE releases SET population = ?, status = ?, fingerprint = ?, "
                    "accountant = ?, guarantee = ?, cumulative = ?, reserved_at = ?, "
                    "finished_at = ?, owner = ?, output = ?, identity = ?, published_at = ?, "
                    "state = ?, token = ?, engine = ?, manifest = ? WHERE release_id = ?",
                    values,
                )
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

    # ------------------------------------------------------------------ move on

    def advance(self, reservation: Reservation, state: str) -> None:
        """Record that the run holding ``reservation`` reaches ``state`` ("reading", "noised").

        Set "reading" just before the engine reads rows: from then on the run
        is charged (`abort` refuses it). States only move forward; a resumed
        run repeating an earlier step leaves the later state in place.
        """
        if state not in ("reading", "noised"):
            raise InternalError(f"advance: state {state!r} is not 'reading' or 'noised'")
        with self._transaction() as connection:
            current = row_state(self._held(connection, reservation, f"moving to {state}"))
            if STATES.index(current) >= STATES.index(state):
                return
            if STATES.index(current) != STATES.index(state) - 1:
                raise LedgerError(
                    f"release id {reservation.release_id!r} is {current}; it must be "
                    f"{STATES[STATES.index(state) - 1]} before it is {state}"
                )
            connection.execute(
                "UPDATE releases SET state = ? WHERE release_id = ?",
                (state, reservation.release_id),
            )

    def mark_publishing(self, reservation: Reservation, manifest: dict, engine: str) -> None:
        """Record, before the output is moved into place, that publication starts, and its bytes.

        ``manifest`` (`dp_pipeline.release.publish.manifest`) holds every output file's
        SHA-256; ``engine`` made them. From then on the reservation can only be
        committed: a crash between the move and the commit leaves a release
        that `abort` refuses and that a re-run of the same identity finishes,
        with the same bytes (other bytes are refused: `check_same_bytes`).
        """
        with self._transaction() as connection:
            row = self._held(connection, reservation, "publishing")
            current = row_state(row)
            if current not in ("noised", "publishing"):
                raise LedgerError(
                    f"release id {reservation.release_id!r} is {current}; only a noised "
                    "release can be published"
                )
            recorded = None if row["manifest"] is None else json.loads(row["manifest"])
            check_same_bytes(reservation.release_id, recorded, manifest, row["engine"], engine)
            connection.execute(
                "UPDATE releases SET state = 'publishing', "
                "published_at = COALESCE(published_at, ?), manifest = ?, engine = ? "
                "WHERE release_id = ?",
                (
                    now_text(),
                    canonical_json(manifest),
                    row["engine"] if recorded is not None else engine,
                    reservation.release_id,
                ),
            )

    def commit(self, reservation: Reservation, output: str | None = None) -> None:
        """Mark the release committed: its outputs, recorded by `mark_publishing`, are in place."""
        with self._transaction() as connection:
            row = self._held(connection, reservation, "committing", committed_ok=True)
            if row["status"] == "committed":
                return
            if row_state(row) != "publishing" or row["manifest"] is None:
                raise LedgerError(
                    f"release id {reservation.release_id!r} is {row_state(row)}; only a "
                    "release whose publication was recorded (mark_publishing) can be committed"
                )
            connection.execute(
                "UPDATE releases SET status = 'committed', state = 'committed', "
                "finished_at = ?, output = COALESCE(?, output) WHERE release_id = ?",
                (now_text(), output, reservation.release_id),
            )

    def _held(self, connection, reservation: Reservation, action: str, committed_ok=False):
        """The row of ``reservation``, if the run holding it still holds it; else refuse."""
        release_id = reservation.release_id
        row = connection.execute(
            "SELECT * FROM releases WHERE release_id = ?", (release_id,)
        ).fetchone()
        if row is None:
            raise LedgerError(f"release id {release_id!r} is not in the ledger {self.path}")
        recorded = json.loads(row["identity"]).get("digest") if row["identity"] else None
        open_states = ("reserved", "committed") if committed_ok else ("reserved",)
        if row["status"] not in open_states:
            problem = f"it is {row_state(row)}"
        elif reservation.token is None or row["token"] != reservation.token:
            problem = (
                "another run holds it now (it was aborted and reserved again, or resumed "
                "by a later run of the same release id)"
            )
        elif recorded != reservation.digest:
            problem = "the ledger records another identity (spec, input or key) for it"
        else:
            return row
        raise LedgerError(
            f"release id {release_id!r}: {action} refused, because this run no longer holds "
            f"its reservation: {problem}. This run publishes nothing; check the ledger "
            "(dp-release ledger) before running it again"
        )

    # ------------------------------------------------------------------ abort

    def abort(self, release_id: str) -> None:
        """Mark a reserved release aborted: nothing was read, its spend is returned.

        Refused while a run of it may be alive (its `lease` is held), once its
        run started reading data (state past ``reserved``: once data is read,
        the run is charged), once its publication started or while its output
        folder exists (a published release may have been read, and aborting it
        would let the same id run again on other data), and while a hidden
        folder of its output exists (what an interrupted run wrote).
        """
        with self.lease(release_id, "aborting it"), self._transaction() as connection:
            row = connection.execute(
                "SELECT * FROM releases WHERE release_id = ?", (release_id,)
            ).fetchone()
            if row is None:
                raise LedgerError(f"release id {release_id!r} is not in the ledger {self.path}")
            if row["status"] == "aborted":
                return
            if row["status"] != "reserved":
                raise LedgerError(
                    f"release id {release_id!r} is {row['status']}; only a reserved release "
                    "can become aborted"
                )
            state = row_state(row)
            output = None if row["output"] is None else Path(row["output"])
            finish = (
                " Finish it instead: run the same spec again on the same input with the same "
                "key (dp-release run SPEC); the run resumes the reservation with the same "
                "noise, re-emits the identical release and commits it, with no new spend"
            )
            if state == "publishing" or (output is not None and output.exists()):
                raise LedgerError(
                    f"release id {release_id!r} cannot be aborted: its output "
                    f"{row['output']!r} was published"
                    + (f" at {row['published_at']}" if row["published_at"] else "")
                    + " and may have been read, so its spend stands."
                    + finish
                )
            if state != "reserved":
                raise LedgerError(
                    f"release id {release_id!r} cannot be aborted: its run reached state "
                    f"{state!r}, so it may have read the input data, and once data is read "
                    "the run is charged; its spend stands." + finish
                )
            hidden = [] if output is None else hidden_folders(output)
            if hidden:
                raise LedgerError(
                    f"release id {release_id!r} cannot be aborted: hidden folder(s) "
                    f"{', '.join(repr(str(path)) for path in hidden)} of its output exist, "
                    "written by a run that may have read the input data; its spend "
                    "stands." + finish + " (the run removes them)"
                )
            connection.execute(
                "UPDATE releases SET status = 'aborted', state = 'aborted', token = NULL, "
                "finished_at = ? WHERE release_id = ?",
                (now_text(), release_id),
            )

    # ------------------------------------------------------------------ read

    def entry(self, release_id: str) -> LedgerEntry | None:
        with closing(self._connect()) as connection:
            row = connection.execute(
                "SELECT * FROM releases WHERE release_id = ?", (release_id,)
            ).fetchone()
        return None if row is None else entry_from_row(row)

    def history(self, population: str | None = None) -> list[LedgerEntry]:
        """Every release (optionally of one population), oldest first."""
        query = "SELECT * FROM releases"
        parameters: tuple = ()
        if population is not None:
            query += " WHERE population = ?"
            parameters = (population,)
        with closing(self._connect()) as connection:
            rows = connection.execute(query + " ORDER BY rowid", parameters).fetchall()
        return [entry_from_row(row) for row in rows]

    def populations(self) -> dict[str, dict]:
        """Each population's cap (exact strings)."""
        with closing(self._connect()) as connection:
            rows = connection.execute("SELECT name, cap FROM populations ORDER BY name").fetchall()
        return {row["name"]: json.loads(row["cap"]) for row in rows}

    def spent(self, population: str) -> tuple[Spend | None, str]:
        """The population's composed spend (committed + reserved) and what is left of its cap."""
        cap = self.populations().get(population)
        if cap is None:
            raise LedgerError(f"population {population!r} is not in the ledger {self.path}")
        states = [e.accountant for e in self.history(population) if e.status != "aborted"]
        spend = measure_spend(compose_accountants(states), cap) if states else None
        return spend, left_text(spend, cap)


@dataclass(frozen=True)
class LedgerView:
    """What a ledger records about one population and one release id, read without writing.

    ``cap`` is the population's recorded cap (None: no release of it yet); ``states``
    the accountant states of its committed and reserved releases other than
    ``release_id`` (what `Ledger.reserve` composes); ``existing`` the row of
    ``release_id`` (any population) as a dict, columns of older ledgers as None.
    """

    path: Path
    cap: dict | None
    states: list[dict]
    committed: int
    reserved: int
    existing: dict | None


def read_ledger(path: str | os.PathLike[str], population: str, release_id: str) -> LedgerView:
    """Read ``population`` and ``release_id`` from the ledger at ``path``, changing nothing.

    The file is opened read-only (SQLite ``mode=ro``): no schema is created or
    migrated, no lease is taken, and a missing file is a `LedgerError` (only a run
    creates a ledger).
    """
    path = Path(path)
    if not path.is_file():
        raise LedgerError(
            f"ledger {str(path)!r}: no ledger file there; a ledger is created by the "
            "first `dp-release run`, never by `plan` (check --ledger or run.ledger)"
        )
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise LedgerError(f"ledger {str(path)!r} cannot be opened: {error}") from None
    connection.row_factory = sqlite3.Row
    try:
        with closing(connection):
            row = connection.execute(
                "SELECT cap FROM populations WHERE name = ?", (population,)
            ).fetchone()
            others = connection.execute(
                "SELECT status, accountant FROM releases WHERE population = ? AND status IN "
                "('reserved', 'committed') AND release_id != ?",
                (population, release_id),
            ).fetchall()
            existing = connection.execute(
                "SELECT * FROM releases WHERE release_id = ?", (release_id,)
            ).fetchone()
    except sqlite3.Error as error:
        raise LedgerError(f"ledger {str(path)!r} cannot be read as a ledger: {error}") from None
    if existing is not None:
        existing = {**dict.fromkeys(ADDED_COLUMNS), **dict(existing)}
    return LedgerView(
        path,
        None if row is None else json.loads(row["cap"]),
        [json.loads(r["accountant"]) for r in others],
        sum(r["status"] == "committed" for r in others),
        sum(r["status"] == "reserved" for r in others),
        existing,
    )
