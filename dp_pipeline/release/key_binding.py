"""A master key is bound to one ledger, both ways: the cap cannot be restarted elsewhere.

A ledger records the public fingerprint of the key of its first keyed reservation and
refuses any other key (`dp_pipeline.release.ledger.store`). This module records the
other direction: the dp_pipeline home (``$DP_PIPELINE_HOME``, else ``~/.dp_pipeline``)
keeps ``bindings.json`` (mode 0600 in the 0700 home), mapping each key's public
fingerprint (never the key) to the canonical identity of the one ledger it is bound to:

- a SQLite ledger: its resolved path and the random ``ledger_id`` drawn inside the file
  when it was created (a copy of the file elsewhere has the same id at another path; a
  new file at the same path has another id: both are another ledger);
- a PostgreSQL ledger: its server, port and database (never the user or a password)
  and its ``ledger_id``.

Guarantee. A run or `Session` whose key is bound to one ledger and names another
(``--ledger other.sqlite``, a spec's ``run.ledger``, a moved or replaced file) is
refused before any engine starts or anything is read or reserved, with a
`KeyBindingError` naming the bound ledger and the command that moves the binding on
purpose (``dp-release key --bind LEDGER``, which records the move in the old ledger,
the new one and the home: `move_binding`). Every key is bound this way, whether it
came from the home's ``master.key``, ``--key-file`` or ``$DP_PIPELINE_MASTER_KEY``: a
key given explicitly (audits, tests) binds to its first ledger too.

What is not detectable here: a second home (another ``$DP_PIPELINE_HOME``) with a
*new* key and a new ledger. The new key's fingerprint is unknown to every other home,
and nothing ties a person's data to a key, so such a run cannot be told from a first
run; the operator's configuration decides the home (the spec's author cannot set it).
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.keys import private_folder
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_location import LedgerLocation, ledger_location
from dp_pipeline.release.locations import dp_pipeline_home

__all__ = [
    "BINDINGS_NAME",
    "KeyBindingError",
    "bind_key",
    "check_key_place",
    "ledger_place",
    "move_binding",
]

BINDINGS_NAME = "bindings.json"


class KeyBindingError(LedgerError):
    """A master key used with a ledger other than the one it is bound to."""


def ledger_place(location: LedgerLocation) -> str:
    """Where a ledger is, canonically: a SQLite file's resolved path, or a server's
    ``postgresql://host:port/database`` (no user, no password, no parameters)."""
    if location.path is not None:
        return str(location.path.expanduser().resolve())
    parts = urlsplit(location.conninfo or "")
    host = parts.hostname or "localhost"
    return f"postgresql://{host}:{parts.port or 5432}/{parts.path.strip('/')}"


def _bindings_file(home: Path | None) -> Path:
    return (dp_pipeline_home() if home is None else home) / BINDINGS_NAME


@contextmanager
def _locked(path: Path, write: bool):
    """The bindings (a dict) under an exclusive lock of their file, written back if ``write``."""
    private_folder(path.parent)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(descriptor, 0o600)  # the mode argument is filtered by the umask
    with os.fdopen(descriptor, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        text = handle.read()
        try:
            bindings = json.loads(text) if text.strip() else {}
        except ValueError:
            raise KeyBindingError(
                f"key bindings {str(path)!r} are not valid JSON (edited by hand?); restore "
                "the file from a backup, or remove it to bind each key to its next ledger"
            ) from None
        yield bindings
        if write:
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(bindings, indent=2, sort_keys=True) + "\n")


def _refusal(key: MasterKey, bound: dict, shown: str, path: Path, why: str) -> KeyBindingError:
    return KeyBindingError(
        f"master key {key.fingerprint} is bound to the ledger {bound['place']!r} (recorded "
        f"in {str(path)!r}), but this run names the ledger {shown!r}, {why}. A key's "
        "budget lives in one ledger: the same people in a second ledger would get a second "
        f"cap. Use the bound ledger (--ledger {bound['place']}), or move the key to this "
        f"ledger on purpose: dp-release key --bind {shown} (recorded in both ledgers and "
        "the home). Nothing was read or reserved"
    )


def check_key_place(key: MasterKey, location, home: Path | None = None) -> None:
    """Before anything starts: refuse a ledger at another place than ``key``'s bound one.

    Reads the home's bindings only (the ledger need not exist yet); the ledger's own id
    is checked by `bind_key` once it is open.
    """
    location = ledger_location(location)
    path = _bindings_file(home)
    if not path.is_file():
        return
    with _locked(path, write=False) as bindings:
        bound = bindings.get(key.fingerprint)
    if bound is not None and bound["place"] != ledger_place(location):
        raise _refusal(key, bound, location.shown, path, "another place")


def bind_key(key: MasterKey, ledger: Ledger, home: Path | None = None) -> None:
    """Bind ``key`` to ``ledger`` in the home if it is bound to none; else check it is this
    ledger (same place and same ``ledger_id``), or raise `KeyBindingError`.

    A ledger that records another key is not bound to (its own check refuses the key
    when it reserves, naming both fingerprints).
    """
    place = ledger_place(ledger.location)
    ledger_id = ledger.meta("ledger_id")
    recorded = ledger.key_fingerprint()
    path = _bindings_file(home)
    with _locked(path, write=True) as bindings:
        bound = bindings.get(key.fingerprint)
        if bound is None:
            if recorded is not None and recorded != key.fingerprint:
                return
            bindings[key.fingerprint] = {
                "place": place,
                "ledger_id": ledger_id,
                "bound_at": _now(),
            }
            return
    if bound["place"] != place:
        raise _refusal(key, bound, ledger.location.shown, path, "another place")
    if bound["ledger_id"] != ledger_id:
        raise _refusal(
            key,
            bound,
            ledger.location.shown,
            path,
            "the same place but another ledger (the file or database was replaced, so "
            "the releases recorded under the key are not in it)",
        )


def move_binding(key: MasterKey, target: Ledger, home: Path | None = None) -> dict | None:
    """Move ``key``'s binding to ``target`` on purpose, recorded in three places.

    The old ledger (if reachable) records ``moved_to``, the new one ``moved_from`` (and
    the key: a ledger bound to another key is refused), and the home's entry keeps the
    list of its moves. Returns the previous binding (None: the key was bound to none).
    """
    place = ledger_place(target.location)
    recorded = target.key_fingerprint()
    if recorded is not None and recorded != key.fingerprint:
        raise KeyBindingError(
            f"ledger {target.location.shown!r} records the master key with fingerprint "
            f"{recorded}; key {key.fingerprint} cannot be bound to it (a ledger's budget is "
            "anchored to one key). Choose another ledger. Nothing was changed"
        )
    path = _bindings_file(home)
    with _locked(path, write=True) as bindings:
        previous = bindings.get(key.fingerprint)
        move = {"to": place, "ledger_id": target.meta("ledger_id"), "at": _now()}
        if previous is not None:
            move["from"] = previous["place"]
            old = ledger_location(previous["place"])
            if old.path is None or old.path.is_file():
                with Ledger(old, key=key) as source:
                    source.record_move("moved_to", move)
        target.record_move("moved_from", move, key_fingerprint=key.fingerprint)
        bindings[key.fingerprint] = {
            "place": place,
            "ledger_id": move["ledger_id"],
            "bound_at": move["at"],
            "moves": [*(previous or {}).get("moves", []), move],
        }
    return previous


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
