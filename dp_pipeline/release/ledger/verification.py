"""Whether a ledger's rows were checked against their authentication codes, said every time.

Readers that change nothing (``dp-release plan``, ``dp-release ledger``) sum a population's
spend from its rows as `Ledger.reserve` does. A ledger sealed under its master key
(`dp_pipeline.release.ledger.integrity`) can be checked only with that key, so these readers
never present the rows as trustworthy silently:

- with the ledger's key, every population read is verified first, and a mismatch is the
  same `LedgerTamperedError` a run would raise (a plan answers as the run would);
- without it (no key at hand, another key, or a ledger that holds no codes yet), the
  answer says the rows are **unverified** and how to verify them.

Guarantee. `check_rows` returns ``verified=True`` only after every row and head of the
named populations matched its code under the ledger's own key; any other outcome is
reported as unverified, never as verified.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.keys import ENVIRONMENT_VARIABLE
from dp_pipeline.release.ledger.integrity import SEALED, verify_population

__all__ = ["RowsCheck", "check_rows"]


@dataclass(frozen=True)
class RowsCheck:
    """The outcome of checking a ledger's rows: ``verified`` and one sentence saying why."""

    verified: bool
    text: str

    def to_dict(self) -> dict:
        return {"verified": self.verified, "why": self.text}


def _meta(connection, name: str, has_meta: bool) -> str | None:
    if not has_meta:
        return None
    row = connection.execute("SELECT value FROM ledger_meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else row["value"]


def _how_to_verify(fingerprint: str | None) -> str:
    named = "" if fingerprint is None else f" (fingerprint {fingerprint})"
    return (
        f"give the ledger's master key{named} to verify them: --key-file PATH or "
        f"${ENVIRONMENT_VARIABLE}"
    )


def check_rows(
    connection,
    key: MasterKey | None,
    populations: Iterable[str],
    shown: str,
    *,
    has_meta: bool = True,
) -> RowsCheck:
    """Check ``populations``' rows under ``key`` inside the caller's read transaction.

    Raises `LedgerTamperedError` when the key is the ledger's and a row, a head or a cap
    does not match; otherwise says whether the rows are verified. ``has_meta`` False: a
    ledger of the first schema (no ``ledger_meta`` table, hence no codes).
    """
    recorded = _meta(connection, "key_fingerprint", has_meta)
    if _meta(connection, SEALED, has_meta) is None:
        return RowsCheck(
            False,
            "rows unverified: the ledger holds no authentication codes yet (written before "
            "rows were authenticated, or never by a master key); the next run with its "
            "key seals them",
        )
    if key is None:
        return RowsCheck(
            False,
            f"rows unverified: no master key was given, so nothing vouches that the rows "
            f"were not edited by hand; {_how_to_verify(recorded)}",
        )
    if key.fingerprint != recorded:
        return RowsCheck(
            False,
            f"rows unverified: the master key given (fingerprint {key.fingerprint}) is not "
            f"the ledger's; {_how_to_verify(recorded)}",
        )
    for population in populations:
        verify_population(connection, key, population, shown)
    return RowsCheck(True, f"rows verified under the ledger's master key ({recorded})")
