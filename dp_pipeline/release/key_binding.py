"""A master key is bound to one ledger, both ways: the cap cannot be restarted elsewhere.

A ledger records the public fingerprint of the key of its first keyed reservation and
refuses any other key (`dp_pipeline.release.ledger.store`). This module records the
other direction, in every place a later run with the same key will look:

- the key file itself, when the key came from one (`dp_pipeline.release.key_records`:
  an authenticated line appended to it), so a copied key file, another
  ``$DP_PIPELINE_HOME`` or another ``$HOME`` still knows the key's ledger;
- the dp_pipeline home's ``bindings.json`` (mode 0600 in the 0700 home), mapping each
  key's public fingerprint (never the key) to its ledger, and the user's registry of
  homes (`dp_pipeline.release.home_registry`): a run looks at the bindings of *every*
  home the user's runs know of, so a key from ``$DP_PIPELINE_MASTER_KEY`` or
  ``--key-file`` is seen whichever home the run names.

A binding names the ledger by its random ``ledger_id`` (drawn inside it when it was
created) and its **site** (`dp_pipeline.release.ledger_sites`: a SQLite file's resolved
path; a server's cluster identifier and database name, as the server says), and the
ledger records its own site too: a copied file or a restored dump keeps the id but is at
another site, and a new ledger at the same place has another id. Both are another ledger.

Guarantee. A run or `Session` whose key is bound to one ledger and names another
(``--ledger other.sqlite``, a spec's ``run.ledger``, a moved, copied, restored or
replaced ledger) is refused before any engine starts or anything is read or reserved,
with a `KeyBindingError` naming the bound ledger and the command that moves the binding
on purpose (``dp-release key --bind LEDGER``, which records the move in the old ledger,
the new one, the homes and the key file: `move_binding`). Every key is bound this way,
whether it came from the home's ``master.key``, ``--key-file`` or
``$DP_PIPELINE_MASTER_KEY``: a key given explicitly binds to its first ledger too.

The home also records that the bound ledger's rows are authenticated (``"sealed"``,
`dp_pipeline.release.ledger.integrity`) once it has seen them sealed: a ledger whose
seal marker was removed by hand (or whose schema version was edited back so that a
migration would run again) would otherwise have its blanked codes adopted as if it had
never been sealed; `bind_key` refuses it with a `LedgerTamperedError` instead.

What remains possible is in docs/security_model.md ("What the binding does not stop"):
an operator who deletes or edits these records by hand, or gives the key's value to a
process of another account or machine that has never seen it, with a new ledger.
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
from dp_pipeline.release.home_registry import home_bindings, known_homes, register_home
from dp_pipeline.release.key_records import (
    KeyBindingError,
    append_key_file_binding,
    key_file_binding,
)
from dp_pipeline.release.keys import ENVIRONMENT_VARIABLE
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.integrity import SEALED, LedgerTamperedError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_location import LedgerLocation, ledger_location
from dp_pipeline.release.ledger_sites import check_site, move_site, record_site
from dp_pipeline.release.locations import dp_pipeline_home
from dp_pipeline.release.private_folders import private_folder

__all__ = [
    "BINDINGS_NAME",
    "KeyBindingError",
    "bind_key",
    "check_key_place",
    "key_source",
    "ledger_place",
    "move_binding",
    "same_ledger",
]

BINDINGS_NAME = "bindings.json"


def ledger_place(location: LedgerLocation) -> str:
    """Where a ledger is, as messages name it: a SQLite file's resolved path, or a server's
    ``postgresql://host:port/database`` (no user, no password, no parameters)."""
    if location.path is not None:
        return str(location.path.expanduser().resolve())
    parts = urlsplit(location.conninfo or "")
    host = parts.hostname or "localhost"
    return f"postgresql://{host}:{parts.port or 5432}/{parts.path.strip('/')}"


def key_source(key_file: str | os.PathLike[str] | None) -> Path | None:
    """The key file a run's key is read from (`dp_pipeline.release.keys`), or None when it
    comes from ``$DP_PIPELINE_MASTER_KEY`` or no file is named."""
    if os.environ.get(ENVIRONMENT_VARIABLE) or key_file is None:
        return None
    path = Path(key_file)
    return path if path.is_file() else None


def same_ledger(bound: dict, place: str, ledger_id: str | None, site: str | None = None):
    """Whether a binding names the ledger at ``place`` with ``ledger_id`` and ``site``:
    True, False, or None when it cannot be told yet (a server ledger not opened yet).

    Both ids known and different, or both sites known and different: another ledger. A
    binding written before sites were recorded compares a SQLite ledger's resolved path
    and a server ledger's id (whatever host text its URL uses).
    """
    server = place.startswith("postgresql://")
    if server != str(bound["place"]).startswith("postgresql://"):
        return False
    if ledger_id is not None and bound.get("ledger_id") not in (None, ledger_id):
        return False
    if site is not None and bound.get("site") is not None:
        return bound["site"] == site
    if not server:
        return bound["place"] == place
    if ledger_id is None or bound.get("ledger_id") is None:
        return None if bound["place"] != place else True
    return True


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


def _refusal(key: MasterKey, bound: dict, shown: str, where: str, why: str) -> KeyBindingError:
    return KeyBindingError(
        f"master key {key.fingerprint} is bound to the ledger {bound['place']!r} (recorded "
        f"in {where}), but this run names the ledger {shown!r}, {why}. A key's "
        "budget lives in one ledger: the same people in a second ledger would get a second "
        f"cap. Use the bound ledger (--ledger {bound['place']}), or move the key to this "
        f"ledger on purpose: dp-release key --bind {shown} (recorded in both ledgers, the "
        "homes and the key file). Nothing was read or reserved"
    )


def _records(key: MasterKey, key_file: Path | None, home: Path | None):
    """(where, binding) of ``key`` in every place a run records it: the key file, then
    every known home (the current one included)."""
    found = []
    if key_file is not None:
        bound = key_file_binding(key_file, key)
        if bound is not None:
            found.append((f"the key file {str(key_file)!r}", bound))
    homes = home_bindings(key.fingerprint)
    if home is not None and all(path.parent != home.resolve() for path, _ in homes):
        entry = _read_bindings(_bindings_file(home)).get(key.fingerprint)
        homes += [(_bindings_file(home), entry)] if isinstance(entry, dict) else []
    found += [(repr(str(path)), entry) for path, entry in homes]
    return found


def _read_bindings(path: Path) -> dict:
    if not path.is_file():
        return {}
    with _locked(path, write=False) as bindings:
        return bindings


def _check_records(key, records, shown, place, ledger_id, site) -> None:
    for where, bound in records:
        if same_ledger(bound, place, ledger_id, site) is not False:
            continue
        raise _refusal(key, bound, shown, where, _why(bound, place, ledger_id, site))


def _why(bound: dict, place: str, ledger_id: str | None, site: str | None) -> str:
    """Why the ledger at ``place`` is not the one ``bound`` names, in words."""
    same_site = bound.get("site") == site if site is not None else bound["place"] == place
    if ledger_id is not None and bound.get("ledger_id") == ledger_id:
        return (
            "a copy of the bound ledger at another site (a copied file or a restored "
            "dump: two live copies would each spend what is left of its caps)"
        )
    if same_site and ledger_id is not None:
        return (
            "the same place but another ledger (the file or database was replaced, so "
            "the releases recorded under the key are not in it)"
        )
    if place.startswith("postgresql://"):
        return "another ledger (its database holds another ledger id)"
    return "another place"


def check_key_place(
    key: MasterKey,
    location,
    home: Path | None = None,
    *,
    ledger_id: str | None = None,
    key_file: str | os.PathLike[str] | None = None,
    ledger: Ledger | None = None,
) -> None:
    """Before anything starts: refuse a ledger other than ``key``'s bound one, and a
    ledger that is not at its recorded site (`check_site`: a copy, a restored dump).

    Looks at every record of the key's binding (``key_file``: the run's key file, whose
    binding line is read when the key came from it; every known home). ``ledger``: the
    ledger when it is already open (a server's); a SQLite ledger that exists is opened
    here to read its id and site, one that does not is not created.
    """
    location = ledger_location(location)
    opened = ledger
    if opened is None and location.path is not None and location.path.is_file():
        opened = Ledger(location)
    try:
        site = None if location.path is None else ledger_place(location)
        if opened is not None:
            site = check_site(opened, key)
            ledger_id = opened.meta("ledger_id")
        records = _records(key, key_source(key_file), home)
        _check_records(key, records, location.shown, ledger_place(location), ledger_id, site)
    finally:
        if opened is not None and ledger is None:
            opened.close()


def bind_key(
    key: MasterKey,
    ledger: Ledger,
    home: Path | None = None,
    *,
    key_file: str | os.PathLike[str] | None = None,
) -> None:
    """Bind ``key`` to ``ledger`` if it is bound to none; else check it is this ledger
    (same id, same site), or raise `KeyBindingError`.

    Checks and records every place of `check_key_place`: the ledger's own site (recorded
    on first use), the key file (``key_file``, when the key came from it) and the homes.
    A ledger that records another key is not bound to (its own check refuses the key
    when it reserves, naming both fingerprints).
    """
    place = ledger_place(ledger.location)
    site = check_site(ledger, key)
    ledger_id = ledger.meta("ledger_id")
    recorded = ledger.key_fingerprint()
    if recorded is not None and recorded != key.fingerprint:
        return
    sealed = ledger.meta(SEALED) is not None
    path = _bindings_file(home)
    source = key_source(key_file)
    records = _records(key, source, home)
    _check_records(key, records, ledger.location.shown, place, ledger_id, site)
    entry = {"place": place, "ledger_id": ledger_id, "site": site}
    _check_binding(key, ledger, path, entry, sealed)
    if source is not None and _differs(key_file_binding(source, key), entry):
        append_key_file_binding(source, key, {**entry, "bound_at": _now()})
    if ledger.meta("sites") is None:
        record_site(ledger, key, site)  # where it lives, from its first binding on
    keyed = ledger.key is not None and ledger.key.fingerprint == key.fingerprint
    if sealed or not keyed:
        return
    # Sealed now, before anything is reserved, and the home told so at once: from here on
    # a removed seal marker is refused, never a chance to have edited rows adopted.
    ledger.seal_now()
    with _locked(path, write=True) as bindings:
        if key.fingerprint in bindings:
            bindings[key.fingerprint]["sealed"] = True


def _differs(bound: dict | None, entry: dict) -> bool:
    return bound is None or any(bound.get(name) != entry[name] for name in entry)


def _check_binding(key, ledger, path, entry, sealed) -> None:
    """`bind_key`'s record and checks in the current home's bindings, under their lock."""
    with _locked(path, write=True) as bindings:
        bound = bindings.get(key.fingerprint)
        if bound is None:
            bindings[key.fingerprint] = {**entry, "bound_at": _now(), "sealed": sealed}
            # A later fresh home of this user is refused beside this one (home_registry).
            register_home(path.parent)
            return
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
        bound.update({name: value for name, value in entry.items() if bound.get(name) is None})


def move_binding(
    key: MasterKey,
    target: Ledger,
    home: Path | None = None,
    *,
    key_file: str | os.PathLike[str] | None = None,
) -> dict | None:
    """Move ``key``'s binding to ``target`` on purpose, recorded in every place.

    The old ledger (if reachable) records ``moved_to`` and that it moved away (it is
    refused at its old place from then on), the new one ``moved_from`` (and the key: a
    ledger bound to another key is refused) and its site; every known home's entry for
    the key and the key file (``key_file``) name the new ledger, the current home's
    keeping the list of its moves. Returns the previous binding (None: bound to none),
    with ``"unreached": True`` when the old ledger could not be opened to record the move
    (a server whose credentials this run lacks: its operator retires it).
    """
    place = ledger_place(target.location)
    recorded = target.key_fingerprint()
    if recorded is not None and recorded != key.fingerprint:
        raise KeyBindingError(
            f"ledger {target.location.shown!r} records the master key with fingerprint "
            f"{recorded}; key {key.fingerprint} cannot be bound to it (a ledger's budget is "
            "anchored to one key). Choose another ledger. Nothing was changed"
        )
    source = key_source(key_file)
    path = _bindings_file(home)
    elsewhere = next((bound for _, bound in _records(key, source, home)), None)
    with _locked(path, write=True) as bindings:
        previous = bindings.get(key.fingerprint, elsewhere)
        move = {"to": place, "ledger_id": target.meta("ledger_id"), "at": _now()}
        old = None
        if previous is not None:
            move["from"] = previous["place"]
            location = ledger_location(previous["place"])
            if location.path is None or location.path.is_file():
                try:
                    old = Ledger(location, key=key)
                except LedgerError:  # a server that needs credentials this run lacks
                    move["from_unreached"] = True
        try:
            move["site"] = move_site(key, target, old)
            if old is not None:
                old.record_move("moved_to", move)
        finally:
            if old is not None:
                old.close()
        target.record_move("moved_from", move, key_fingerprint=key.fingerprint)
        entry = {"place": place, "ledger_id": move["ledger_id"], "site": move["site"]}
        bindings[key.fingerprint] = {
            **entry,
            "bound_at": move["at"],
            "sealed": target.meta(SEALED) is not None,
            "moves": [*(previous or {}).get("moves", []), move],
        }
    _update_other_homes(key, path, entry)
    if source is not None:
        append_key_file_binding(source, key, {**entry, "bound_at": move["at"], "moved": True})
    register_home(path.parent)  # a home bound by a move is one of the user's homes too
    if previous is not None and move.get("from_unreached"):
        previous = {**previous, "unreached": True}
    return previous


def _update_other_homes(key: MasterKey, current: Path, entry: dict) -> None:
    """Every other known home that binds ``key`` names the moved-to ledger too."""
    for home in known_homes():
        path = home / BINDINGS_NAME
        if path.resolve() == current.resolve() or not path.is_file():
            continue
        with _locked(path, write=True) as bindings:
            if key.fingerprint in bindings:
                bindings[key.fingerprint].update(entry, bound_at=_now(), sealed=False)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
