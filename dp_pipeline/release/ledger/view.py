"""Reading a ledger: a `Ledger`'s reads (`LedgerReading`), and a ledger read without writing.

`read_ledger` is what `dp-release plan` checks a release against.

A SQLite file is opened read-only (``mode=ro``), a server ledger in a READ ONLY
transaction: no schema is created or migrated, no lease is taken, and a missing
ledger is a `LedgerError` (only a run creates a ledger).
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from dataclasses import dataclass

from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.ledger import postgres_backend, sqlite_backend
from dp_pipeline.release.ledger.budget import (
    LedgerError,
    Spend,
    compose_accountants,
    left_text,
    measure_spend,
)
from dp_pipeline.release.ledger.integrity import verify_population
from dp_pipeline.release.ledger.records import LedgerEntry, entry_from_row
from dp_pipeline.release.ledger.schema import ADDED_COLUMNS
from dp_pipeline.release.ledger.verification import RowsCheck, check_rows
from dp_pipeline.release.ledger_location import LedgerLocation, ledger_location

__all__ = ["LedgerReading", "LedgerView", "read_ledger"]


@dataclass(frozen=True)
class LedgerView:
    """What a ledger records about one population and one release id, read without writing.

    ``cap`` is the population's recorded cap (None: no release of it yet); ``states``
    the accountant states of its committed and reserved releases other than
    ``release_id`` (what `Ledger.reserve` composes); ``existing`` the row of
    ``release_id`` (any population) as a dict, columns of older ledgers as None;
    ``rows`` whether those rows were verified under the ledger's key (`check_rows`).
    """

    path: str  # the location, credentials masked
    cap: dict | None
    states: list[dict]
    committed: int
    reserved: int
    existing: dict | None
    rows: RowsCheck | None = None


def read_ledger(
    location: str | os.PathLike[str] | LedgerLocation,
    population: str,
    release_id: str,
    key: MasterKey | None = None,
) -> LedgerView:
    """Read ``population`` and ``release_id`` from the ledger at ``location``, changing nothing.

    A SQLite file is opened read-only (``mode=ro``), a server ledger in a READ ONLY
    transaction: no schema is created or migrated, no lease is taken, and a missing
    ledger is a `LedgerError` (only a run creates a ledger). With the ledger's ``key`` the
    population's rows are verified first (`LedgerTamperedError` if edited by hand); without
    it the view says they are unverified.
    """
    location = ledger_location(location)
    shown = location.shown

    def view(connection, has_meta: bool = True) -> tuple:
        populations = [population]
        if existing_population := _population_of(connection, release_id):
            populations.append(existing_population)
        rows = check_rows(connection, key, dict.fromkeys(populations), shown, has_meta=has_meta)
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
        return row, others, existing, rows

    if location.kind == "postgresql":
        psycopg, connection = postgres_backend.open_read_only(location)
        try:
            has_meta = connection.execute("SELECT to_regclass('ledger_meta') AS meta").fetchone()[
                "meta"
            ]
            row, others, existing, rows = view(connection, has_meta is not None)
        except psycopg.Error as error:
            raise LedgerError(f"ledger {shown!r} cannot be read as a ledger: {error}") from None
        finally:
            connection.raw.close()
    else:
        connection = sqlite_backend.open_read_only(location)
        try:
            with closing(connection):
                has_meta = sqlite_backend.schema_version(connection) >= 2
                row, others, existing, rows = view(connection, has_meta)
        except sqlite3.Error as error:
            raise LedgerError(f"ledger {shown!r} cannot be read as a ledger: {error}") from None
    if existing is not None:
        existing = {**dict.fromkeys(ADDED_COLUMNS), **dict(existing)}
    return LedgerView(
        shown,
        None if row is None else json.loads(row["cap"]),
        [json.loads(r["accountant"]) for r in others],
        sum(r["status"] == "committed" for r in others),
        sum(r["status"] == "reserved" for r in others),
        existing,
        rows,
    )


def _population_of(connection, release_id: str) -> str | None:
    """The population ``release_id`` is recorded under (None: not recorded)."""
    row = connection.execute(
        "SELECT population FROM releases WHERE release_id = ?", (release_id,)
    ).fetchone()
    return None if row is None else row["population"]


class LedgerReading:
    """The reads of `dp_pipeline.release.ledger.store.Ledger` (a mixin: it uses the
    ledger's ``_backend``, ``key`` and ``location``). Reads change nothing."""

    def _read(self, query: str, parameters: tuple = (), *, one: bool = False):
        """The rows of ``query`` (``one``: the first, or None), in a read transaction."""

        def read(connection):
            cursor = connection.execute(query, parameters)
            return cursor.fetchone() if one else cursor.fetchall()

        return self._backend.read(read, action="reading the ledger")

    def entry(self, release_id: str) -> LedgerEntry | None:
        row = self._read("SELECT * FROM releases WHERE release_id = ?", (release_id,), one=True)
        return None if row is None else entry_from_row(row)

    def history(self, population: str | None = None) -> list[LedgerEntry]:
        """Every release (optionally of one population), oldest first."""
        query = "SELECT * FROM releases"
        parameters: tuple = ()
        if population is not None:
            query += " WHERE population = ?"
            parameters = (population,)
        query += f" ORDER BY {self._backend.order}"
        return [entry_from_row(row) for row in self._read(query, parameters)]

    def populations(self) -> dict[str, dict]:
        """Each population's cap (exact strings)."""
        rows = self._read("SELECT name, cap FROM populations ORDER BY name")
        return {row["name"]: json.loads(row["cap"]) for row in rows}

    def key_fingerprint(self) -> str | None:
        """The public fingerprint of the master key the ledger is bound to (None: not yet)."""
        return self.meta("key_fingerprint")

    def meta(self, name: str) -> str | None:
        """A ``ledger_meta`` value ("key_fingerprint", "ledger_id", ...), None if absent."""
        row = self._read("SELECT value FROM ledger_meta WHERE name = ?", (name,), one=True)
        return None if row is None else row["value"]

    def server_identity(self) -> str | None:
        """Where a server ledger is, as the server itself says: its cluster's system
        identifier (drawn by ``initdb``) and the database's name; None for SQLite. A
        dump restored into another cluster or database has another."""
        if self.location.kind != "postgresql":
            return None
        row = self._read(
            "SELECT system_identifier::text AS cluster, current_database() AS name "
            "FROM pg_control_system()",
            one=True,
        )
        return f"cluster {row['cluster']} database {row['name']}"

    def spent(self, population: str) -> tuple[Spend | None, str]:
        """The population's composed spend (committed + reserved) and what is left of its cap."""
        cap = self.populations().get(population)
        if cap is None:
            raise LedgerError(f"population {population!r} is not in the ledger {self.location}")
        if self.key is not None:  # summed only once its rows are checked under the key
            self._backend.read(
                lambda c: verify_population(c, self.key, population, self.location.shown),
                action="checking the ledger",
            )
        states = [e.accountant for e in self.history(population) if e.status != "aborted"]
        spend = measure_spend(compose_accountants(states), cap) if states else None
        return spend, left_text(spend, cap)
