"""The server ledger backend: a PostgreSQL database, through psycopg 3 (the ``postgresql`` extra).

Same tables as SQLite (`dp_pipeline.release.ledger.schema`), same rules (they live in
`dp_pipeline.release.ledger.store`), and the same guarantees across hosts:

- **A reservation never lets concurrent runs exceed the cap.** Every write is one
  ``SERIALIZABLE`` transaction. A write of a population's releases (a reservation,
  which composes its spend, and every later move of one) first takes a session-level
  advisory lock on the population (before ``BEGIN``, so the transaction's snapshot is
  taken after the previous holder committed): runs of one population queue on the
  lock instead of failing serialization and retrying, and the serializable
  transaction still guards every other interleaving (other populations, the
  cross-population input check, the key binding). A serialization failure or
  deadlock is retried, at most `RETRIES` times, after a jittered exponential pause;
  nothing is committed by a failed attempt. A process that dies inside a transaction
  leaves nothing: the server rolls it back and frees its locks when the connection drops.
- **The run lease works across hosts.** A run's lease is a session-level advisory
  lock held on a connection of its own for the run's life; the server frees it when
  that connection ends, however the process ends, so "the lease is free" means "no
  run of this release id is connected". Each move of a reservation checks first that
  this connection is alive: a run that lost it fails closed (its reservation stays
  spent, and the same release id resumes it).
- **Credentials never shown.** Every message names the ledger by
  `LedgerLocation.shown` (password masked); errors from the server are reduced to
  what failed and its fix (unreachable, credentials refused, no such database, no
  rights on the ledger's tables: `dp_pipeline.release.ledger.server_errors`), with
  any password removed from libpq's own words.

psycopg is imported when a ``postgresql://`` ledger is opened, not before: the core
install without it gets a one-line error saying which extra to install.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.lease import LeaseHeldError
from dp_pipeline.release.ledger.records import owner
from dp_pipeline.release.ledger.schema import (
    ADDED_COLUMNS,
    POSTGRES_SCHEMA,
    SCHEMA_VERSION,
    newer_schema_text,
    statements,
)
from dp_pipeline.release.ledger.server_errors import (
    credentials_hint,
    detail,
    lost,
    no_privileges,
    psycopg_module,
    reason,
    server_error,
)
from dp_pipeline.release.ledger_location import LedgerLocation

__all__ = ["RETRIES", "PostgresBackend", "ServerLease", "advisory_key", "open_read_only"]

T = TypeVar("T")

RETRIES = 12  # serialization failures retried before the write is refused
_FIRST_PAUSE = 0.004  # seconds; doubled each retry, jittered, at most _LONGEST_PAUSE
_LONGEST_PAUSE = 0.25
_CONNECT_TIMEOUT = 10  # seconds, unless the URL or PGCONNECT_TIMEOUT says otherwise
_SCHEMA_LOCK = "schema"
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 60, "keepalives_interval": 10}


def advisory_key(kind: str, name: str) -> int:
    """The signed 64-bit advisory lock key of ``name`` in namespace ``kind``."""
    digest = hashlib.sha256(f"dp_pipeline/ledger/{kind}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class _Connection:
    """A psycopg connection spoken to like ``sqlite3``: ``?`` placeholders, rows by name."""

    def __init__(self, raw) -> None:
        self.raw = raw

    def execute(self, sql: str, parameters: tuple | list = ()):
        return self.raw.execute(sql.replace("%", "%%").replace("?", "%s"), tuple(parameters))


def _connect(location: LedgerLocation, application: str = "dp-release"):
    psycopg = psycopg_module()
    from_url = psycopg.conninfo.conninfo_to_dict(location.conninfo)
    options: dict[str, Any] = {"application_name": application}
    if "connect_timeout" not in from_url and not os.environ.get("PGCONNECT_TIMEOUT"):
        options["connect_timeout"] = _CONNECT_TIMEOUT
    # A lease's connection sits idle for the run's life: TCP keepalives keep firewalls
    # from dropping it (and notice a dead server within minutes), unless the URL says.
    for name, value in _KEEPALIVES.items():
        if name not in from_url:
            options[name] = value
    try:
        raw = psycopg.connect(
            location.conninfo,
            autocommit=True,
            row_factory=psycopg.rows.dict_row,
            **options,
        )
    except psycopg.Error as error:
        why = reason(error, location.conninfo)
        raise LedgerError(
            f"ledger {location.shown!r} cannot be opened: {why}{credentials_hint(why)}"
        ) from None
    return raw


def _schema_version(connection: _Connection) -> int:
    row = connection.execute("SELECT to_regclass('ledger_meta') AS meta").fetchone()
    if row["meta"] is None:
        row = connection.execute("SELECT to_regclass('releases') AS releases").fetchone()
        return 0 if row["releases"] is None else 1
    row = connection.execute(
        "SELECT value FROM ledger_meta WHERE name = 'schema_version'"
    ).fetchone()
    return 0 if row is None else int(row["value"])


class PostgresBackend:
    """A ledger in the PostgreSQL database of ``location`` (its tables created on first use).

    ``retries`` counts the serialization failures this backend retried (the benchmark
    reports it). ``lock_populations`` (True) takes the population's advisory lock around
    a reservation; without it concurrent reservations of one population rely on
    SERIALIZABLE alone and retry (bench/bench_ledger.py measures both).
    """

    kind = "postgresql"
    order = "seq"
    lock_populations = True

    def __init__(self, location: LedgerLocation, timeout: float) -> None:
        self.location = location
        self.path = None
        self._timeout = timeout
        self._psycopg = psycopg_module()
        self._connection: _Connection | None = None
        self._finalizer = None
        self.retries = 0
        connection = self._ready()
        try:
            version = _schema_version(connection)
        except (
            self._psycopg.OperationalError,
            self._psycopg.ProgrammingError,
        ) as error:
            raise server_error(location, "opening the ledger", error) from None
        if version != SCHEMA_VERSION:
            self._migrate(connection)

    # ------------------------------------------------------------------ connections

    def connect(self, application: str = "dp-release") -> _Connection:
        """A new autocommit connection (rows as dicts) with the ledger's lock timeout."""
        raw = _connect(self.location, application)
        try:
            raw.execute(f"SET lock_timeout = {int(self._timeout * 1000)}")
        except self._psycopg.Error as error:
            raw.close()
            raise lost(self.location, "opening the ledger", error) from None
        return _Connection(raw)

    def _ready(self) -> _Connection:
        """This backend's connection for transactions, reconnecting if it was lost."""
        if self._connection is not None and (
            self._connection.raw.closed or self._connection.raw.broken
        ):
            self.close()
        if self._connection is None:
            self._connection = self.connect()
            self._finalizer = weakref.finalize(self, self._connection.raw.close)
        return self._connection

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._connection = None
        self._finalizer = None

    # ------------------------------------------------------------------ schema

    def _migrate(self, connection: _Connection) -> None:
        """Create or upgrade the schema to `SCHEMA_VERSION` in one transaction."""
        psycopg = self._psycopg
        shown = self.location.shown
        try:
            connection.execute("BEGIN")
            try:
                # One creator at a time (CREATE ... IF NOT EXISTS races on the catalogs).
                connection.execute(
                    "SELECT pg_advisory_xact_lock(?)", (advisory_key(_SCHEMA_LOCK, ""),)
                )
                version = _schema_version(connection)
                if version > SCHEMA_VERSION:
                    raise LedgerError(newer_schema_text(shown, version))
                if version == 1:  # no PostgreSQL ledger was ever written without versions
                    raise LedgerError(
                        f"ledger {shown!r} holds a 'releases' table but no ledger version: it "
                        "is not a dp_pipeline ledger, or was made by hand; use another database"
                    )
                if version < SCHEMA_VERSION:
                    script = statements(POSTGRES_SCHEMA)
                    for statement in script:
                        if not statement.startswith("CREATE INDEX"):
                            connection.execute(statement)
                    for column, kind in ADDED_COLUMNS.items():  # columns of later versions
                        connection.execute(
                            f"ALTER TABLE releases ADD COLUMN IF NOT EXISTS {column} {kind}"
                        )
                    for statement in script:  # after the columns they index exist
                        if statement.startswith("CREATE INDEX"):
                            connection.execute(statement)
                    connection.execute(
                        "INSERT INTO ledger_meta (name, value) VALUES ('schema_version', ?) "
                        "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                        (str(SCHEMA_VERSION),),
                    )
                    # A ledger's random id, drawn once: what a key's home records.
                    connection.execute(
                        "INSERT INTO ledger_meta (name, value) VALUES ('ledger_id', ?) "
                        "ON CONFLICT (name) DO NOTHING",
                        (secrets.token_hex(16),),
                    )
            except BaseException:
                if not connection.raw.broken:
                    connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        except psycopg.errors.InsufficientPrivilege:
            raise LedgerError(
                f"ledger {shown!r}: this user may not create the ledger's tables there; "
                f"have the database's owner run `dp-release ledger --ledger {shown}` once, "
                "which creates or migrates them, and grant this user SELECT, INSERT and "
                "UPDATE on them"
            ) from None
        except psycopg.OperationalError as error:
            raise lost(self.location, "creating the ledger's tables", error) from None

    # ------------------------------------------------------------------ transactions

    def write(self, work: Callable[[_Connection], T], *, action: str, lock: str | None = None) -> T:
        """``work(connection)`` in one SERIALIZABLE transaction, retried on serialization failure.

        ``lock`` (a population name): hold that population's advisory lock around the
        transaction, so that writers of one population queue instead of retrying.
        ``work`` may run more than once (each attempt on a fresh snapshot, nothing
        of a failed attempt committed); its own errors end the write at once.
        """
        psycopg = self._psycopg
        retriable = (
            psycopg.errors.SerializationFailure,
            psycopg.errors.DeadlockDetected,
            psycopg.errors.UniqueViolation,
        )
        attempt = 0
        while True:
            connection = self._ready()
            try:
                return self._attempt(connection, work, lock)
            except retriable:
                if attempt == RETRIES:
                    raise LedgerError(
                        f"ledger {self.location.shown!r}: {action} failed {RETRIES + 1} times "
                        "on conflicting concurrent writes; nothing was recorded by it; try "
                        "again"
                    ) from None
            except psycopg.errors.InsufficientPrivilege as error:
                raise no_privileges(self.location, action, error) from None
            except psycopg.errors.LockNotAvailable:
                raise LedgerError(
                    f"ledger {self.location.shown!r}: {action} waited more than "
                    f"{self._timeout:g} s for another run's write; nothing was recorded by it; "
                    "try again"
                ) from None
            except (psycopg.OperationalError, psycopg.InterfaceError) as error:
                broken = connection.raw.broken or connection.raw.closed
                self.close()
                if broken:
                    raise lost(self.location, action, error) from None
                raise LedgerError(
                    f"ledger {self.location.shown!r}: {action} failed on the server "
                    f"({detail(error, self.location.conninfo)}); nothing was recorded by it"
                ) from None
            self.retries += 1
            pause = min(_LONGEST_PAUSE, _FIRST_PAUSE * 2**attempt)
            time.sleep(pause * (0.5 + secrets.randbelow(1000) / 2000))
            attempt += 1

    def _attempt(self, connection: _Connection, work, lock: str | None):
        key = None
        if lock is not None and self.lock_populations:
            key = advisory_key("population", lock)
        if key is not None:
            connection.execute("SELECT pg_advisory_lock(?)", (key,))
        try:
            connection.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            try:
                result = work(connection)
            except BaseException:
                if not connection.raw.broken:
                    connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            return result
        finally:
            if key is not None and not connection.raw.broken:
                connection.execute("SELECT pg_advisory_unlock(?)", (key,))

    def read(self, work: Callable[[_Connection], T], *, action: str) -> T:
        """``work(connection)`` on one consistent snapshot (REPEATABLE READ, READ ONLY)."""
        psycopg = self._psycopg
        connection = self._ready()
        try:
            connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                return work(connection)
            finally:
                if not connection.raw.broken:
                    connection.execute("ROLLBACK")
        except psycopg.errors.InsufficientPrivilege as error:
            raise no_privileges(self.location, action, error) from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            self.close()
            raise lost(self.location, action, error) from None

    def lease(self, release_id: str, action: str) -> ServerLease:
        return ServerLease(self, release_id, action)


class ServerLease:
    """A release id's lease on a server ledger: an advisory lock on a connection of its own.

    ``with ServerLease(...)`` holds it or raises `LeaseHeldError` (non-blocking). The
    holder's connection is named ``dp-release lease host:pid`` so that a refused
    process can say who holds it.
    """

    def __init__(self, backend: PostgresBackend, release_id: str, action: str) -> None:
        self.backend = backend
        self.release_id = release_id
        self.action = action
        self.key = advisory_key("lease", release_id)
        self._connection: _Connection | None = None

    def __enter__(self) -> ServerLease:
        psycopg = self.backend._psycopg
        connection = self.backend.connect(application=f"dp-release lease {owner()}")
        try:
            row = connection.execute("SELECT pg_try_advisory_lock(?) AS held", (self.key,))
            if not row.fetchone()["held"]:
                holder = self._holder(connection)
                raise LeaseHeldError(
                    f"release id {self.release_id!r}: {self.action} refused: process "
                    f"{holder or '(unknown)'} holds the lease of this release id in ledger "
                    f"{self.backend.location.shown!r}, so a run of it may be alive. Wait for "
                    "that run to end, or stop it, then try again"
                )
        except psycopg.Error as error:
            connection.raw.close()
            raise lost(self.backend.location, f"taking the lease ({self.action})", error) from None
        except BaseException:
            connection.raw.close()
            raise
        self._connection = connection
        return self

    def _holder(self, connection: _Connection) -> str | None:
        classid, objid = (self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF
        row = connection.execute(
            "SELECT a.application_name AS name FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid::bigint = ? AND l.objid::bigint = ? "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (classid, objid),
        ).fetchone()
        name = None if row is None else row["name"]
        return name.removeprefix("dp-release lease ") if name else None

    def check(self) -> None:
        """Raise `LedgerError` unless this lease's connection (and so the lock) is alive."""
        psycopg = self.backend._psycopg
        if self._connection is None:
            raise LedgerError(f"release id {self.release_id!r}: the lease is not held")
        try:
            self._connection.execute("SELECT 1")
        except psycopg.Error as error:
            raise lost(
                self.backend.location, f"holding the lease of {self.release_id!r}", error
            ) from None

    def __exit__(self, kind, value, traceback) -> None:
        if self._connection is not None:
            self._connection.raw.close()  # the server frees the lock with the session
            self._connection = None


def open_read_only(location: LedgerLocation) -> tuple[Any, _Connection]:
    """A connection to the server ledger at ``location`` for reading, in a READ ONLY
    REPEATABLE READ transaction; never creates or migrates its tables."""
    psycopg = psycopg_module()
    connection = _Connection(_connect(location))
    try:
        version = _schema_version(connection)
        if version == 0:
            raise LedgerError(
                f"ledger {location.shown!r}: no ledger in that database; a ledger is created "
                "by the first `dp-release run`, never by `plan` (check --ledger or run.ledger)"
            )
        if version > SCHEMA_VERSION:
            raise LedgerError(newer_schema_text(location.shown, version))
        connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    except psycopg.Error as error:
        connection.raw.close()
        raise server_error(location, "reading the ledger", error) from None
    except BaseException:
        connection.raw.close()
        raise
    return psycopg, connection
