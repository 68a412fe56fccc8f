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
import socket
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.release.identity import ReleaseIdentity

__all__ = [
    "BudgetExceededError",
    "Ledger",
    "LedgerEntry",
    "LedgerError",
    "ReleaseIdReuseError",
    "Reservation",
    "accountant_type",
    "compose_accountants",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS populations (
    name TEXT PRIMARY KEY,
    cap TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS releases (
    release_id TEXT PRIMARY KEY,
    population TEXT NOT NULL REFERENCES populations(name),
    status TEXT NOT NULL CHECK (status IN ('reserved', 'committed', 'aborted')),
    fingerprint TEXT NOT NULL,
    accountant TEXT NOT NULL,
    guarantee TEXT NOT NULL,
    cumulative TEXT NOT NULL,
    reserved_at TEXT NOT NULL,
    finished_at TEXT,
    owner TEXT NOT NULL,
    output TEXT
);
CREATE INDEX IF NOT EXISTS releases_population ON releases(population);
"""
# Columns added after the first schema; `Ledger` adds them to older ledger files.
_ADDED_COLUMNS = {"identity": "TEXT", "published_at": "TEXT"}


class LedgerError(ValueError):
    """A release the ledger refuses (the message says why and what to do)."""


class BudgetExceededError(LedgerError):
    """The release would push its population's cumulative guarantee above the cap."""


class ReleaseIdReuseError(LedgerError):
    """A release id was already used on other data or with another plan."""


def accountant_type():
    """The accountant class, `dp_pipeline.accounting.PrivacyAccountant`."""
    return PrivacyAccountant


def compose_accountants(states: Iterable[dict]):
    """One accountant holding every event of the given ``to_dict()`` states."""
    kind = accountant_type()
    combined = kind()
    for state in states:
        for event in kind.from_dict(state).events:
            combined.add(event.mechanism, sensitivity=event.sensitivity, count=event.count)
    return combined


def _cap_dict(cap) -> dict[str, str | None]:
    """A cap (any object with rho / epsilon / delta attributes) as exact strings."""
    values = {name: getattr(cap, name, None) for name in ("rho", "epsilon", "delta")}
    if values["rho"] is None and values["epsilon"] is None:
        raise LedgerError("a population cap needs rho, or epsilon with delta")
    return {k: None if v is None else str(Fraction(v)) for k, v in values.items()}


def _describe_cap(cap: dict) -> str:
    if cap["rho"] is not None:
        return f"rho <= {cap['rho']}"
    return f"(epsilon={cap['epsilon']}, delta={cap['delta']})"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Spend:
    """A composed guarantee measured against a cap (upper bounds)."""

    rho: Fraction | None
    epsilon: float | None  # at the cap's delta (upper bound), if the cap is (ε, δ)
    delta: float | None  # at the cap's epsilon (upper bound), if the cap is (ε, δ)
    method: str

    def to_dict(self) -> dict:
        return {
            "rho": None if self.rho is None else str(self.rho),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "method": self.method,
        }


def _measure(accountant, cap: dict) -> Spend:
    rho = None
    try:
        rho = Fraction(accountant.rho())
    except (TypeError, ValueError, ArithmeticError):
        rho = None  # a mechanism without a finite zCDP bound
    if cap["rho"] is not None:
        return Spend(rho, None, None, "zcdp")
    epsilon_cap, delta_cap = Fraction(cap["epsilon"]), Fraction(cap["delta"])
    if delta_cap > 0:
        epsilon_bound = accountant.epsilon(delta_cap)
        epsilon, method = float(epsilon_bound.upper), epsilon_bound.method
    else:
        epsilon, method = None, ""
    delta_bound = accountant.delta(epsilon_cap)
    return Spend(rho, epsilon, float(delta_bound.upper), method or delta_bound.method)


def _within(spend: Spend, cap: dict) -> bool:
    if cap["rho"] is not None:
        return spend.rho is not None and spend.rho <= Fraction(cap["rho"])
    return spend.delta is not None and Fraction(spend.delta) <= Fraction(cap["delta"])


def _left(spend: Spend | None, cap: dict) -> str:
    """How much of the cap is left after ``spend`` (None: nothing spent yet)."""
    if cap["rho"] is not None:
        used = Fraction(0) if spend is None or spend.rho is None else spend.rho
        left = Fraction(cap["rho"]) - used
        return f"rho {float(used):.6g} of {cap['rho']} spent, {float(left):.6g} left"
    if spend is None:
        return f"nothing spent, the whole cap {_describe_cap(cap)} is left"
    parts = []
    if spend.epsilon is not None:
        left = float(Fraction(cap["epsilon"])) - spend.epsilon
        parts.append(
            f"epsilon {spend.epsilon:.6g} of {float(Fraction(cap['epsilon'])):.6g} spent at "
            f"delta={float(Fraction(cap['delta'])):.3g}, {max(left, 0.0):.6g} left"
        )
    parts.append(f"delta at epsilon={float(Fraction(cap['epsilon'])):.6g} is {spend.delta:.3g}")
    return "; ".join(parts)


@dataclass(frozen=True)
class Reservation:
    """The outcome of `Ledger.reserve`.

    ``outcome`` is "reserved" (new spend recorded), "resumed" (a stale
    reservation of the same id, data and plan is taken over, no new spend) or
    "already_committed" (same id, data and plan: re-emit without new spend).
    """

    release_id: str
    population: str
    outcome: str
    guarantee: dict
    cumulative: dict
    cap: dict
    reserved_at: str
    remaining: str


@dataclass(frozen=True)
class LedgerEntry:
    release_id: str
    population: str
    status: str
    fingerprint: str
    guarantee: dict
    cumulative: dict
    reserved_at: str
    finished_at: str | None
    owner: str
    output: str | None
    accountant: dict
    identity: dict | None = None
    published_at: str | None = None


class Ledger:
    """A SQLite budget ledger at ``path`` (created on first use, with its parent folder)."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 120.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._timeout = timeout
        with closing(self._connect()) as connection:
            connection.executescript(_SCHEMA)
            present = {row["name"] for row in connection.execute("PRAGMA table_info(releases)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in present:
                    connection.execute(f"ALTER TABLE releases ADD COLUMN {column} {kind}")

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
        connection = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA foreign_keys = ON")
        return connection

    def _transaction(self):
        return _ImmediateTransaction(self._connect())

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
        cap_state = _cap_dict(cap)
        state = accountant.to_dict()
        if identity is None:
            identity = ReleaseIdentity.of_parts(
                release_id, {"planned mechanisms": state, "input data": fingerprint}
            )
        if not isinstance(identity, ReleaseIdentity) or identity.release_id != release_id:
            raise LedgerError(f"release {release_id!r}: reserve needs the release's own identity")
        state_text = _canonical(state)
        identity_text = _canonical(identity.to_dict())
        with self._transaction() as connection:
            row = connection.execute(
                "SELECT cap FROM populations WHERE name = ?", (population,)
            ).fetchone()
            if row is None:
                connection.execute(
                    "INSERT INTO populations (name, cap, created_at) VALUES (?, ?, ?)",
                    (population, _canonical(cap_state), _now()),
                )
            elif json.loads(row["cap"]) != cap_state:
                raise LedgerError(
                    f"population {population!r}: the spec's cap {_describe_cap(cap_state)} "
                    f"differs from the ledger's cap {_describe_cap(json.loads(row['cap']))}; "
                    "a population's cap cannot change once releases are recorded"
                )
            existing = connection.execute(
                "SELECT * FROM releases WHERE release_id = ?", (release_id,)
            ).fetchone()
            if existing is not None:
                resumed = _check_reuse(
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
                _measure(compose_accountants(previous_states), cap_state)
                if previous_states
                else None
            )
            cumulative = _measure(compose_accountants([*previous_states, state]), cap_state)
            if not _within(cumulative, cap_state):
                alone = _measure(compose_accountants([state]), cap_state)
                raise BudgetExceededError(
                    f"release {release_id!r} refused: population {population!r} would exceed "
                    f"its cap {_describe_cap(cap_state)} "
                    f"({len(previous_states)} earlier release(s) + this one: "
                    f"{_spend_text(cumulative)}; this release alone: {_spend_text(alone)}). "
                    f"Left before this release: {_left(before, cap_state)}. "
                    "Nothing was read or written."
                )
            guarantee = _measure(compose_accountants([state]), cap_state).to_dict()
            reserved_at = _now()
            values = (
                population,
                "reserved",
                fingerprint,
                state_text,
                _canonical(guarantee),
                _canonical(cumulative.to_dict()),
                reserved_at,
                None,
                _owner(),
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
                _left(cumulative, cap_state),
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
                (_now(), release_id),
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
                (status, _now(), output, release_id),
            )

    # ------------------------------------------------------------------ read

    def entry(self, release_id: str) -> LedgerEntry | None:
        with closing(self._connect()) as connection:
            row = connection.execute(
                "SELECT * FROM releases WHERE release_id = ?", (release_id,)
            ).fetchone()
        return None if row is None else _entry(row)

    def history(self, population: str | None = None) -> list[LedgerEntry]:
        """Every release (optionally of one population), oldest first."""
        query = "SELECT * FROM releases"
        parameters: tuple = ()
        if population is not None:
            query += " WHERE population = ?"
            parameters = (population,)
        with closing(self._connect()) as connection:
            rows = connection.execute(query + " ORDER BY rowid", parameters).fetchall()
        return [_entry(row) for row in rows]

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
        spend = _measure(compose_accountants(states), cap) if states else None
        return spend, _left(spend, cap)


def _check_reuse(
    existing, population, fingerprint, state_text, identity, cap_state
) -> Reservation | None:
    release_id = existing["release_id"]
    if existing["population"] != population:
        raise ReleaseIdReuseError(
            f"release id {release_id!r} was already used for population "
            f"{existing['population']!r}; release ids are single-use, choose a new one"
        )
    if existing["status"] == "aborted":
        return None  # nothing was published under an aborted id: reserve it afresh
    if existing["identity"] is None:
        raise ReleaseIdReuseError(
            f"release id {release_id!r} is {existing['status']} in a ledger entry that "
            "records no release digest, so this run cannot be proven to be the same "
            "release; use a new release id"
        )
    try:
        recorded = ReleaseIdentity.from_dict(json.loads(existing["identity"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ReleaseIdReuseError(
            f"release id {release_id!r}: the ledger records a corrupt identity for it (its "
            "parts do not match its digest), so no run can be proven to be the same release; "
            "use a new release id and check who can write the ledger"
        ) from None
    if recorded.digest != identity.digest:
        differences = "; ".join(recorded.differences(identity))
        raise ReleaseIdReuseError(
            f"release id {release_id!r} is {existing['status']} with another spec, input or "
            f"key; these parts differ: {differences}. The same release id must always "
            "publish the same release (other noise on the same data, or the same noise on "
            "other data, reveals the exact values). Use a new release id."
        )
    if existing["fingerprint"] != fingerprint:
        raise ReleaseIdReuseError(
            f"release id {release_id!r} is {existing['status']} on different input data "
            "(fingerprint mismatch); re-using its noise on other data would reveal the "
            "difference between the two inputs. Use a new release id."
        )
    if existing["accountant"] != state_text:
        raise ReleaseIdReuseError(
            f"release id {release_id!r} is {existing['status']} with a different plan "
            "(mechanisms or noise scales changed); drawing the same noise streams at a "
            "different scale is a new release. Use a new release id."
        )
    outcome = "already_committed" if existing["status"] == "committed" else "resumed"
    return Reservation(
        release_id,
        population,
        outcome,
        json.loads(existing["guarantee"]),
        json.loads(existing["cumulative"]),
        cap_state,
        existing["reserved_at"],
        "unchanged (no new spend)",
    )


def _spend_text(spend: Spend) -> str:
    if spend.epsilon is None and spend.delta is None:
        return f"rho {float(spend.rho):.6g}"
    text = f"delta {spend.delta:.3g}"
    if spend.epsilon is not None:
        text = f"epsilon {spend.epsilon:.6g}, " + text
    return text


def _entry(row: sqlite3.Row) -> LedgerEntry:
    return LedgerEntry(
        release_id=row["release_id"],
        population=row["population"],
        status=row["status"],
        fingerprint=row["fingerprint"],
        guarantee=json.loads(row["guarantee"]),
        cumulative=json.loads(row["cumulative"]),
        reserved_at=row["reserved_at"],
        finished_at=row["finished_at"],
        owner=row["owner"],
        output=row["output"],
        accountant=json.loads(row["accountant"]),
        identity=None if row["identity"] is None else json.loads(row["identity"]),
        published_at=row["published_at"],
    )


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class _ImmediateTransaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception), then close."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def __enter__(self) -> sqlite3.Connection:
        self.connection.execute("BEGIN IMMEDIATE")
        return self.connection

    def __exit__(self, kind, value, traceback) -> None:
        try:
            self.connection.execute("ROLLBACK" if kind is not None else "COMMIT")
        finally:
            self.connection.close()
