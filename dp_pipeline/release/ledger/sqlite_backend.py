"""The embedded ledger backend: one SQLite file (stdlib ``sqlite3``).

Every write is one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write
lock before reading, so two processes can never both see the same remaining
budget; a process killed inside it leaves nothing (SQLite rolls its journal
back). The run lease is an OS lock beside the file (`RunLease`).

A new ledger's folder is created owner-only (0700) and its file 0600. A file of
an older schema version is migrated in one transaction on opening; a newer one
is refused (`dp_pipeline.release.ledger.schema`).
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Callable
from contextlib import closing, suppress
from typing import TypeVar

from dp_pipeline.release.keys import private_folder
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.lease import RunLease, lease_path
from dp_pipeline.release.ledger.schema import (
    ADDED_COLUMNS,
    SCHEMA_VERSION,
    SQLITE_SCHEMA,
    newer_schema_text,
    statements,
)
from dp_pipeline.release.ledger_location import LedgerLocation

__all__ = ["SqliteBackend", "open_read_only", "schema_version"]

T = TypeVar("T")


def schema_version(connection: sqlite3.Connection) -> int:
    """0 for an empty file, 1 for a ledger before versions, else the recorded version."""
    tables = {
        row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    if "ledger_meta" in tables:
        row = connection.execute(
            "SELECT value FROM ledger_meta WHERE name = 'schema_version'"
        ).fetchone()
        if row is not None:
            return int(row[0])
    return 1 if "releases" in tables else 0


class SqliteBackend:
    """A ledger in the SQLite file ``location.path`` (created with its folder on first use)."""

    kind = "sqlite"
    order = "rowid"

    def __init__(self, location: LedgerLocation, timeout: float) -> None:
        self.location = location
        self.path = location.path
        self._timeout = timeout
        private_folder(self.path.parent)
        # A new ledger file is the owner's only (SQLite's journal files copy its mode).
        with suppress(FileExistsError):
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        with closing(self.connect()) as connection:
            version = schema_version(connection)
        if version != SCHEMA_VERSION:
            self._migrate()

    def connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
        connection = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA foreign_keys = ON")
        return connection

    def _migrate(self) -> None:
        """Create or upgrade the schema to `SCHEMA_VERSION` in one transaction."""
        shown = self.location.shown
        try:
            with closing(self.connect()) as connection:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    version = schema_version(connection)  # again, under the write lock
                    if version > SCHEMA_VERSION:
                        raise LedgerError(newer_schema_text(shown, version))
                    if version < SCHEMA_VERSION:
                        for statement in statements(SQLITE_SCHEMA):
                            if statement.startswith("CREATE INDEX"):
                                continue  # after the columns they index exist
                            connection.execute(statement)
                        present = {
                            row["name"] for row in connection.execute("PRAGMA table_info(releases)")
                        }
                        for column, kind in ADDED_COLUMNS.items():
                            if column not in present:
                                connection.execute(
                                    f"ALTER TABLE releases ADD COLUMN {column} {kind}"
                                )
                        for statement in statements(SQLITE_SCHEMA):
                            if statement.startswith("CREATE INDEX"):
                                connection.execute(statement)
                        connection.execute(
                            "INSERT OR REPLACE INTO ledger_meta (name, value) "
                            "VALUES ('schema_version', ?)",
                            (str(SCHEMA_VERSION),),
                        )
                        # A ledger's random id, drawn once: what a key's home records.
                        connection.execute(
                            "INSERT OR IGNORE INTO ledger_meta (name, value) "
                            "VALUES ('ledger_id', ?)",
                            (secrets.token_hex(16),),
                        )
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
        except sqlite3.Error as error:
            raise LedgerError(
                f"ledger {shown!r} needs its schema created or migrated to version "
                f"{SCHEMA_VERSION}, which failed ({error}); nothing was changed. Run "
                f"`dp-release ledger --ledger {shown}` as a user who can write the file "
                "to migrate it"
            ) from None

    def write(self, work: Callable[[sqlite3.Connection], T], *, action: str, lock=None) -> T:
        """``work(connection)`` in one ``BEGIN IMMEDIATE`` transaction (rolled back if it raises).

        ``lock`` (a population name) needs nothing here: the write lock is the whole file's.
        """
        with closing(self.connect()) as connection:
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = work(connection)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            return result

    def read(self, work: Callable[[sqlite3.Connection], T], *, action: str) -> T:
        """``work(connection)`` in one read transaction (one consistent snapshot)."""
        with closing(self.connect()) as connection:
            connection.execute("BEGIN")
            try:
                return work(connection)
            finally:
                connection.execute("ROLLBACK")

    def lease(self, release_id: str, action: str) -> RunLease:
        return RunLease(lease_path(self.path, release_id), release_id, action)

    def close(self) -> None:
        """Nothing stays open between transactions."""


def open_read_only(location: LedgerLocation) -> sqlite3.Connection:
    """The SQLite ledger at ``location`` opened read-only (``mode=ro``); never creates it."""
    path = location.path
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
        version = schema_version(connection)
    except sqlite3.Error as error:
        connection.close()
        raise LedgerError(f"ledger {str(path)!r} cannot be read as a ledger: {error}") from None
    if version > SCHEMA_VERSION:
        connection.close()
        raise LedgerError(newer_schema_text(location.shown, version))
    return connection
