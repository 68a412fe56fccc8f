"""``dp-release run``'s exit codes and its ``--json`` result line, one test per outcome
(real runs on the pandas engine, a real SQLite ledger)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from release_specs import SMALL_SPEC, operator_home

from dp_pipeline.release import protocol
from dp_pipeline.release import run as run_module
from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.outcome import (
    EXIT_CODES,
    ExitCode,
    exit_code_table,
    public_location,
)
from tests.unit.release.sources.test_release_on_invalid import csv_with, many_bad_units, spec_with

ROOT = Path(__file__).resolve().parents[3]
KEY_HEX = "5d2e8c1f9a4b7e3d6c0f2a8b5e1d9c7f3a6b0e4d8c2f5a9b1e7d3c6f0a4b8e2d"


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def write_spec(tmp_path: Path, cap: str = "{ epsilon = 8, delta = 1e-8 }") -> str:
    text = SMALL_SPEC.format(tmp=tmp_path).replace("{ epsilon = 8, delta = 1e-8 }", cap)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "small.toml"
    path.write_text(text)
    operator_home(tmp_path)  # the spec's ledger and key are the operator's
    return str(path)


def run_json(capsys, *arguments) -> tuple[int, dict, str]:
    """(exit code, the JSON line, stderr) of ``dp-release run ARGS --json --quiet``."""
    capsys.readouterr()
    status = main(["run", *arguments, "--json", "--quiet"])
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 1, captured.out  # one JSON object, nothing else on stdout
    line = json.loads(lines[0])
    assert line["exit_code"] == status
    return status, line, captured.err


def test_every_code_is_distinct_and_documented():
    assert len({int(code) for code in ExitCode}) == len(ExitCode) == len(EXIT_CODES)
    assert ExitCode.PUBLISHED == 0 and ExitCode.SPEC_ERROR == 2
    text = exit_code_table()
    for code in ExitCode:
        assert f"  {int(code)}  {code.status}:" in text
    scheduling = (ROOT / "docs" / "scheduling.md").read_text()
    assert exit_code_table(markdown=True) in scheduling


def test_published_then_already_committed(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    status, line, _ = run_json(capsys, spec_file)
    assert status == ExitCode.PUBLISHED == 0
    assert line["status"] == "published" and line["release_id"] == "small-1"
    assert line["population"] == "small-people"
    assert line["output"] == str(tmp_path / "out" / "small-1")
    assert line["ledger"] == str(tmp_path / "ledger.sqlite")
    epsilon = line["release_spend"]["epsilon"]
    assert 0 < epsilon["lower"] <= epsilon["upper"] <= 2
    assert line["release_spend"]["delta"] == "1/1000000000"
    cumulative = line["cumulative"]  # at the cap's delta, composed by the ledger
    assert 0 < cumulative["epsilon_lower"] <= cumulative["epsilon"] <= 8
    assert line["cap"] == {"rho": None, "epsilon": "8", "delta": "1/100000000"}
    status, again, _ = run_json(capsys, spec_file)
    assert status == ExitCode.ALREADY_COMMITTED == 3
    assert again["status"] == "already_committed"
    assert again["release_spend"] == line["release_spend"]


def test_a_spec_error_is_2_with_its_message_on_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(Path(write_spec(tmp_path)).read_text().replace('share = "1/2"', 'share = "2/3"'))
    status, line, error = run_json(capsys, str(bad))
    assert status == ExitCode.SPEC_ERROR == 2
    assert line["status"] == "spec_error" and line["release_id"] is None
    assert "shares sum to" in line["message"] and "\n" not in line["message"]
    assert "shares sum to" in error
    assert not (tmp_path / "ledger.sqlite").exists()


def test_over_the_cap_is_4_and_reads_nothing(tmp_path, capsys):
    spec_file = write_spec(tmp_path, cap="{ epsilon = 1, delta = 1e-8 }")
    status, line, error = run_json(capsys, spec_file)
    assert status == ExitCode.REFUSED_BUDGET == 4
    assert line["status"] == "refused_budget" and "largest epsilon" in line["message"]
    assert "refused" in error
    assert not (tmp_path / "out" / "small-1").exists()
    assert Ledger(tmp_path / "ledger.sqlite").history() == []


def test_a_release_id_on_other_data_is_5(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    assert run_json(capsys, spec_file)[0] == 0
    status, line, _ = run_json(capsys, spec_file, "--persons", "2000")
    assert status == ExitCode.REFUSED_CHANGED == 5
    assert line["status"] == "refused_changed" and line["release_id"] == "small-1"


def test_a_failure_after_the_reservation_is_6_and_the_same_command_resumes(
    tmp_path, capsys, monkeypatch
):
    spec_file = write_spec(tmp_path)

    def disk_full(name: str) -> None:
        if name == "after_noise":
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(protocol, "checkpoint", disk_full)
    status, line, error = run_json(capsys, spec_file)
    assert status == ExitCode.FAILED_RESUMABLE == 6
    assert line["status"] == "failed_resumable"
    assert line["message"] == "unexpected OSError (its message is on stderr)"
    assert line["cumulative"]["epsilon"] > 0  # the reservation is spent
    assert "No space left on device" in error and "run the same command again" in error
    monkeypatch.setattr(protocol, "checkpoint", lambda name: None)
    status, line, _ = run_json(capsys, spec_file)
    assert status == ExitCode.PUBLISHED
    entries = Ledger(tmp_path / "ledger.sqlite").history()
    assert [(e.release_id, e.status) for e in entries] == [("small-1", "committed")]


def test_refused_on_the_noisy_invalid_row_count_is_7(tmp_path, capsys):
    spec = spec_with(tmp_path, csv_with(tmp_path, many_bad_units()))
    status, line, _ = run_json(capsys, spec.source)
    assert status == ExitCode.REFUSED_INPUT == 7
    assert line["status"] == "refused_input" and "invalid_threshold" in line["message"]
    assert line["cumulative"] is not None  # charged: the count is part of the release
    status, _, _ = run_json(capsys, spec.source)
    assert status == ExitCode.REFUSED_INPUT  # the same id decides the same


def test_a_run_holding_the_lease_makes_another_8(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    with Ledger(tmp_path / "ledger.sqlite").lease("small-1"):
        status, line, _ = run_json(capsys, spec_file)
    assert status == ExitCode.BUSY == 8
    assert line["status"] == "busy" and "holds the lease" in line["message"]
    assert run_json(capsys, spec_file)[0] == ExitCode.PUBLISHED


def test_an_unexpected_error_before_the_reservation_is_1_with_its_traceback(
    tmp_path, capsys, monkeypatch
):
    def broken(*arguments):
        raise RuntimeError("a bug")

    monkeypatch.setattr(run_module, "release_identity", broken)
    capsys.readouterr()
    with pytest.raises(RuntimeError, match="a bug"):  # Python's exit status 1, its traceback
        main(["run", write_spec(tmp_path), "--json", "--quiet"])
    line = json.loads(capsys.readouterr().out)
    assert line["status"] == "error" and line["exit_code"] == 1
    assert "a bug" not in line["message"]


def test_the_console_script_exits_with_the_codes(tmp_path):
    """A subprocess, as a scheduler sees it: the status and stdout's one JSON line."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    spec_file = write_spec(tmp_path)
    command = [sys.executable, "-m", "dp_pipeline.release", "run", spec_file, "--json", "--quiet"]
    for expected in (ExitCode.PUBLISHED, ExitCode.ALREADY_COMMITTED):
        done = subprocess.run(command, env=environment, capture_output=True, text=True)
        assert done.returncode == expected, done.stderr
        assert json.loads(done.stdout)["status"] == expected.status
    over = write_spec(tmp_path / "over", cap="{ epsilon = 1, delta = 1e-8 }")
    done = subprocess.run(
        [*command[:4], over, *command[5:]],
        # Another operator (own user home and dp_pipeline home): the key binds to one ledger.
        env=dict(environment, HOME=str(tmp_path / "over"), DP_PIPELINE_HOME=str(tmp_path / "over")),
        capture_output=True,
        text=True,
    )
    assert done.returncode == ExitCode.REFUSED_BUDGET, done.stderr


def test_the_ledger_location_carries_no_credentials():
    url = "postgresql://release:s3cret@db.example.org:5432/ledger?sslmode=require&password=x"
    assert public_location(url) == "postgresql://db.example.org:5432/ledger"
    assert public_location("/srv/dp/ledger.sqlite") == "/srv/dp/ledger.sqlite"
