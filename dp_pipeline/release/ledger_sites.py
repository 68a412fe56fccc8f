"""A ledger records where it lives: a copy of it at another place is not the same ledger.

A ledger's random ``ledger_id`` is drawn inside it, so a copy keeps it: a SQLite file
copied elsewhere, or a ``pg_dump`` restored into another database or cluster, would be
a second live ledger with the same id, each spending what is left of the cap. So the
ledger also records its **site** (``ledger_meta`` row ``sites``: a JSON list, its last
entry current), written when a key is first bound to it and when it is moved on purpose:

- a SQLite ledger: its file's resolved path (symbolic links followed);
- a PostgreSQL ledger: what the server itself says (`Ledger.server_identity`): its
  cluster's system identifier (drawn by ``initdb``; another cluster has another) and the
  database's name, whatever host name or address the URL used.

Each entry carries an HMAC-SHA256 under a secret derived from the ledger's master key
(label `SITE_LABEL`) of the entry and the ledger's id, so someone who can write the
ledger but lacks the key cannot make a copy claim the copy's place.

Guarantee. `check_site` refuses (`KeyBindingError`, before anything is read or reserved)
a ledger whose recorded site is not where it is opened, naming both and the one way to
move a ledger on purpose, ``dp-release key --bind LEDGER`` (`move_site`: the new site is
recorded in the moved ledger, and the old ledger, when reachable, records that it moved
away, so it is refused at its old place from then on).
"""

from __future__ import annotations

import hmac
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.key_records import KeyBindingError
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.integrity import LedgerTamperedError
from dp_pipeline.release.ledger.records import canonical_json
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_location import ledger_location

__all__ = ["SITES", "SITE_LABEL", "check_site", "ledger_site", "move_site", "record_site"]

SITES = "sites"
SITE_LABEL = b"dp_pipeline/ledger-site/v1"


def ledger_site(ledger: Ledger) -> str:
    """Where ``ledger`` is, canonically (see the module docstring)."""
    if ledger.location.path is not None:
        return str(ledger.location.path.expanduser().resolve())
    return f"postgresql {ledger.server_identity()}"


def _code(key: MasterKey, entry: dict, ledger_id: str | None) -> str:
    content = {name: value for name, value in entry.items() if name != "mac"}
    text = canonical_json({"entry": content, "ledger_id": ledger_id})
    return key.hmac_sha256(SITE_LABEL, text.encode()).hex()


def _recorded(ledger: Ledger, key: MasterKey | None) -> dict | None:
    """The ledger's current site entry, its code checked when ``key`` is the ledger's."""
    text = ledger.meta(SITES)
    if text is None:
        return None
    try:
        entry = json.loads(text)[-1]
        malformed = not isinstance(entry, dict) or not isinstance(entry.get("site"), str)
    except (ValueError, IndexError, KeyError, TypeError):
        entry, malformed = None, True
    ours = key is not None and ledger.key_fingerprint() == key.fingerprint
    if malformed or (
        ours
        and not hmac.compare_digest(
            str(entry.get("mac")), _code(key, entry, ledger.meta("ledger_id"))
        )
    ):
        raise LedgerTamperedError(
            f"ledger {ledger.location.shown!r}: the record of where it lives does not verify "
            "under its master key (edited by hand), so it may be a copy claiming another "
            "ledger's place. Restore the ledger from a backup; nothing was read or reserved"
        )
    return entry


def check_site(ledger: Ledger, key: MasterKey | None) -> str:
    """The ledger's site, after refusing a ledger that records another one (a copy or a
    ledger moved by hand). A ledger that records no site yet passes."""
    site = ledger_site(ledger)
    entry = _recorded(ledger, key)
    if entry is None or entry["site"] == site:
        return site
    moved = entry.get("moved_away")
    why = (
        f"it was moved to {entry['site']!r} on purpose ({moved}), and this copy stayed behind"
        if moved
        else f"it records that it lives at {entry['site']!r}: this is a copy (a copied "
        "file, a restored dump) or a ledger moved by hand"
    )
    raise KeyBindingError(
        f"ledger {ledger.location.shown!r} (id {ledger.meta('ledger_id')}) is not where its "
        f"releases were recorded: {why}. Two live copies of one ledger would each spend "
        "what is left of its caps. Use the ledger at its recorded place, or, if this copy "
        "replaces it on purpose (the other is retired), move it: dp-release key --bind "
        f"{ledger.location.shown} (recorded in both ledgers, the homes and the key file). "
        "Nothing was read or reserved"
    )


def record_site(ledger: Ledger, key: MasterKey, site: str, **recorded) -> None:
    """Append ``site`` (with ``recorded`` facts) as the ledger's current site, under ``key``."""
    entry = {"site": site, "at": _now(), **recorded}
    entry["mac"] = _code(key, entry, ledger.meta("ledger_id"))
    ledger.record_move(SITES, entry, key_fingerprint=key.fingerprint)


def move_site(key: MasterKey, target: Ledger, old: Ledger | None) -> str:
    """Record ``target``'s site as its own on purpose, and in the ledgers it replaces that
    they moved away, so each is refused where it is from then on: ``old`` (the ledger the
    key was bound to, if reachable) and the original of a copy (the ledger with
    ``target``'s id at the site ``target`` recorded, when reachable from here: a SQLite
    file, or a database of the same server; one that cannot be reached is the operator's
    to retire). Returns the new site."""
    site = ledger_site(target)
    entry = _recorded(target, key)
    if entry is None or entry["site"] != site:
        record_site(target, key, site, moved_from=None if entry is None else entry["site"])
    replaced = [] if old is None else [old]
    original = None if entry is None or entry["site"] == site else _original(target, entry)
    try:
        if original is not None and original.meta("ledger_id") == target.meta("ledger_id"):
            replaced.append(original)
        for ledger in replaced:
            if ledger_site(ledger) != site:
                # Retired at its old place: a key file or home that still names it is
                # refused there.
                record_site(ledger, key, site, moved_away=_now())
    finally:
        if original is not None:
            original.close()
    return site


def _original(target: Ledger, entry: dict) -> Ledger | None:
    """The ledger at the site ``entry`` names, if it can be reached from ``target``'s."""
    if target.location.path is not None:
        path = Path(entry["site"])
        return Ledger(path, key=target.key) if path.is_file() else None
    named = re.fullmatch(r"postgresql cluster (\S+) database (.+)", entry["site"])
    conninfo = target.location.conninfo or ""
    if named is None or not conninfo.startswith(("postgresql://", "postgres://")):
        return None
    if not str(target.server_identity()).startswith(f"cluster {named[1]} "):
        return None  # another server: not reachable through this URL
    url = urlsplit(conninfo)._replace(path="/" + quote(named[2], safe=""))
    try:
        return Ledger(ledger_location(urlunsplit(url)), key=target.key)
    except LedgerError:
        return None  # dropped meanwhile, or not ours to open


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
