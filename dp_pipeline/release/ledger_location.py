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

A libpq connection string (``host=db user=x password=... dbname=y``: text that
starts with ``word=``) is a PostgreSQL database when every keyword is libpq's
and it names a database, and an error otherwise (`conninfo_pairs`); it is never
a SQLite file named after it (which would write the password into a file name
and show it). Its shown form masks the password, like a URL's. A SQLite file
whose name starts with ``word=`` is written ``./word=...`` or ``sqlite:///word=...``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

from dp_pipeline.errors import LedgerError

__all__ = [
    "LedgerLocation",
    "conninfo_pairs",
    "ledger_location",
    "local_ledger_folder",
    "mask_url",
    "public_conninfo",
]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SERVER_SCHEMES = ("postgresql", "postgres")
_SECRET_PARAMETERS = {"password", "sslpassword"}
_CONNINFO_START = re.compile(r"^\s*[A-Za-z_]+\s*=")
_CONNINFO_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)+)\s*")
# libpq's connection keywords (PostgreSQL 16, "Parameter Key Words").
_LIBPQ_KEYWORDS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "require_auth",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "requiressl",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcertmode",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "krbsrvname",
        "gsslib",
        "gssdelegation",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
    }
)
# What a report may show of a connection string: where the ledger is, no credentials.
_PUBLIC_KEYWORDS = ("host", "hostaddr", "port", "dbname")


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


def conninfo_pairs(text: str) -> list[tuple[str, str]] | None:
    """``text``'s (keyword, value) pairs if it is a libpq ``key=value`` string, else None.

    Raises `LedgerError` for text that starts like one (``word=``) but is not a valid
    one, or names no database: the message quotes nothing of ``text`` (it may hold a
    password). Values keep libpq's quoting (``'a b'``, ``\\'``) undone.
    """
    if not _CONNINFO_START.match(text):
        return None
    pairs: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        match = _CONNINFO_PAIR.match(text, position)
        if match is None or match.end() == position:
            pairs = []
            break
        raw = match.group(2)
        if raw.startswith("'"):
            raw = raw[1:-1]
        pairs.append((match.group(1), re.sub(r"\\(.)", r"\1", raw)))
        position = match.end()
    if not pairs or any(name not in _LIBPQ_KEYWORDS for name, _ in pairs):
        raise LedgerError(
            "ledger: starts like a libpq connection string (keyword=value) but is not one "
            "(an unknown keyword or a malformed value); write postgresql://[user@]host"
            "[:port]/database, or a SQLite file whose name holds '=' as ./NAME"
        )
    if not dict(pairs).get("dbname"):
        raise LedgerError(
            "ledger: the libpq connection string names no database; add dbname=NAME "
            "(or write postgresql://[user@]host[:port]/database)"
        )
    return pairs


def _masked_conninfo(pairs: list[tuple[str, str]], keep=None) -> str:
    shown = []
    for name, value in pairs:
        if keep is not None and name not in keep:
            continue
        if name in _SECRET_PARAMETERS:
            value = "***"
        elif not value or re.search(r"[\s'\\]", value):
            value = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        shown.append(f"{name}={value}")
    return " ".join(shown)


def public_conninfo(text: str) -> str:
    """A libpq connection string reduced to where the ledger is (host, port, database);
    any other text unchanged. Raises `LedgerError` as `conninfo_pairs` does."""
    pairs = conninfo_pairs(text)
    return text if pairs is None else _masked_conninfo(pairs, keep=_PUBLIC_KEYWORDS)


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
    pairs = None if match else conninfo_pairs(text)
    if pairs is not None:
        return LedgerLocation("postgresql", _masked_conninfo(pairs), conninfo=text)
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
