"""Where the ledger and the key are: the spec's folder or the dp_pipeline home, never the
working directory; no key is created beside a ledger that records releases (real SQLite)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from release_specs import SMALL_SPEC

from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.locations import spec_relative
from dp_pipeline.release.spec.load import load_spec

KEY_HEX = "3f1c9a7be4d2086f5c0e1b9a7d3c5e2f4a6b8d0c1e3f5a7b9c2d4e6f8a0b1c3d"


def spec_text(tmp_path: Path, run_section: str) -> str:
    """SMALL_SPEC (outputs under tmp_path) with its [run] section replaced."""
    text = SMALL_SPEC.format(tmp=tmp_path)
    start = text.index("[run]")
    end = text.index("[domains]")
    return text[:start] + run_section + "\n" + text[end:]


def write(folder: Path, text: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "release.toml"
    path.write_text(text)
    return str(path)


def test_relative_run_paths_are_relative_to_the_spec_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    run = (
        '[run]\nengine = "pandas"\nledger = "state/ledger.sqlite"\nkey_file = "state/master.key"\n'
    )
    spec_file = write(tmp_path / "conf", spec_text(tmp_path, run))
    # The spec may name the operator's ledger and key (the home's), relative to its folder.
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "conf" / "state"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(os.path.relpath(spec_file))
    assert spec.ledger_path == str(tmp_path / "conf" / "state" / "ledger.sqlite")
    assert spec.key_file == str(tmp_path / "conf" / "state" / "master.key")
    assert main(["run", spec_file, "--quiet"]) == 0
    assert (tmp_path / "conf" / "state" / "ledger.sqlite").is_file()
    assert (tmp_path / "conf" / "state" / "master.key").is_file()
    assert sorted(p.name for p in elsewhere.iterdir()) == []  # nothing in the working dir


def test_spec_relative_keeps_urls_absolute_paths_and_expands_home(tmp_path):
    assert spec_relative("postgresql://db/ledger", tmp_path) == "postgresql://db/ledger"
    assert spec_relative("/srv/ledger.sqlite", tmp_path) == "/srv/ledger.sqlite"
    assert spec_relative("~/ledger.sqlite", tmp_path) == str(Path.home() / "ledger.sqlite")
    assert spec_relative("a/ledger.sqlite", tmp_path) == str(tmp_path / "a" / "ledger.sqlite")


def test_without_run_paths_every_working_directory_shares_the_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    home = tmp_path / "home" / ".dp_pipeline"
    monkeypatch.setenv("DP_PIPELINE_HOME", str(home))
    spec_file = write(tmp_path / "conf", spec_text(tmp_path, '[run]\nengine = "pandas"\n'))
    for index, folder in enumerate(("first", "second")):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        assert main(["run", spec_file, "--quiet", "--release-id", f"small-{index}"]) == 0
        assert not (tmp_path / folder / ".dp_pipeline").exists()
    # One ledger and one key: the second run composed the first run's spend.
    history = Ledger(home / "ledger.sqlite").history()
    assert [entry.release_id for entry in history] == ["small-0", "small-1"]
    assert history[1].cumulative["epsilon"] > history[0].cumulative["epsilon"]
    assert {"ledger.sqlite", "master.key"} <= {p.name for p in home.iterdir()}


def test_a_relative_dp_pipeline_home_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DP_PIPELINE_HOME", "relative/home")
    spec_file = write(tmp_path / "conf", spec_text(tmp_path, '[run]\nengine = "pandas"\n'))
    monkeypatch.chdir(tmp_path)
    assert main(["plan", spec_file]) == 2
    error = capsys.readouterr().err
    assert "run.ledger: not set, and $DP_PIPELINE_HOME = 'relative/home'" in error
    assert "must be an absolute path" in error
    assert main(["ledger"]) == 2
    assert "--ledger: not given, and $DP_PIPELINE_HOME" in capsys.readouterr().err
    assert not (tmp_path / "relative").exists()


def test_no_new_key_beside_a_ledger_with_releases(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    # The home's ledger and key (tmp_path): the operator's --key-file decides.
    spec_file = write(tmp_path / "conf", spec_text(tmp_path, '[run]\nengine = "pandas"\n'))
    assert main(["run", spec_file, "--quiet"]) == 0
    capsys.readouterr()
    other_key = tmp_path / "other" / "master.key"
    status = main(
        ["run", spec_file, "--quiet", "--release-id", "small-2", "--key-file", str(other_key)]
    )
    assert status == 2
    error = capsys.readouterr().err
    assert f"no master key at {str(other_key)!r}, but the ledger" in error
    assert repr(str(tmp_path / "ledger.sqlite")) in error and "--key-file PATH" in error
    assert not other_key.exists() and not other_key.parent.exists()
    assert [e.release_id for e in Ledger(tmp_path / "ledger.sqlite").history()] == ["small-1"]
    # A new key and a new ledger beside this home's: a second cap, only on purpose.
    fresh = ["--ledger", str(tmp_path / "new" / "ledger.sqlite")]
    args = ["run", spec_file, "--quiet", "--release-id", "small-2", "--key-file", str(other_key)]
    assert main([*args, *fresh]) == 2
    assert f"dp-release key --new-home --key-file {other_key}" in capsys.readouterr().err
    assert main(["key", "--new-home", "--key-file", str(other_key)]) == 0
    assert (
        main(
            [
                "run",
                spec_file,
                "--quiet",
                "--release-id",
                "small-2",
                "--key-file",
                str(other_key),
                *fresh,
            ]
        )
        == 0
    )
    assert other_key.is_file()


def test_an_old_working_directory_ledger_is_not_left_behind_silently(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    home = tmp_path / "home" / ".dp_pipeline"
    monkeypatch.setenv("DP_PIPELINE_HOME", str(home))
    spec_file = write(tmp_path / "conf", spec_text(tmp_path, '[run]\nengine = "pandas"\n'))
    old = tmp_path / "job" / ".dp_pipeline" / "ledger.sqlite"
    Ledger(old)
    monkeypatch.chdir(tmp_path / "job")
    assert main(["run", spec_file, "--quiet"]) == 2
    error = capsys.readouterr().err
    assert f"the ledger is the default {str(home / 'ledger.sqlite')!r}" in error
    assert f"the working directory holds a ledger {str(old)!r}" in error
    assert f"--ledger {str(old)!r}" in error and "DP_PIPELINE_HOME=" in error
    assert not home.exists()
    assert main(["plan", spec_file]) == 0  # plan only notes it
    assert "note: dp-release run would refuse this: run.ledger: not set" in capsys.readouterr().err
    # Named on purpose, it is used; and a home that is that folder is the same ledger.
    assert main(["run", spec_file, "--quiet", "--ledger", str(old)]) == 0
    monkeypatch.setenv("DP_PIPELINE_HOME", str(old.parent))
    assert main(["run", spec_file, "--quiet"]) == 3  # the same release again: re-emitted


@pytest.mark.parametrize("field", ["ledger", "key_file"])
def test_run_paths_in_the_spec_are_checked_as_before(tmp_path, field, capsys):
    (tmp_path / "conf" / "blocker").parent.mkdir(parents=True)
    (tmp_path / "conf" / "blocker").write_text("")
    run = f'[run]\nengine = "pandas"\n{field} = "blocker/x"\n'
    spec_file = write(tmp_path / "conf", spec_text(tmp_path, run))
    assert main(["run", spec_file, "--quiet"]) == 2
    error = capsys.readouterr().err
    assert f"run.{field} = {str(tmp_path / 'conf' / 'blocker' / 'x')!r}" in error
