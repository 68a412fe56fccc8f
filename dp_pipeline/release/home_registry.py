"""The homes a user has run releases from: a fresh home beside a used one is refused.

A key is bound to one ledger (`dp_pipeline.release.key_binding`), but another dp_pipeline
home (another ``$DP_PIPELINE_HOME``, or ``--key-file`` / ``--ledger`` naming new files)
would silently get a *new* key and a *new* ledger: a fresh cap on the same people. So the
user's default home, ``~/.dp_pipeline`` (``~`` as Python resolves it: ``$HOME``, else the
password database), keeps ``homes.json`` (0600): every home in which a key was bound to a
ledger, recorded when the binding is written (`register_home`).

Guarantee. Before a master key is created, by a run (before any engine starts, anything
is read or reserved) or by ``dp-release key``, every known home is looked at: the user's
default home, each home in its registry, and the current one. If any holds a key bound to
a ledger that records releases (a SQLite ledger is opened read-only and counted; a server
ledger is counted as recording releases, since it is not contacted here), the creation is
refused with a `FreshHomeError` naming that home and ledger and the two ways on: use
that home or its key, or start a separate cap on purpose with ``dp-release key
--new-home``, which creates the key and records in the registry when, beside which homes,
and under which key fingerprint the new cap was started.

What it does not cover: a user who edits or removes their own registry, or changes
``$HOME``, can hide the homes it lists, as they could delete the ledger itself; the
registry turns a silent fresh cap into a refused or recorded one, it does not stop the
owner of the files.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

from dp_pipeline.errors import LedgerError
from dp_pipeline.release.ledger_location import ledger_location
from dp_pipeline.release.locations import (
    HOME_VARIABLE,
    LEGACY_FOLDER,
    default_key_file,
    dp_pipeline_home,
)
from dp_pipeline.release.private_folders import private_folder

__all__ = [
    "REGISTRY_NAME",
    "FreshHomeError",
    "check_new_key",
    "home_bindings",
    "known_homes",
    "register_home",
    "used_homes",
    "user_home",
]

REGISTRY_NAME = "homes.json"
_BINDINGS = "bindings.json"  # key_binding's file, read here (key_binding imports this module)
_KEY_VARIABLE = "DP_PIPELINE_MASTER_KEY"  # named in messages (keys.py imports this module)


class FreshHomeError(LedgerError):
    """A new master key refused: another home of the user already spends a cap."""


def user_home() -> Path:
    """The user's default dp_pipeline home, whatever ``$DP_PIPELINE_HOME`` says."""
    return Path.home() / LEGACY_FOLDER


def _registry() -> Path:
    return user_home() / REGISTRY_NAME


def _read_json(path: Path) -> dict:
    try:
        text = path.read_text()
        data = json.loads(text) if text.strip() else {}  # created, not yet written
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        raise FreshHomeError(
            f"{str(path)!r} cannot be read as JSON (edited by hand?); restore it from a "
            "backup. No key was created"
        ) from None
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict) -> None:
    """``data`` into ``path`` (0600, its folder 0700), replaced atomically."""
    private_folder(path.parent)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # the mode argument is filtered by the umask
    with os.fdopen(descriptor, "w") as handle:
        handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def register_home(home: Path, **recorded) -> None:
    """Record ``home`` in the user's registry (once; ``recorded`` is added to its entry).

    The user's default home itself is always looked at, so it is not listed.
    """
    home = home.expanduser().resolve()
    if home == user_home().resolve() and not recorded:
        return
    path = _registry()
    private_folder(path.parent)
    # Under a lock: two runs registering homes at once must not lose one of them.
    descriptor = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        data = _read_json(path)
        homes = data.setdefault("homes", {})
        entry = homes.get(str(home))
        if entry is not None and not recorded:
            return
        entry = entry or {"registered_at": _now()}
        for name, value in recorded.items():
            entry.setdefault(name, []).append(value)
        homes[str(home)] = entry
        _write_json(path, data)
    finally:
        os.close(descriptor)  # releases the lock


def _records_releases(place: str) -> bool:
    """Whether the ledger at ``place`` records releases (a server ledger: assumed so)."""
    location = ledger_location(place)
    if location.path is None:
        return True  # not contacted before the key exists; a server ledger is shared
    if not location.path.is_file():
        return False
    try:  # read-only (mode=ro): looking never creates or changes a ledger
        uri = f"{location.path.resolve().as_uri()}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True)) as connection:
            tables = {
                row[0]
                for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if "releases" not in tables:
                return False  # a ledger file never written to
            return connection.execute("SELECT count(*) FROM releases").fetchone()[0] > 0
    except sqlite3.Error:
        return True  # unreadable: it may record releases


def known_homes() -> list[Path]:
    """Every home this user's runs can know of, resolved, each once: the user's default
    home, the homes its registry lists, and the current one."""
    homes = [user_home(), *map(Path, _read_json(_registry()).get("homes", {})), dp_pipeline_home()]
    return list(dict.fromkeys(home.expanduser().resolve() for home in homes))


def home_bindings(fingerprint: str) -> list[tuple[Path, dict]]:
    """(bindings file, entry) of the key with ``fingerprint`` in every known home."""
    found = []
    for home in known_homes():
        entry = _read_json(home / _BINDINGS).get(fingerprint)
        if isinstance(entry, dict) and "place" in entry:
            found.append((home / _BINDINGS, entry))
    return found


def used_homes() -> list[tuple[str, str, str]]:
    """(home, key fingerprint, ledger place) for every known home's key bound to a ledger
    that records releases: the user's default home, its registry's homes, the current one."""
    found = []
    for home in known_homes():
        for fingerprint, bound in sorted(_read_json(home / _BINDINGS).items()):
            if isinstance(bound, dict) and _records_releases(str(bound.get("place", ""))):
                found.append((str(home), fingerprint, str(bound["place"])))
    return found


def check_new_key(key_file: str | os.PathLike[str], flag: str = "run.key_file") -> None:
    """Just before a key is created at ``key_file``: refuse (`FreshHomeError`) when a
    known home already holds a key bound to a ledger that records releases."""
    path = Path(key_file)
    used = used_homes()
    if not used:
        return
    home, fingerprint, place = used[0]
    named = "" if str(path) == default_key_file() else f" --key-file {path}"
    raise FreshHomeError(
        f"{flag}: no master key at {str(path)!r}, and a new one would start a second cap "
        f"on the same people: the dp_pipeline home {home!r} already holds master key "
        f"{fingerprint}, bound to the ledger {place!r}, which records releases"
        + (f" (and {len(used) - 1} more such key(s))" if len(used) > 1 else "")
        + f". Use that home (${HOME_VARIABLE}={home}) or its key (--key-file PATH or "
        f"${_KEY_VARIABLE}); to start a separate cap on purpose, create this home's "
        f"key with: dp-release key --new-home{named} (recorded in {str(_registry())!r}). "
        "Nothing was read or reserved"
    )
