"""What anchors a ledger's budget to the data and the key, checked inside its write transactions.

A ledger records the public fingerprint of the master key of its first keyed
reservation and refuses any other key (under another key the same input has another
fingerprint, so the input check could not recognise it). An input fingerprint, or
content digest (names excluded), already recorded under another population with the
same privacy unit is refused, naming that population, unless the reservation declares
that population shared (``shared_input_with``).

Guarantee: the same people are never charged to two budgets without the spec saying so.
"""

from __future__ import annotations

import json

from dp_pipeline.digest import digest_of
from dp_pipeline.errors import LedgerError
from dp_pipeline.release.keys import ENVIRONMENT_VARIABLE
from dp_pipeline.release.ledger.records import InputReuseError, canonical_json

__all__ = ["bind_key_fingerprint", "check_input"]


def bind_key_fingerprint(connection, key_fingerprint: str, shown: str) -> None:
    """Record the master key's fingerprint in the ledger ``shown`` if it has none, or check
    it: a ledger's budget is anchored to one key."""
    row = connection.execute(
        "SELECT value FROM ledger_meta WHERE name = 'key_fingerprint'"
    ).fetchone()
    recorded = None if row is None else row["value"]
    if recorded is None:
        # A ledger from before keys were recorded: its identities name their key.
        expected = digest_of(key_fingerprint)
        for other in connection.execute(
            "SELECT release_id, identity FROM releases WHERE identity IS NOT NULL"
        ).fetchall():
            part = json.loads(other["identity"]).get("parts", {}).get("master key")
            if part is not None and part != expected:
                raise LedgerError(_other_key_text(shown, key_fingerprint, other["release_id"]))
        connection.execute(
            "INSERT INTO ledger_meta (name, value) VALUES ('key_fingerprint', ?)",
            (key_fingerprint,),
        )
    elif recorded != key_fingerprint:
        raise LedgerError(_other_key_text(shown, key_fingerprint, None, recorded))


def _other_key_text(shown, fingerprint, release_id=None, recorded=None) -> str:
    what = (
        f"records the master key with fingerprint {recorded}"
        if recorded is not None
        else f"records release {release_id!r} made with another master key"
    )
    return (
        f"ledger {shown!r} {what}; this run's key has fingerprint "
        f"{fingerprint}. A ledger's budget is anchored to one key (under another key "
        "the same input has another fingerprint, so the ledger could not recognise an "
        f"input it already charged). Use the ledger's key (--key-file or "
        f"${ENVIRONMENT_VARIABLE}), or another ledger for another key. Nothing was read "
        "or written"
    )


def check_input(
    connection, release_id, population, inputs, identity, shared_input_with
) -> str | None:
    """Refuse an input recorded under another population with the same privacy unit:
    ``inputs`` is (named fingerprint, content digest or None); either one matching
    is the same input.

    Returns the override to record (JSON list of the populations declared
    shared that hold this input), or None.
    """
    unit = identity.parts.get("privacy unit")
    holders: dict[str, str] = {}
    for other in connection.execute(
        "SELECT release_id, population, identity FROM releases WHERE (fingerprint = ? "
        "OR content = ?) AND population != ? AND status != 'aborted' ORDER BY release_id",
        (*inputs, population),
    ).fetchall():
        recorded = None
        if other["identity"] is not None:
            recorded = json.loads(other["identity"]).get("parts", {}).get("privacy unit")
        # Unknown units (older rows, a ledger used without identities) count as the same.
        if unit is None or recorded is None or recorded == unit:
            holders.setdefault(other["population"], other["release_id"])
    undeclared = [name for name in holders if name not in shared_input_with]
    if undeclared:
        name = undeclared[0]
        refusal = InputReuseError(
            f"release {release_id!r} refused: its input is already recorded under "
            f"population {name!r} (release {holders[name]!r}) with the same privacy "
            f"unit. An input's people are one population: releasing it under "
            f"{population!r} too would spend a second budget on them. Release it under "
            f"population {name!r}, or, if the two populations are meant to share it "
            f"(each cap then covers only its own releases), declare it in the spec: "
            f'[population] shares_input_with = ["{name}"] (recorded in the ledger). '
            "Nothing was read or written"
        )
        refusal.holder = (name, holders[name])  # for a session's own words (record_input)
        raise refusal
    return canonical_json(sorted(holders)) if holders else None
