"""A fresh dp_pipeline home beside a used one: no silent second cap on the same people
(dp_pipeline.release.home_registry). Each test is its own user (``$HOME``, tests/conftest.py);
the user's default home is ``$HOME/.dp_pipeline``."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from release_specs import SMALL_SPEC

import dp_pipeline.release.run as run_module
from dp_pipeline import default_key_file
from dp_pipeline.release.cli import main
from dp_pipeline.release.home_registry import FreshHomeError, register_home
from dp_pipeline.release.keys import load_or_create_master_key


def small_spec(folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "release.toml"
    path.write_text(SMALL_SPEC.format(tmp=folder))
    return str(path)


def as_home(monkeypatch, home: Path | None) -> None:
    """Run as the operator of ``home`` (None: the user's default home, no variable)."""
    if home is None:
        monkeypatch.delenv("DP_PIPELINE_HOME", raising=False)
    else:
        monkeypatch.setenv("DP_PIPELINE_HOME", str(home))


@pytest.fixture
def user_default_home(monkeypatch) -> Path:
    """The user's default home after a first release from it (as README's job does)."""
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    default = Path(os.environ["HOME"]) / ".dp_pipeline"
    as_home(monkeypatch, None)
    assert main(["run", small_spec(default), "--quiet"]) == 0
    assert (default / "master.key").is_file()
    return default


def no_engine(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the engine started")

    monkeypatch.setattr(run_module, "open_input", refuse)


def test_a_fresh_home_beside_the_default_one_is_refused_before_the_engine(
    user_default_home, tmp_path, monkeypatch, capsys
):
    fresh = tmp_path / "fresh"
    as_home(monkeypatch, fresh)
    no_engine(monkeypatch)
    capsys.readouterr()
    assert main(["run", small_spec(fresh), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert f"no master key at {str(fresh / 'master.key')!r}" in error
    assert "a new one would start a second cap on the same people" in error
    assert f"the dp_pipeline home {str(user_default_home.resolve())!r} already holds" in error
    assert "dp-release key --new-home" in error and "Nothing was read or reserved" in error
    assert not (fresh / "master.key").exists() and not (fresh / "ledger.sqlite").exists()


def test_a_home_recorded_for_the_user_counts_as_well(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    first = tmp_path / "first"
    as_home(monkeypatch, first)
    assert main(["run", small_spec(first), "--quiet"]) == 0
    registry = json.loads((Path(os.environ["HOME"]) / ".dp_pipeline" / "homes.json").read_text())
    assert str(first.resolve()) in registry["homes"]
    second = tmp_path / "second"
    as_home(monkeypatch, second)
    capsys.readouterr()
    assert main(["run", small_spec(second), "--quiet"]) == 2
    assert f"the dp_pipeline home {str(first.resolve())!r} already holds" in capsys.readouterr().err
    # dp-release key is refused the same way; --new-home creates the key, on record.
    assert main(["key"]) == 2
    assert "dp-release key --new-home" in capsys.readouterr().err
    assert main(["key", "--new-home", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["new_home"] is True
    registry = json.loads((Path(os.environ["HOME"]) / ".dp_pipeline" / "homes.json").read_text())
    (new_cap,) = registry["homes"][str(second.resolve())]["new_cap"]
    assert new_cap["fingerprint"] == created["fingerprint"]
    assert new_cap["beside"] == [str(first.resolve())]
    assert main(["run", small_spec(second), "--quiet"]) == 0


def test_a_new_key_named_by_flags_beside_a_used_home_is_refused(
    user_default_home, tmp_path, monkeypatch, capsys
):
    # The same home, but a new key file and a new ledger named on the command line.
    no_engine(monkeypatch)
    spec_file = small_spec(user_default_home)
    other_key, other_ledger = tmp_path / "new.key", tmp_path / "new.sqlite"
    capsys.readouterr()
    status = main(
        ["run", spec_file, "--quiet", "--key-file", str(other_key), "--ledger", str(other_ledger)]
    )
    assert status == 2
    error = capsys.readouterr().err
    assert f"dp-release key --new-home --key-file {other_key}" in error
    assert not other_key.exists() and not other_ledger.exists()


def test_the_python_key_loader_creates_no_fresh_key_beside_a_used_home(
    user_default_home, tmp_path, monkeypatch
):
    fresh = tmp_path / "notebook-home"
    as_home(monkeypatch, fresh)
    with pytest.raises(FreshHomeError) as refused:
        load_or_create_master_key(default_key_file())
    message = str(refused.value)
    assert f"the dp_pipeline home {str(user_default_home.resolve())!r} already holds" in message
    assert "dp-release key --new-home" in message
    assert not (fresh / "master.key").exists()
    # The job's key, from the user's default home, loads as before.
    as_home(monkeypatch, None)
    assert load_or_create_master_key(default_key_file()).fingerprint


def test_homes_registered_at_once_are_all_kept(tmp_path):
    homes = [tmp_path / f"home-{number}" for number in range(16)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(register_home, homes))
    registry = json.loads((Path(os.environ["HOME"]) / ".dp_pipeline" / "homes.json").read_text())
    assert set(registry["homes"]) == {str(home.resolve()) for home in homes}


def test_a_home_whose_key_was_bound_by_a_move_is_registered(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    home = tmp_path / "moved-home"
    as_home(monkeypatch, home)
    assert main(["key"]) == 0
    assert main(["key", "--bind", str(tmp_path / "ledger.sqlite")]) == 0
    registry = json.loads((Path(os.environ["HOME"]) / ".dp_pipeline" / "homes.json").read_text())
    assert str(home.resolve()) in registry["homes"]
