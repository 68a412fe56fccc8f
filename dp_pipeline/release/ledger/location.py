"""Where a ledger lives: a SQLite file (the embedded default) or a PostgreSQL database.

``--ledger`` and ``run.ledger`` take one location:

- a plain path (``.dp_pipeline/ledger.sqlite``) or ``sqlite:///path`` (``sqlite:////abs``
  for an absolute path, as SQLAlchemy writes them): a SQLite file;
- ``postgresql://[user@]host[:port]/database[?param=value...]`` (or ``postgres://``):
  a PostgreSQL database, reached through psycopg 3 (the ``postgresql`` extra).

Credentials come from where libpq looks for them: the URL itself, ``PGPASSWORD``,
the password file (``~/.pgpass``, ``PGPASSFILE`` or ``passfile=``), a service file.
They are never shown: `LedgerLocation.shown` is the URL with any password (in
its user part or a ``password=`` parameter) replaced by ``***``, and it is what
every message, report and log line names.

A location with another scheme (``mysql://``, ``sqlite:/x``) is refused before
anything is opened, with a one-line error naming the schemes understood.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

from dp_pipeline.release.ledger.budget import LedgerError

__all__ = ["LedgerLocation", "ledger_location", "local_ledger_folder", "mask_url"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SERVER_SCHEMES = ("postgresql", "postgres")
_SECRET_PARAMETERS = {"password", "sslpassword"}


@dataclass(frozen=True)
class LedgerLocation:
    """A parsed ledger location.

    ``kind`` is "sqlite" or "postgresql"; ``path`` the SQLite file (None for a
    server); ``conninfo`` the URL given to libpq (server only, with its password
    if it holds one: never print it); ``shown`` the location with credentials
    masked, for messages.
    """

    kind: str
    shown: str
    path: Path | None = None
    conninfo: str | None = None

    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        return f"LedgerLocation({self.kind!r}, {self.shown!r})"


def mask_url(url: str) -> str:
    """``url`` with its password (user part or ``password=`` parameter) replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(
            f"{name}={'***' if name.lower() in _SECRET_PARAMETERS else quote(value, safe='')}"
            for name, value in pairs
        )
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return shown + (f"?{query}" if query else "")


def ledger_location(location: str | os.PathLike[str] | LedgerLocation) -> LedgerLocation:
    """Parse ``location`` (a path, ``sqlite:///path`` or ``postgresql://...``).

    Raises `LedgerError` for an unknown scheme or a malformed URL; opens nothing.
    """
    if isinstance(location, LedgerLocation):
        return location
    if isinstance(location, os.PathLike):
        path = Path(location)
        return LedgerLocation("sqlite", str(path), path=path)
    text = str(location)
    match = _SCHEME.match(text)
    if match is None:
        if text.startswith(("sqlite:", "postgresql:", "postgres:")):
            raise LedgerError(
                f"ledger {mask_url(text) if '@' in text else text!r}: a ledger URL is "
                "sqlite:///path or postgresql://[user@]host[:port]/database"
            )
        path = Path(text)
        return LedgerLocation("sqlite", text, path=path)
    scheme = match.group(1).lower()
    if scheme == "sqlite":
        rest = text[len(match.group(0)) :]
        # sqlite:///relative/or/name and sqlite:////absolute (SQLAlchemy's form).
        if not rest.startswith("/") or len(rest) < 2 or "?" in rest:
            raise LedgerError(
                f"ledger {text!r}: a SQLite ledger URL is sqlite:///relative/path or "
                "sqlite:////absolute/path (no host, no parameters)"
            )
        path = Path(rest[1:])
        return LedgerLocation("sqlite", str(path), path=path)
    if scheme in _SERVER_SCHEMES:
        shown = mask_url(text)
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 (a bad port raises here, before anything is opened)
        except ValueError:
            raise LedgerError(
                f"ledger {shown!r}: not a valid PostgreSQL URL (postgresql://[user@]host"
                "[:port]/database)"
            ) from None
        if not parts.path.strip("/"):
            raise LedgerError(
                f"ledger {shown!r}: the URL names no database; write "
                "postgresql://[user@]host[:port]/DATABASE"
            )
        return LedgerLocation("postgresql", shown, conninfo=text)
    shown = mask_url(text)
    raise LedgerError(
        f"ledger {shown!r}: unknown scheme {scheme + '://'!r}; a ledger is a SQLite file "
        "(a path or sqlite:///path) or a PostgreSQL database (postgresql://...)"
    )


def local_ledger_folder(location: str | os.PathLike[str] | LedgerLocation) -> Path | None:
    """The folder of a SQLite ledger's file, None for a server ledger."""
    parsed = ledger_location(location)
    return None if parsed.path is None else parsed.path.parent
