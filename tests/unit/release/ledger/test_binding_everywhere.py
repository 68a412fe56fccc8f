"""A key's binding and a ledger's site are seen by every run, whatever home or copy it uses
(dp_pipeline.release.key_binding, key_records, ledger_sites). Each operator here is a user
of their own: ``$HOME`` and ``$DP_PIPELINE_HOME``."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from postgres_cluster import postgres_binaries
from release_specs import SMALL_SPEC

import dp_pipeline.release.run as run_module
from dp_pipeline import Budget, MasterKey, Session
from dp_pipeline.release.cli import main
from dp_pipeline.release.key_binding import KeyBindingError
from dp_pipeline.release.key_records import RECORD_PREFIX
from dp_pipeline.release.ledger.integrity import LedgerTamperedError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_sites import check_site

KEY_HEX = "3e9a1c7b5d2f8e0a4c6b9d1f3a5e7c0b2d4f6a8c1e3b5d7f9a0c2e4b6d8f1a3c"


def operator(monkeypatch, folder: Path) -> str:
    """Become the operator whose user home, dp_pipeline home and spec are in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(folder / "user"))
    monkeypatch.setenv("DP_PIPELINE_HOME", str(folder))
    spec = folder / "release.toml"
    spec.write_text(SMALL_SPEC.format(tmp=folder))
    return str(spec)


def no_engine(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the engine started")

    monkeypatch.setattr(run_module, "open_input", refuse)


def releases(ledger: Path) -> list[str]:
    with Ledger(ledger) as opened:
        return [entry.release_id for entry in opened.history()]


# ----------------------------------------------------------------- the key's binding


def test_a_copied_key_file_in_another_users_home_is_refused_with_a_new_ledger(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    first = operator(monkeypatch, tmp_path / "a")
    assert main(["run", first, "--quiet"]) == 0
    key_file = tmp_path / "a" / "master.key"
    assert RECORD_PREFIX in key_file.read_text()  # the key file carries its ledger
    key = MasterKey.from_file(key_file)  # the key itself still reads as before
    # Another user (own $HOME and home: no registry, no bindings) with a copy of the key.
    second = operator(monkeypatch, tmp_path / "b")
    shutil.copy2(key_file, tmp_path / "b" / "master.key")
    no_engine(monkeypatch)
    capsys.readouterr()
    assert main(["run", second, "--quiet", "--release-id", "b-1"]) == 2
    error = capsys.readouterr().err
    bound = str((tmp_path / "a" / "ledger.sqlite").resolve())
    assert f"master key {key.fingerprint} is bound to the ledger {bound!r}" in error
    assert f"recorded in the key file {str(tmp_path / 'b' / 'master.key')!r}" in error
    assert f"dp-release key --bind {tmp_path / 'b' / 'ledger.sqlite'}" in error
    assert "Nothing was read or reserved" in error and KEY_HEX not in error
    assert not (tmp_path / "b" / "ledger.sqlite").exists()


def test_a_key_from_the_environment_in_another_home_of_the_user_is_refused(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    user = tmp_path / "user"
    first = operator(monkeypatch, tmp_path / "a")
    monkeypatch.setenv("HOME", str(user))
    assert main(["run", first, "--quiet"]) == 0
    second = operator(monkeypatch, tmp_path / "b")  # another $DP_PIPELINE_HOME ...
    monkeypatch.setenv("HOME", str(user))  # ... of the same user
    no_engine(monkeypatch)
    capsys.readouterr()
    assert main(["run", second, "--quiet", "--release-id", "b-1"]) == 2
    error = capsys.readouterr().err
    assert f"recorded in {str(tmp_path / 'a' / 'bindings.json')!r}" in error
    assert "is bound to the ledger" in error and "dp-release key --bind" in error
    assert not (tmp_path / "b" / "ledger.sqlite").exists()


def test_a_binding_line_edited_in_the_key_file_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    first = operator(monkeypatch, tmp_path / "a")
    assert main(["run", first, "--quiet"]) == 0
    key_file = tmp_path / "a" / "master.key"
    text = key_file.read_text()
    old = str((tmp_path / "a" / "ledger.sqlite").resolve())
    key_file.write_text(text.replace(old, str(tmp_path / "b" / "ledger.sqlite")))
    second = operator(monkeypatch, tmp_path / "b")
    shutil.copy2(key_file, tmp_path / "b" / "master.key")
    no_engine(monkeypatch)
    capsys.readouterr()
    assert main(["run", second, "--quiet", "--release-id", "b-1"]) == 2
    error = capsys.readouterr().err
    assert "its binding record on line 2 does not verify under the key" in error
    assert "edited by hand or copied from another key's file" in error


def test_a_moved_key_file_names_its_new_ledger_everywhere(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    first = operator(monkeypatch, tmp_path / "a")
    assert main(["run", first, "--quiet"]) == 0
    key_file = tmp_path / "a" / "master.key"
    moved = tmp_path / "new" / "ledger.sqlite"
    assert main(["key", "--bind", str(moved), "--key-file", str(key_file)]) == 0
    lines = [line for line in key_file.read_text().splitlines() if line.startswith("#")]
    assert len(lines) == 2 and str(moved.resolve()) in lines[-1]
    # A copy of the moved key file elsewhere runs on the new ledger only.
    second = operator(monkeypatch, tmp_path / "b")
    shutil.copy2(key_file, tmp_path / "b" / "master.key")
    capsys.readouterr()
    args = ["run", second, "--quiet", "--release-id", "b-1"]
    assert main([*args, "--ledger", str(moved)]) == 0
    assert main([*args, "--release-id", "b-2"]) == 2
    assert f"is bound to the ledger {str(moved.resolve())!r}" in capsys.readouterr().err


# ----------------------------------------------------------------- the ledger's site


def test_a_copied_sqlite_ledger_is_refused_until_moved_on_purpose(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    first = operator(monkeypatch, tmp_path / "a")
    assert main(["run", first, "--quiet"]) == 0
    original = tmp_path / "a" / "ledger.sqlite"
    # Another operator, homes of their own, a byte copy of the ledger: a second live copy.
    second = operator(monkeypatch, tmp_path / "b")
    copy = tmp_path / "b" / "ledger.sqlite"
    shutil.copy2(original, copy)
    capsys.readouterr()
    with monkeypatch.context() as engine:
        no_engine(engine)
        assert main(["run", second, "--quiet", "--release-id", "b-1"]) == 2
    error = capsys.readouterr().err
    assert "is not where its releases were recorded" in error
    assert f"it records that it lives at {str(original.resolve())!r}: this is a copy" in error
    assert f"dp-release key --bind {copy}" in error and "Nothing was read or reserved" in error
    assert releases(copy) == ["small-1"]
    # Moved on purpose: the copy is the ledger, the original is retired where it is.
    assert main(["key", "--bind", str(copy)]) == 0
    assert main(["run", second, "--quiet", "--release-id", "b-1"]) == 0
    with Ledger(copy) as moved:
        assert json.loads(moved.meta("sites"))[-1]["moved_from"] == str(original.resolve())
    operator(monkeypatch, tmp_path / "a")
    capsys.readouterr()
    assert main(["run", first, "--quiet", "--release-id", "a-2"]) == 2
    error = capsys.readouterr().err
    assert f"it was moved to {str(copy.resolve())!r} on purpose" in error
    assert releases(original) == ["small-1"]


def test_a_hand_edited_site_record_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    first = operator(monkeypatch, tmp_path / "a")
    assert main(["run", first, "--quiet"]) == 0
    second = operator(monkeypatch, tmp_path / "b")
    copy = tmp_path / "b" / "ledger.sqlite"
    shutil.copy2(tmp_path / "a" / "ledger.sqlite", copy)
    with sqlite3.connect(copy) as connection:  # the copy claims its own place
        (text,) = connection.execute(
            "SELECT value FROM ledger_meta WHERE name = 'sites'"
        ).fetchone()
        edited = text.replace(str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve()))
        connection.execute("UPDATE ledger_meta SET value = ? WHERE name = 'sites'", (edited,))
    no_engine(monkeypatch)
    capsys.readouterr()
    assert main(["run", second, "--quiet", "--release-id", "b-1"]) == 2
    error = capsys.readouterr().err
    assert "the record of where it lives does not verify under its master key" in error
    with Ledger(copy) as opened, pytest.raises(LedgerTamperedError):
        check_site(opened, MasterKey.from_hex(KEY_HEX))


def people() -> pd.DataFrame:
    return pd.DataFrame({"person_id": range(40), "sex": ["F", "M"] * 20})


def session(url: str, key: MasterKey) -> Session:
    return Session(
        key=key,
        population="p",
        privacy_unit="person_id",
        budget=Budget(rho=1),
        cap=Budget(rho=1),
        ledger=url,
    )


@pytest.mark.postgresql
@pytest.mark.system
def test_a_pg_dump_restored_into_another_database_is_refused(
    postgres_server, tmp_path, monkeypatch
):
    key = MasterKey.from_hex(KEY_HEX)
    operator(monkeypatch, tmp_path / "a")
    source = postgres_server.create_database()
    first = session(postgres_server.url(source), key)
    first.count(people(), by="sex", domains={"sex": ["F", "M"]}, rho=Fraction(1, 10))
    restored = postgres_server.create_database("restored")
    binaries = postgres_binaries()
    dump = subprocess.run(
        [str(binaries / "pg_dump"), "--no-owner", postgres_server.url(source)],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(
        [str(binaries / "psql"), "-q", "-v", "ON_ERROR_STOP=1", postgres_server.url(restored)],
        input=dump,
        check=True,
        capture_output=True,
    )
    # Another operator with homes of their own and the key: the restored copy is refused.
    operator(monkeypatch, tmp_path / "b")
    copy_url = postgres_server.url(restored)
    with pytest.raises(KeyBindingError) as refused:
        session(copy_url, key)
    message = str(refused.value)
    assert "is not where its releases were recorded" in message
    assert f"database {source}" in message and "this is a copy" in message
    assert "dp-release key --bind" in message and postgres_server.password not in message
    with Ledger(copy_url) as copy:
        assert [entry.release_id for entry in copy.history()] == [first.release_id + "/0"]


@pytest.mark.postgresql
def test_a_template_copy_of_a_server_ledger_is_refused_and_moves_on_purpose(
    postgres_server, tmp_path, monkeypatch, capsys
):
    key = MasterKey.from_hex(KEY_HEX)
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    operator(monkeypatch, tmp_path / "a")
    source = postgres_server.create_database()
    first = session(postgres_server.url(source), key)
    first.count(people(), by="sex", domains={"sex": ["F", "M"]}, rho=Fraction(1, 10))
    postgres_server.terminate(source, "")
    copied = f"copied_{source}"
    with postgres_server.admin() as admin:
        admin.execute(f'CREATE DATABASE "{copied}" TEMPLATE "{source}"')
    operator(monkeypatch, tmp_path / "b")
    with pytest.raises(KeyBindingError) as refused:
        session(postgres_server.url(copied), key)
    assert f"database {source}" in str(refused.value)
    # Moved on purpose (recorded): the copy is the ledger, the original refused from now on.
    shown = postgres_server.url(copied).replace(f":{postgres_server.password}@", ":***@")
    assert main(["key", "--bind", postgres_server.url(copied)]) == 0
    assert f"is now bound to the ledger {shown!r}" in capsys.readouterr().out
    session(postgres_server.url(copied), key)
    with pytest.raises(KeyBindingError) as retired:
        session(postgres_server.url(source), key)
    assert "it was moved to 'postgresql cluster" in str(retired.value)
    assert f"database {copied}' on purpose" in str(retired.value)
    assert os.environ["DP_PIPELINE_MASTER_KEY"] not in str(retired.value)


def test_a_session_on_a_copied_key_file_is_refused_with_a_new_ledger(tmp_path, monkeypatch):
    """A key file that a Session bound carries its ledger: another user's Session with a
    copy of it and a new ledger is refused (a Session reads the binding from the file)."""
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    operator(monkeypatch, tmp_path / "a")
    key_file = tmp_path / "a" / "session.key"
    key_file.write_text(KEY_HEX + "\n")
    first = session(str(tmp_path / "a" / "ledger.sqlite"), MasterKey.from_file(key_file))
    first.count(people(), by="sex", domains={"sex": ["F", "M"]}, rho=Fraction(1, 10))
    assert RECORD_PREFIX in key_file.read_text()  # the Session wrote the binding there
    operator(monkeypatch, tmp_path / "b")  # another user: no registry, no bindings
    copy = tmp_path / "b" / "session.key"
    shutil.copy2(key_file, copy)
    with pytest.raises(KeyBindingError, match="is bound to the ledger") as refused:
        session(str(tmp_path / "b" / "ledger.sqlite"), MasterKey.from_file(copy))
    assert "dp-release key --bind" in str(refused.value) and KEY_HEX not in str(refused.value)
    # A key given as bytes (no file) is held by the homes only, as before.
    assert MasterKey.from_hex(KEY_HEX).source is None
