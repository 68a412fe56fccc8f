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

The home also records that the bound ledger's rows are authenticated (``"sealed"``,
`dp_pipeline.release.ledger.integrity`) once it has seen them sealed: a ledger whose
seal marker was removed by hand (or whose schema version was edited back so that a
migration would run again) would otherwise have its blanked codes adopted as if it had
never been sealed; `bind_key` refuses it with a `LedgerTamperedError` instead.

A server ledger is identified by its ``ledger_id`` (drawn inside the database), not by
the host text of its URL: ``localhost`` and ``127.0.0.1`` (or a DNS alias) name the same
server, and a binding compares the ids (`same_ledger`).

A second home (another ``$DP_PIPELINE_HOME``) with a *new* key and a new ledger is not
detectable from the bindings alone (the new key is unknown to every other home): every
home that binds a key is recorded in the user's registry, and a new key beside a home
whose key has releases is refused (`dp_pipeline.release.home_registry`).
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
from dp_pipeline.release.home_registry import register_home
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.integrity import SEALED, LedgerTamperedError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_location import LedgerLocation, ledger_location
from dp_pipeline.release.locations import dp_pipeline_home
from dp_pipeline.release.private_folders import private_folder

__all__ = [
    "BINDINGS_NAME",
    "KeyBindingError",
    "bind_key",
    "check_key_place",
    "ledger_place",
    "move_binding",
    "same_ledger",
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


def same_ledger(bound: dict, place: str, ledger_id: str | None) -> bool | None:
    """Whether a binding names the ledger at ``place`` with ``ledger_id``: True, False, or
    None when it cannot be told yet (a server ledger whose id is not read yet).

    A SQLite ledger is its resolved path (and its id, checked by `bind_key`); a server
    ledger is its ``ledger_id``, whatever host text its URL uses.
    """
    server = place.startswith("postgresql://")
    if server != bound["place"].startswith("postgresql://"):
        return False
    if not server:
        return bound["place"] == place
    if ledger_id is None or bound.get("ledger_id") is None:
        return None if bound["place"] != place else True
    return bound["ledger_id"] == ledger_id


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


def check_key_place(
    key: MasterKey, location, home: Path | None = None, *, ledger_id: str | None = None
) -> None:
    """Before anything starts: refuse a ledger other than ``key``'s bound one.

    Reads the home's bindings only (the ledger need not exist yet); ``ledger_id``: a
    server ledger's id when it is already open (then compared instead of its host
    text). The ledger's own id is checked by `bind_key` once it is open.
    """
    location = ledger_location(location)
    path = _bindings_file(home)
    if not path.is_file():
        return
    with _locked(path, write=False) as bindings:
        bound = bindings.get(key.fingerprint)
    if bound is not None and same_ledger(bound, ledger_place(location), ledger_id) is False:
        raise _refusal(key, bound, location.shown, path, _elsewhere(ledger_place(location)))


def bind_key(key: MasterKey, ledger: Ledger, home: Path | None = None) -> None:
    """Bind ``key`` to ``ledger`` in the home if it is bound to none; else check it is this
    ledger (same place and same ``ledger_id``), or raise `KeyBindingError`.

    A ledger that records another key is not bound to (its own check refuses the key
    when it reserves, naming both fingerprints).
    """
    place = ledger_place(ledger.location)
    ledger_id = ledger.meta("ledger_id")
    recorded = ledger.key_fingerprint()
    sealed = ledger.meta(SEALED) is not None
    path = _bindings_file(home)
    _check_binding(key, ledger, path, place, ledger_id, recorded, sealed)
    keyed = ledger.key is not None and ledger.key.fingerprint == key.fingerprint
    if sealed or not keyed or recorded not in (None, key.fingerprint):
        return
    # Sealed now, before anything is reserved, and the home told so at once: from here on
    # a removed seal marker is refused, never a chance to have edited rows adopted.
    ledger.seal_now()
    with _locked(path, write=True) as bindings:
        if key.fingerprint in bindings:
            bindings[key.fingerprint]["sealed"] = True


def _check_binding(key, ledger, path, place, ledger_id, recorded, sealed) -> None:
    """`bind_key`'s record and checks in the home's bindings, under their lock."""
    with _locked(path, write=True) as bindings:
        bound = bindings.get(key.fingerprint)
        if bound is None:
            if recorded is not None and recorded != key.fingerprint:
                return
            bindings[key.fingerprint] = {
                "place": place,
                "ledger_id": ledger_id,
                "bound_at": _now(),
                "sealed": sealed,
            }
            # A later fresh home of this user is refused beside this one (home_registry).
            register_home(path.parent)
            return
        if bound["place"] != place and same_ledger(bound, place, ledger_id) is False:
            raise _refusal(key, bound, ledger.location.shown, path, _elsewhere(place))
        if bound["ledger_id"] != ledger_id:
            raise _refusal(
                key,
                bound,
                ledger.location.shown,
                path,
                "the same place but another ledger (the file or database was replaced, so "
                "the releases recorded under the key are not in it)",
            )
        if bound.get("sealed") and not sealed:
            raise LedgerTamperedError(
                f"ledger {ledger.location.shown!r}: its rows were authenticated under master "
                f"key {key.fingerprint} (recorded in {str(path)!r}), but the ledger no longer "
                "says so: its seal marker was removed or its schema version edited back, "
                "which would have its rows adopted again as they are now. The spend it "
                "records cannot be trusted. Restore the ledger from a backup taken before "
                "the edit; nothing was read or reserved"
            )
        bound["sealed"] = bool(bound.get("sealed")) or sealed


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
    register_home(path.parent)  # a home bound by a move is one of the user's homes too
    return previous


def _elsewhere(place: str) -> str:
    if place.startswith("postgresql://"):
        return "another ledger (its database holds another ledger id)"
    return "another place"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
