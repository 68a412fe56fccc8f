"""Authenticated ledger rows: a hand edit that shrinks a population's spend is refused
(dp_pipeline.release.ledger.integrity), on SQLite and PostgreSQL (``ledger_at``)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from fractions import Fraction

import pytest

from dp_pipeline import Budget, DiscreteGaussian, LedgerError, MasterKey, PrivacyAccountant
from dp_pipeline.release.ledger.integrity import LedgerTamperedError
from dp_pipeline.release.ledger.store import Ledger

KEY = MasterKey(hashlib.sha256(b"ledger integrity tests").digest())
CAP = Budget(rho=Fraction(1))


def accountant(sigma2) -> PrivacyAccountant:
    """One discrete Gaussian count: rho = 1 / (2 sigma2) (CKS Prop. 5)."""
    return PrivacyAccountant().add(DiscreteGaussian(Fraction(sigma2)), 1)


def reserve(ledger: Ledger, release_id: str, sigma2=2, population="p") -> None:
    ledger.reserve(
        population=population,
        release_id=release_id,
        accountant=accountant(sigma2),
        fingerprint=f"input of {release_id}",
        cap=CAP,
        key_fingerprint=KEY.fingerprint,
    )


def edit(location: str, statement: str, parameters: tuple = ()) -> None:
    """Change the ledger by hand, as someone who can write its file or database would."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as connection:
            connection.execute(statement.replace("?", "%s"), parameters)
    else:
        with sqlite3.connect(location) as connection:
            connection.execute(statement, parameters)


def two_releases(ledger_at, name: str = "ledger") -> str:
    """A sealed ledger with two releases of rho 1/4 each (cap rho 1)."""
    location = ledger_at(name)
    with Ledger(location, key=KEY) as ledger:
        reserve(ledger, "r1")
        reserve(ledger, "r2")
    return location


def test_a_hand_edited_accountant_is_refused_naming_the_release(ledger_at):
    location = two_releases(ledger_at)
    # rho 1/4 becomes rho 1/200: the edit would leave room for more releases.
    smaller = json.dumps(accountant(100).to_dict(), sort_keys=True, separators=(",", ":"))
    edit(location, "UPDATE releases SET accountant = ? WHERE release_id = 'r1'", (smaller,))
    with Ledger(location, key=KEY) as ledger:
        with pytest.raises(LedgerTamperedError) as refused:
            reserve(ledger, "r3")
        message = str(refused.value)
        assert "ledger row of release 'r1' (population 'p') does not match its authentication" in (
            message
        )
        assert "Restore the ledger from a backup taken before the edit" in message
        assert ledger.entry("r3") is None  # nothing reserved
        with pytest.raises(LedgerTamperedError, match="release 'r1'"):
            ledger.spent("p")


def test_a_row_marked_aborted_or_removed_or_a_raised_cap_is_refused(ledger_at):
    for number, statement in enumerate(
        [
            "UPDATE releases SET status = 'aborted', state = 'aborted' WHERE release_id = 'r2'",
            "DELETE FROM releases WHERE release_id = 'r2'",
            "UPDATE populations SET cap = '{\"rho\":\"100\"}' WHERE name = 'p'",
            "UPDATE releases SET mac = NULL WHERE release_id = 'r2'",
        ]
    ):
        location = two_releases(ledger_at, f"ledger{number}")
        edit(location, statement)
        with Ledger(location, key=KEY) as ledger, pytest.raises(LedgerTamperedError) as refused:
            reserve(ledger, "r3")
        message = str(refused.value)
        assert "outside dp_pipeline" in message and "Restore the ledger" in message, statement
        assert ("release 'r2'" in message) or ("population 'p'" in message), statement


def test_untouched_rows_and_other_populations_keep_working(ledger_at):
    location = two_releases(ledger_at)
    with Ledger(location, key=KEY) as ledger:
        reserve(ledger, "r3", population="q")
        reserve(ledger, "r4")
        spend, _ = ledger.spent("p")
        assert spend.rho == Fraction(3, 4)


def test_a_change_without_the_key_is_refused_and_leaves_nothing(ledger_at):
    location = two_releases(ledger_at)
    with Ledger(location) as unkeyed:
        with pytest.raises(LedgerError) as refused:
            unkeyed.abort("r2")
        message = str(refused.value)
        assert "authenticates its rows under its master key" in message
        assert f"fingerprint {KEY.fingerprint}" in message and "--key-file PATH" in message
        assert unkeyed.entry("r2").status == "reserved"
    with Ledger(location, key=KEY) as ledger:
        ledger.abort("r2")  # with the key: allowed, and sealed
        reserve(ledger, "r3")


def test_rows_written_before_authentication_are_adopted_once(ledger_at):
    location = ledger_at()
    with Ledger(location) as unkeyed:  # as a ledger of the previous version: no codes
        reserve(unkeyed, "r1")
    edit(location, "UPDATE releases SET mac = NULL")
    with Ledger(location, key=KEY) as ledger:
        reserve(ledger, "r2")  # the first keyed write seals the ledger, r1 as it was
    edit(location, "UPDATE releases SET mac = NULL WHERE release_id = 'r1'")
    with Ledger(location, key=KEY) as ledger, pytest.raises(LedgerTamperedError, match="'r1'"):
        reserve(ledger, "r3")
