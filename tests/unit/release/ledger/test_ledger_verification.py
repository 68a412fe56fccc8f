"""Readers never trust unverified ledger rows silently, a seal marker cannot be reset, and a
server ledger is bound by its id, not its host text (dp_pipeline.release.ledger.verification,
dp_pipeline.release.key_binding). Each case edits a real ledger as someone who can write its
file or database, but does not hold the key, would."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from release_specs import SMALL_SPEC

from dp_pipeline import Budget, DiscreteGaussian, MasterKey, PrivacyAccountant, Session
from dp_pipeline.release.cli import main
from dp_pipeline.release.key_binding import KeyBindingError, bind_key
from dp_pipeline.release.ledger.integrity import LedgerTamperedError
from dp_pipeline.release.ledger.store import Ledger

KEY_HEX = "a1e55156dc073f5ec896b87df934e6adcb6b761e681298021a5a528e86896c08"
KEY = MasterKey(hashlib.sha256(b"ledger verification tests").digest())


def small_spec(folder: Path) -> str:
    path = folder / "release.toml"
    path.write_text(SMALL_SPEC.format(tmp=folder))
    return str(path)


def smaller_accountant() -> str:
    """An accountant of rho 1/200: far less than the release recorded."""
    state = PrivacyAccountant().add(DiscreteGaussian(Fraction(100)), 1).to_dict()
    return json.dumps(state, sort_keys=True, separators=(",", ":"))


def edit(location: str, *statements: str, parameters: tuple = ()) -> None:
    """Change the ledger by hand (no key): SQLite file or PostgreSQL database."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as connection:
            for statement in statements:
                connection.execute(statement.replace("?", "%s"), parameters)
    else:
        with sqlite3.connect(location) as connection:
            for statement in statements:
                connection.execute(statement, parameters)


RESET = (
    "UPDATE releases SET mac = NULL",
    "DELETE FROM ledger_meta WHERE name = 'rows_sealed' OR substr(name, 1, 5) = 'head/'",
    "UPDATE ledger_meta SET value = '2' WHERE name = 'schema_version'",
)


@pytest.fixture
def released(tmp_path, monkeypatch):
    """A real SQLite ledger with one committed release, made with the key in the environment."""
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    spec_file = small_spec(tmp_path)
    assert main(["run", spec_file, "--quiet"]) == 0
    return spec_file, str(tmp_path / "ledger.sqlite")


def test_plan_with_the_key_refuses_a_hand_edited_row_as_the_run_would(released, capsys):
    spec_file, ledger = released
    edit(ledger, "UPDATE releases SET accountant = ?", parameters=(smaller_accountant(),))
    capsys.readouterr()
    assert main(["plan", spec_file, "--release-id", "small-2"]) == 2
    error = capsys.readouterr().err
    assert "ledger row of release 'small-1' (population 'small-people') does not match" in error
    assert "Restore the ledger from a backup" in error


def test_plan_and_ledger_without_the_key_say_the_rows_are_unverified(released, monkeypatch, capsys):
    spec_file, ledger = released
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")
    capsys.readouterr()
    assert main(["plan", spec_file, "--release-id", "small-2"]) == 0
    said = capsys.readouterr().out
    assert "rows unverified: no master key was given" in said
    assert "--key-file PATH or $DP_PIPELINE_MASTER_KEY" in said
    assert main(["ledger", "--ledger", ledger]) == 0
    assert "rows unverified: no master key was given" in capsys.readouterr().out
    assert main(["ledger", "--ledger", ledger, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows["verified"] is False and "no master key was given" in rows["why"]
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    assert main(["plan", spec_file, "--release-id", "small-2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ledger"]["rows"]["verified"] is True


def test_the_unkeyed_ledger_command_verifies_with_the_key_and_refuses_an_edit(released, capsys):
    _, ledger = released
    capsys.readouterr()
    assert main(["ledger", "--ledger", ledger]) == 0
    assert "rows verified under the ledger's master key" in capsys.readouterr().out
    edit(ledger, "UPDATE releases SET accountant = ?", parameters=(smaller_accountant(),))
    assert main(["ledger", "--ledger", ledger]) == 2
    assert "does not match its authentication code" in capsys.readouterr().err


def test_a_schema_marker_reset_does_not_let_blanked_codes_be_adopted(released, capsys):
    spec_file, ledger = released
    # Right after the first release: the home recorded the ledger sealed when it bound.
    edit(ledger, "UPDATE releases SET accountant = ?", parameters=(smaller_accountant(),))
    edit(ledger, *RESET)
    capsys.readouterr()
    assert main(["run", spec_file, "--quiet", "--release-id", "small-3"]) == 2
    error = capsys.readouterr().err
    assert "its seal marker was removed or its schema version edited back" in error
    assert "Restore the ledger from a backup" in error
    assert Ledger(ledger).entry("small-3") is None  # nothing reserved
    # The unkeyed reader does not present the reset rows as verified either.
    assert main(["ledger", "--ledger", ledger]) == 0
    assert "rows unverified: the ledger holds no authentication codes" in (capsys.readouterr().out)


def people() -> pd.DataFrame:
    return pd.DataFrame({"person_id": range(40), "sex": ["F", "M"] * 20})


def session(ledger, population: str = "p") -> Session:
    return Session(
        key=KEY,
        population=population,
        privacy_unit="person_id",
        budget=Budget(rho=1),
        cap=Budget(rho=1),
        ledger=ledger,
    )


@pytest.mark.postgresql
def test_a_schema_marker_reset_on_a_server_ledger_is_refused(postgres_server):
    url = postgres_server.url(postgres_server.create_database())
    first = session(url)
    first.count(people(), by="sex", domains={"sex": ["F", "M"]}, rho=Fraction(1, 10))
    edit(url, "UPDATE releases SET accountant = ?", parameters=(smaller_accountant(),))
    edit(url, *RESET)
    with Ledger(url, key=KEY) as ledger, pytest.raises(LedgerTamperedError) as refused:
        bind_key(KEY, ledger)
    assert "its seal marker was removed or its schema version edited back" in str(refused.value)


@pytest.mark.postgresql
def test_a_server_ledger_is_bound_by_its_id_not_its_host_text(postgres_server):
    database = postgres_server.create_database()
    numeric = postgres_server.url(database)
    assert "@127.0.0.1:" in numeric
    named = numeric.replace("@127.0.0.1:", "@localhost:")
    first = session(numeric)
    first.count(people(), by="sex", domains={"sex": ["F", "M"]}, rho=Fraction(1, 10))
    again = session(named)  # the same server and database: the same ledger
    again.count(people(), by="sex", domains={"sex": ["F", "M"]}, rho=Fraction(1, 10))
    other = postgres_server.url(postgres_server.create_database())
    with pytest.raises(KeyBindingError) as refused:
        session(other.replace("@127.0.0.1:", "@localhost:"))
    message = str(refused.value)
    assert "another ledger (its database holds another ledger id)" in message
    assert "dp-release key --bind" in message


def test_the_ledger_command_names_the_key_flag_when_the_home_is_relative(
    released, monkeypatch, capsys
):
    _, ledger = released
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")
    monkeypatch.setenv("DP_PIPELINE_HOME", "relative/home")
    capsys.readouterr()
    assert main(["ledger", "--ledger", ledger]) == 2
    error = capsys.readouterr().err
    assert "--key-file: not given, and $DP_PIPELINE_HOME = 'relative/home'" in error
