"""The budget ledger: a persistent, transactional record of what each population has spent.

SQLite (stdlib ``sqlite3``) by default; the path is configurable. For every
population it keeps its cap and every release's mechanisms (the accountant's
``to_dict()``, restored through the closed registry of
`dp_pipeline.mechanisms.registry`), status (reserved -> committed | aborted),
input fingerprint (a keyed HMAC of the input computed by the caller, never
the data), identity (`dp_pipeline.release.identity`: the digest of the whole
canonical spec and the fingerprint, part by part), where it publishes, and
when its publication started.

Guarantee. `Ledger.reserve` composes, with the accountant, every committed
and reserved release of the population plus the new one, and refuses the new
one if the composition's upper bound exceeds the cap. The check and the
insert run in one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write
lock before reading, so two processes can never both see the same remaining
budget (no double spend). Reserved releases count as spent until they are
committed or aborted: a crashed job errs on the side of privacy.

Release ids are single-use across the whole ledger: re-running a committed
id with the same identity (same canonical spec, same input bytes, same key)
is allowed without new spend, because it redraws identical noise; with any
other identity it is refused, naming the parts that differ, because the same
noise on other data, or other noise on the same data, reveals the truth.
A reservation whose publication started can no longer be aborted: its output
may have been read, so its spend stands; re-running it finishes it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from dp_pipeline.release.budget import (
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
from dp_pipeline.release.identity import ReleaseIdentity
from dp_pipeline.release.keys import private_folder
from dp_pipeline.release.ledger_records import (
    ADDED_COLUMNS,
    SCHEMA,
    BudgetExceededError,
    ImmediateTransaction,
    LedgerEntry,
    Reservation,
    canonical_json,
    check_reuse,
    entry_from_row,
    now_text,
    owner,
)

__all__ = ["Ledger"]


class Ledger:
    """A SQLite budget ledger at ``path`` (created on first use, with its parent folder)."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 120.0) -> None:
        self.path = Path(path)
        private_folder(self.path.parent)  # .dp_pipeline/ holds the master key too
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
    ) -> Reservation:
        """Reserve ``accountant``'s spend for ``release_id`` on ``population``, or refuse.

        Raises `BudgetExceededError` if the tight composition (upper bound) of
        every committed and reserved release of the population plus this one
        exceeds ``cap``; `ReleaseIdReuseError` if the id was used with another
        identity (spec, input or key: the message lists the parts that differ),
        another plan or another population; `LedgerError` if ``cap`` differs
        from the population's recorded cap. ``output`` is where the release
        will be published (recorded so that `abort` can refuse a published one).
        Without ``identity`` (a ledger used outside `run_release`) the release
        is identified by its mechanisms and its fingerprint alone.
        """
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
                resumed = check_reuse(
                    existing, population, fingerprint, state_text, identity, cap_state
                )
                if resumed is not None:
                    return resumed
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
                raise BudgetExceededError(
                    f"release {release_id!r} refused: population {population!r} would exceed "
                    f"its cap {describe_cap(cap_state)} "
                    f"({len(previous_states)} earlier release(s) + this one: "
                    f"{spend_text(cumulative)}; this release alone: {spend_text(alone)}). "
                    f"Left before this release: {left_text(before, cap_state)}. "
                    "Nothing was read or written."
                )
            guarantee = measure_spend(compose_accountants([state]), cap_state).to_dict()
            reserved_at = now_text()
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
                release_id,
            )
            if existing is None:
                connection.execute(
                    "INSERT INTO releases (population, status, fingerprint, accountant, "
                    "guarantee, cumulative, reserved_at, finished_at, owner, output, identity, "
                    "published_at, release_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    values,
                )
            else:  # an aborted id, run again
                connection.execute(
                    "UPDATE releases SET population = ?, status = ?, fingerprint = ?, "
                    "accountant = ?, guarantee = ?, cumulative = ?, reserved_at = ?, "
                    "finished_at = ?, owner = ?, output = ?, identity = ?, published_at = ? "
                    "WHERE release_id = ?",
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
            )

    # ------------------------------------------------------------------ finish

    def commit(self, release_id: str, output: str | None = None) -> None:
        """Mark a reserved release as committed (its outputs are in place)."""
        self._finish(release_id, "committed", output)

    def abort(self, release_id: str) -> None:
        """Mark a reserved release as aborted: nothing was published, its spend is returned.

        Refused once its publication started (`mark_publishing`) or while its
        output folder exists: a published release may have been read, and
        aborting it would let the same id run again on other data.
        """
        self._finish(release_id, "aborted", None)

    def mark_publishing(self, release_id: str) -> None:
        """Record, before the output is moved into place, that publication starts.

        From then on the reservation can only be committed: a crash between
        the move and the commit leaves a release that `abort` refuses and that
        a re-run of the same identity finishes.
        """
        with self._transaction() as connection:
            row = connection.execute(
                "SELECT status FROM releases WHERE release_id = ?", (release_id,)
            ).fetchone()
            if row is None or row["status"] != "reserved":
                raise LedgerError(
                    f"release id {release_id!r} is not reserved in the ledger {self.path}; "
                    "only a reserved release can be published"
                )
            connection.execute(
                "UPDATE releases SET published_at = COALESCE(published_at, ?) WHERE release_id = ?",
                (now_text(), release_id),
            )

    def _finish(self, release_id: str, status: str, output: str | None) -> None:
        with self._transaction() as connection:
            row = connection.execute(
                "SELECT status, output, published_at FROM releases WHERE release_id = ?",
                (release_id,),
            ).fetchone()
            if row is None:
                raise LedgerError(f"release id {release_id!r} is not in the ledger {self.path}")
            if row["status"] == status:
                return
            if status == "aborted" and row["status"] == "reserved":
                published = row["published_at"] is not None or (
                    row["output"] is not None and Path(row["output"]).exists()
                )
                if published:
                    raise LedgerError(
                        f"release id {release_id!r} cannot be aborted: its output "
                        f"{row['output']!r} was published"
                        + (f" at {row['published_at']}" if row["published_at"] else "")
                        + " and may have been read, so its spend stands. Finish it instead: "
                        "run the same spec again on the same input with the same key "
                        "(dp-release run SPEC); the run re-emits the identical release and "
                        "commits it"
                    )
            if row["status"] != "reserved":
                raise LedgerError(
                    f"release id {release_id!r} is {row['status']}; only a reserved release "
                    f"can become {status}"
                )
            connection.execute(
                "UPDATE releases SET status = ?, finished_at = ?, output = COALESCE(?, output) "
                "WHERE release_id = ?",
                (status, now_text(), output, release_id),
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
