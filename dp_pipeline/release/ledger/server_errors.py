"""What a PostgreSQL ledger's errors mean, each as one `LedgerError` line naming the fix.

libpq's words are reduced to the kind of failure: the server cannot be reached, the
credentials were refused (a wrong password; no password found, which is also what a
misspelt database name gives when the password file names databases), the database
does not exist, the user may not use the ledger's tables, or the connection was lost.
Any password of the URL is removed from libpq's words before they are quoted, and the
ledger is named by `LedgerLocation.shown` (password masked).
"""

from __future__ import annotations

import getpass
import importlib
import os

from dp_pipeline.errors import LedgerError
from dp_pipeline.release.ledger_location import LedgerLocation

__all__ = [
    "credentials_hint",
    "detail",
    "lost",
    "no_privileges",
    "psycopg_module",
    "reason",
    "server_error",
]


def psycopg_module():
    """The psycopg module, or a `LedgerError` saying how to install it."""
    try:
        return importlib.import_module("psycopg")
    except ImportError:
        raise LedgerError(
            "a postgresql:// ledger needs psycopg 3, which is not installed; install the "
            "extra: pip install 'dp-pipeline[postgresql]'"
        ) from None


def _secrets_of(conninfo: str) -> list[str]:
    psycopg = psycopg_module()
    try:
        described = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return []
    return [str(described[name]) for name in ("password", "sslpassword") if described.get(name)]


def detail(error: BaseException, conninfo: str) -> str:
    """libpq's words for ``error`` on one line, any password of ``conninfo`` removed."""
    text = " ".join(str(error).split())
    for secret in _secrets_of(conninfo):
        text = text.replace(secret, "***")
    detail = text.rsplit("failed: ", 1)[-1] if "failed: " in text else text
    return detail.strip()[:200]


def reason(error: BaseException, conninfo: str) -> str:
    """What failed, in one line, from libpq's message (passwords removed)."""
    lower = " ".join(str(error).split()).lower()
    if "no password supplied" in lower:
        # libpq looks a password up by host, port, database and user: a misspelt database
        # name finds no password-file line, and the server asks before it says which
        # databases exist.
        what = (
            "the server refused the credentials: no password was found for this database "
            "and user (a password-file line names its database: check the database name "
            "in the URL too)"
        )
    elif "password authentication failed" in lower:
        what = "the server refused the credentials: wrong password"
    elif "role" in lower and "does not exist" in lower:
        what = "the server refused the credentials: no such user"
    elif "database" in lower and "does not exist" in lower:
        what = "the database does not exist (create it, e.g. createdb, or fix the URL)"
    elif "authentication" in lower or "pg_hba.conf" in lower:
        what = "the server refused the credentials"
    elif "permission denied for database" in lower:
        described = _described(conninfo)
        database = described.get("dbname") or "<database>"
        user = described.get("user") or os.environ.get("PGUSER") or getpass.getuser()
        what = (
            "the user may not connect to this database (have its owner run GRANT CONNECT "
            f"ON DATABASE {database} TO {user})"
        )
    else:
        what = "the server cannot be reached"
    return f"{what} ({detail(error, conninfo)})"


def credentials_hint(reason: str) -> str:
    """The fix that goes with ``reason`` (`reason`'s text), as a clause to append."""
    if "credentials" in reason:
        return (
            "; credentials come from the URL, PGPASSWORD or the password file "
            "(~/.pgpass or PGPASSFILE)"
        )
    if reason.startswith("the server cannot be reached"):
        return (
            "; check the host and port in the URL, that the server is running, and that it "
            "accepts connections from this host (listen_addresses, pg_hba.conf, firewall)"
        )
    return ""


def _described(conninfo: str) -> dict:
    """The URL's parts as libpq reads them ({} if it cannot)."""
    psycopg = psycopg_module()
    try:
        return dict(psycopg.conninfo.conninfo_to_dict(conninfo))
    except psycopg.ProgrammingError:
        return {}


def _user_of(location: LedgerLocation) -> str:
    """The user the URL connects as (libpq's default: the operating-system user)."""
    user = _described(location.conninfo).get("user")
    return str(user or os.environ.get("PGUSER") or getpass.getuser())


def no_privileges(location: LedgerLocation, action: str, error: BaseException) -> LedgerError:
    """The refusal of a role without rights on the ledger's tables (nothing was recorded:
    the transaction that met it is rolled back)."""
    user = _user_of(location)
    return LedgerError(
        f"ledger {location.shown!r}: user {user!r} may not use the ledger's tables while "
        f"{action} ({detail(error, location.conninfo)}); nothing was recorded; have the "
        f"database's owner grant them: GRANT USAGE ON SCHEMA public TO {user}; GRANT "
        f"SELECT, INSERT, UPDATE ON ledger_meta, populations, releases TO {user}"
    )


def server_error(location: LedgerLocation, action: str, error: BaseException) -> LedgerError:
    """A failed statement by kind: missing privileges, or a lost connection."""
    if isinstance(error, psycopg_module().errors.InsufficientPrivilege):
        return no_privileges(location, action, error)
    return lost(location, action, error)


def lost(location: LedgerLocation, action: str, error: BaseException) -> LedgerError:
    return LedgerError(
        f"ledger {location.shown!r}: the connection to the server was lost while {action} "
        f"({detail(error, location.conninfo)}); this run stops "
        "here and publishes nothing after it; a reservation already recorded stays spent, "
        "and running the same release id again resumes it"
    )
