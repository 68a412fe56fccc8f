"""Re-emitting a committed release: from its intact published copy without recomputing,
recomputed only by the engine and versions that made it, and earlier copies at the
output checked before anything is reserved (pandas engine, both ledger backends)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dp_pipeline.release import reemit
from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.outcome import ExitCode
from dp_pipeline.release.reemit import EngineChangedError, check_maker, made_by
from dp_pipeline.release.tables import engines
from tests.system.cli.test_cli_exit_codes import run_json, write_spec


def no_recompute(monkeypatch) -> None:
    """Make any computation of the tables fail the test."""

    def computed(*arguments, **keywords):
        raise AssertionError("the release was recomputed")

    monkeypatch.setattr(engines, "compute_tables", computed)


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_an_intact_published_copy_is_reemitted_without_recomputing(
    tmp_path, capsys, monkeypatch, ledger_at
):
    spec_file = write_spec(tmp_path)
    ledger = ledger_at()
    assert run_json(capsys, spec_file, "--ledger", ledger)[0] == ExitCode.PUBLISHED
    folder = tmp_path / "out" / "small-1"
    published = contents(folder)
    no_recompute(monkeypatch)
    status, line, _ = run_json(capsys, spec_file, "--ledger", ledger)
    assert status == ExitCode.ALREADY_COMMITTED, line
    assert line["output"] == str(folder)
    assert contents(folder) == published
    assert sorted(p.name for p in folder.parent.iterdir()) == ["small-1"]  # nothing hidden


def test_an_altered_copy_is_recomputed_and_gets_its_recorded_bytes_back(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    assert run_json(capsys, spec_file)[0] == ExitCode.PUBLISHED
    folder = tmp_path / "out" / "small-1"
    published = contents(folder)
    table = folder / "tenure.parquet"
    table.write_bytes(table.read_bytes()[:-1] + b"!")
    assert run_json(capsys, spec_file)[0] == ExitCode.ALREADY_COMMITTED
    assert contents(folder) == published


def test_the_manifest_records_what_made_the_bytes(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    assert run_json(capsys, spec_file)[0] == ExitCode.PUBLISHED
    manifest = json.loads((tmp_path / "out" / "small-1" / "manifest.json").read_text())
    assert manifest["made_by"] == made_by("pandas")
    assert set(manifest["made_by"]) == {"engine", "engine_version", "dp_pipeline"}
    assert manifest["made_by"]["engine"] == "pandas" and manifest["made_by"]["dp_pipeline"]
    entry = Ledger(tmp_path / "ledger.sqlite").entry("small-1")
    assert entry.manifest == manifest


def test_a_recompute_by_another_version_is_refused_before_anything_is_written(
    tmp_path, capsys, monkeypatch
):
    spec_file = write_spec(tmp_path)
    assert run_json(capsys, spec_file)[0] == ExitCode.PUBLISHED
    installed = reemit._installed
    monkeypatch.setattr(
        reemit, "_installed", lambda name: "9.9.9" if name == "dp-pipeline" else installed(name)
    )
    no_recompute(monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    status, line, error = run_json(capsys, spec_file, "--output", str(elsewhere))
    assert status == ExitCode.REFUSED_CHANGED == 5
    message = line["message"]
    assert "was published by the pandas engine" in message
    assert "with dp_pipeline 9.9.9" in message and "--engine pandas" in message
    assert message.endswith("or use a new release id")
    assert message in " ".join(error.split())
    assert not elsewhere.exists() or not list(elsewhere.iterdir())  # nothing written


def test_a_recompute_on_another_engine_names_the_engine_it_was_published_with():
    recorded = {"files": {}, "made_by": {"engine": "spark", "engine_version": "4.0.0"}}
    with pytest.raises(EngineChangedError, match=r"published by the spark engine 4\.0\.0;") as e:
        check_maker("small-1", recorded, "spark", "pandas")
    assert "run this release id with --engine spark and that version" in str(e.value)
    # A ledger written before the versions were recorded: its engine column decides.
    with pytest.raises(EngineChangedError, match="--engine spark"):
        check_maker("small-1", {"files": {}}, "spark", "pandas")
    check_maker("small-1", {"files": {}}, "pandas", "pandas")
    check_maker("small-1", {"files": {}, "made_by": made_by("pandas")}, "pandas", "pandas")


def under_second_ledger(tmp_path: Path, second: str, capsys) -> list[str]:
    """The same key moved on purpose to another ledger (``dp-release key --bind``, the one
    way a key changes ledgers): the output folder still holds the copy published under
    the first."""
    assert main(["key", "--bind", second, "--key-file", str(tmp_path / "master.key")]) == 0
    capsys.readouterr()
    return ["--ledger", second]


def test_a_copy_made_under_another_ledger_is_refused_before_the_reservation(
    tmp_path, capsys, ledger_at
):
    spec_file = write_spec(tmp_path)
    first, second = ledger_at("first"), ledger_at("second")
    assert run_json(capsys, spec_file, "--ledger", first)[0] == ExitCode.PUBLISHED
    folder = tmp_path / "out" / "small-1"
    published = contents(folder)
    status, line, _ = run_json(capsys, spec_file, *under_second_ledger(tmp_path, second, capsys))
    assert status == ExitCode.SPEC_ERROR == 2, line
    assert (
        "that this ledger does not record: it was published under another ledger"
        in (line["message"])
    )
    assert "cumulative" not in line  # nothing reserved
    assert Ledger(second).history() == []
    assert contents(folder) == published


def test_a_copy_of_the_id_with_another_identity_is_refused_as_changed_before_the_reservation(
    tmp_path, capsys, ledger_at
):
    spec_file = write_spec(tmp_path)
    first, second = ledger_at("first"), ledger_at("second")
    assert run_json(capsys, spec_file, "--ledger", first)[0] == ExitCode.PUBLISHED
    arguments = under_second_ledger(tmp_path, second, capsys)
    status, line, _ = run_json(capsys, spec_file, *arguments, "--persons", "2000")
    assert status == ExitCode.REFUSED_CHANGED == 5, line
    assert "is already published at" in line["message"]
    assert line["message"].endswith("Use a new release id.")
    assert Ledger(second).history() == []


@pytest.mark.spark
def test_a_recompute_on_the_other_engine_is_refused_before_anything_is_written(tmp_path, capsys):
    """The finding: a re-emission on Spark of a release the pandas engine published wrote
    its tables into a hidden folder before the byte check refused them."""
    spec_file = write_spec(tmp_path)
    assert run_json(capsys, spec_file)[0] == ExitCode.PUBLISHED  # pandas
    elsewhere = tmp_path / "elsewhere"
    status, line, _ = run_json(capsys, spec_file, "--engine", "spark", "--output", str(elsewhere))
    assert status == ExitCode.REFUSED_CHANGED == 5, line
    assert "was published by the pandas engine" in line["message"]
    assert "run this release id with --engine pandas" in line["message"]
    assert not elsewhere.exists() or not list(elsewhere.iterdir())
