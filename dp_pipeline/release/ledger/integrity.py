"""Authenticated ledger rows: a hand edit that could shrink a population's spend is refused.

Guarantee. Once a ledger is *sealed* (its first write by a `Ledger` holding the master
key the ledger is bound to), every row of ``releases`` carries ``mac``: an HMAC-SHA256,
under a secret derived from the master key (`MasterKey.hmac_sha256`, label
`ROW_LABEL`), of all of the row's other columns (spend, accountant, guarantee, state,
status, input fingerprint, override, identity, output, manifest, ...). Each population
carries a head (``ledger_meta`` row ``head/<population>``): an HMAC of its name, its cap
and the sorted (release id, mac) of its rows, so that a row removed or added by hand, or
a raised cap, is detected too. Whoever can write the ledger's file or database but does
not hold the key cannot produce a valid code, so any such edit is refused whenever the
ledger sums the population's spend (`Ledger.reserve`, every move of a reservation,
`Ledger.spent` under the key) with a `LedgerTamperedError` naming the release.

A ledger written before rows were authenticated holds rows without a code. They are
adopted (sealed as they are) by the first keyed write, because nothing authenticated
existed before it; from then on the ``rows_sealed`` marker makes a row without a code
an edit like any other. A ledger that is not bound to a key (used without one, as the
library's ledger tests do) is never sealed: nothing could authenticate it.
"""

from __future__ import annotations

import hmac
import json

from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.ledger.budget import LedgerError

__all__ = [
    "HEAD_PREFIX",
    "ROW_LABEL",
    "SEALED",
    "LedgerTamperedError",
    "seal",
    "verify_population",
]

ROW_LABEL = b"dp_pipeline/ledger-row/v1"
HEAD_LABEL = b"dp_pipeline/ledger-population/v1"
SEALED = "rows_sealed"  # ledger_meta: present once the rows are authenticated
HEAD_PREFIX = "head/"
_UNCOVERED = ("mac", "seq")  # the code itself; PostgreSQL's insertion order


class LedgerTamperedError(LedgerError):
    """A ledger row or population changed outside dp_pipeline (its code does not match)."""


def _canonical(data) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def row_mac(key: MasterKey, row) -> str:
    """The code of a ``releases`` row (``sqlite3.Row`` or dict): every column but the code."""
    # .keys(): iterating a sqlite3.Row gives its values, not its column names.
    names = row.keys()
    content = {name: row[name] for name in names if name not in _UNCOVERED}
    return key.hmac_sha256(ROW_LABEL, _canonical(content)).hex()


def _head(key: MasterKey, population: str, cap: str | None, rows) -> str:
    codes = sorted((row["release_id"], row["mac"]) for row in rows)
    return key.hmac_sha256(HEAD_LABEL, _canonical([population, cap, codes])).hex()


def _meta(connection, name: str) -> str | None:
    row = connection.execute("SELECT value FROM ledger_meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else row["value"]


def _set_meta(connection, name: str, value: str) -> None:
    # Both backends accept this upsert (SQLite 3.24+, PostgreSQL 9.5+).
    connection.execute(
        "INSERT INTO ledger_meta (name, value) VALUES (?, ?) "
        "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        (name, value),
    )


def _fix(shown: str) -> str:
    return (
        f"so the population's spend in the ledger {shown!r} cannot be trusted. Restore the "
        "ledger from a backup taken before the edit (or undo the edit); nothing was read "
        "or reserved"
    )


def verify_population(connection, key: MasterKey | None, population: str, shown: str) -> None:
    """Refuse (`LedgerTamperedError`) a ledger sealed under ``key`` whose rows of
    ``population`` or whose cap of it do not match their codes. Without the key nothing
    can be checked (and `seal` refuses the write's changes)."""
    if key is None or _meta(connection, SEALED) is None:
        return
    if _meta(connection, "key_fingerprint") != key.fingerprint:
        return  # another key: the ledger's key check refuses it, naming both fingerprints
    rows = connection.execute(
        "SELECT * FROM releases WHERE population = ?", (population,)
    ).fetchall()
    for row in rows:
        code = row["mac"]
        if code is None or not hmac.compare_digest(code, row_mac(key, row)):
            raise LedgerTamperedError(
                f"ledger row of release {row['release_id']!r} (population {population!r}) "
                "does not match its authentication code: its spend, accountant, state or "
                "input was changed outside dp_pipeline, " + _fix(shown)
            )
    cap = connection.execute("SELECT cap FROM populations WHERE name = ?", (population,)).fetchone()
    head = _meta(connection, HEAD_PREFIX + population)
    if cap is None and not rows and head is None:
        return  # a population the ledger does not know yet
    expected = _head(key, population, None if cap is None else cap["cap"], rows)
    if head is None or not hmac.compare_digest(head, expected):
        raise LedgerTamperedError(
            f"ledger population {population!r}: its releases or its cap do not match their "
            "authentication code: a release row was removed or added, or the cap changed, "
            "outside dp_pipeline, " + _fix(shown)
        )


def seal(
    connection,
    key: MasterKey | None,
    release_id: str | None,
    population: str | None,
    shown: str,
) -> None:
    """After a write under ``key``: the code of ``release_id``'s row and ``population``'s head.

    Seals the whole ledger first if it is bound to ``key`` and not sealed yet (adopting
    its rows as they are). Does nothing without a key or on a ledger bound to no key or
    another key (whose write was refused before this). The caller verified the population
    (`verify_population`) at the start of the same transaction, so only this write's
    changes are sealed, never an earlier hand edit. A write without the key to a sealed
    ledger is refused (`LedgerError`, the transaction rolled back): it could not be
    sealed, and an unsealed row is what a hand edit looks like.
    """
    if key is None and _meta(connection, SEALED) is not None:
        raise LedgerError(
            f"ledger {shown!r} authenticates its rows under its master key (fingerprint "
            f"{_meta(connection, 'key_fingerprint')}); this change of it needs that key: "
            "give it (--key-file PATH or $DP_PIPELINE_MASTER_KEY; Ledger(..., key=...) in "
            "Python). Nothing was changed"
        )
    if key is None or _meta(connection, "key_fingerprint") != key.fingerprint:
        return
    if _meta(connection, SEALED) is None:
        for row in connection.execute("SELECT * FROM releases").fetchall():
            _seal_row(connection, key, row)
        names = [r["name"] for r in connection.execute("SELECT name FROM populations").fetchall()]
        for name in names:
            _seal_head(connection, key, name)
        _set_meta(connection, SEALED, "1")
        return
    if release_id is not None:
        row = connection.execute(
            "SELECT * FROM releases WHERE release_id = ?", (release_id,)
        ).fetchone()
        if row is not None:
            _seal_row(connection, key, row)
    if population is not None:
        _seal_head(connection, key, population)


def _seal_row(connection, key: MasterKey, row) -> None:
    connection.execute(
        "UPDATE releases SET mac = ? WHERE release_id = ?",
        (row_mac(key, row), row["release_id"]),
    )


def _seal_head(connection, key: MasterKey, population: str) -> None:
    rows = connection.execute(
        "SELECT release_id, mac FROM releases WHERE population = ?", (population,)
    ).fetchall()
    cap = connection.execute("SELECT cap FROM populations WHERE name = ?", (population,)).fetchone()
    _set_meta(
        connection,
        HEAD_PREFIX + population,
        _head(key, population, None if cap is None else cap["cap"], rows),
    )
