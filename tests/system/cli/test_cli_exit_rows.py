"""docs/scheduling.md's exit-code table, row by row, on a SQLite and a PostgreSQL ledger,
with a local output folder and an output URI (``file://``) where the row depends on it.

Each test runs ``dp-release run ... --json`` as a scheduler would and checks the
status, the result line and what was (not) spent or written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dp_pipeline.release import protocol
from dp_pipeline.release import run as run_module
from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.outcome import ExitCode
from tests.system.cli.test_cli_exit_codes import run_json, write_spec
from tests.unit.release.ledger.test_reemission import no_recompute
from tests.unit.release.sources.test_release_on_invalid import csv_with, many_bad_units, spec_with


def outputs(tmp_path) -> dict[str, str]:
    """The output locations a row is checked with: a local folder and a ``file://`` URI."""
    return {"local": str(tmp_path / "out"), "uri": f"file://{tmp_path / 'remote-out'}"}


@pytest.mark.parametrize("where", ["local", "uri"])
def test_row_0_published_and_row_3_already_committed(
    tmp_path, capsys, ledger_at, where, monkeypatch
):
    spec_file, ledger = write_spec(tmp_path), ledger_at()
    output = outputs(tmp_path)[where]
    status, line, _ = run_json(capsys, spec_file, "--ledger", ledger, "--output", output)
    assert status == ExitCode.PUBLISHED == 0 and line["status"] == "published"
    no_recompute(monkeypatch)  # the published copy is intact: re-emitted as it is
    status, again, _ = run_json(capsys, spec_file, "--ledger", ledger, "--output", output)
    assert status == ExitCode.ALREADY_COMMITTED == 3 and again["status"] == "already_committed"
    assert again["cumulative"] == line["cumulative"]  # nothing spent


def test_row_2_spec_error_spends_nothing(tmp_path, capsys, ledger_at):
    bad = tmp_path / "bad.toml"
    bad.write_text(Path(write_spec(tmp_path)).read_text().replace('share = "1/2"', 'share = "2/3"'))
    status, line, _ = run_json(capsys, str(bad), "--ledger", ledger_at())
    assert status == ExitCode.SPEC_ERROR == 2 and "shares sum to" in line["message"]
    assert "cumulative" not in line


def test_row_4_refused_budget_reads_nothing(tmp_path, capsys, ledger_at):
    spec_file = write_spec(tmp_path, cap="{ epsilon = 1, delta = 1e-8 }")
    status, line, _ = run_json(capsys, spec_file, "--ledger", ledger_at())
    assert status == ExitCode.REFUSED_BUDGET == 4 and "largest epsilon" in line["message"]
    assert not (tmp_path / "out" / "small-1").exists()


@pytest.mark.parametrize("where", ["local", "uri"])
def test_row_5_changed_input_under_a_committed_id_whatever_the_output(
    tmp_path, capsys, ledger_at, where
):
    spec_file, ledger = write_spec(tmp_path), ledger_at()
    output = outputs(tmp_path)[where]
    assert run_json(capsys, spec_file, "--ledger", ledger, "--output", output)[0] == 0
    status, line, error = run_json(
        capsys, spec_file, "--ledger", ledger, "--output", output, "--persons", "2000"
    )
    assert status == ExitCode.REFUSED_CHANGED == 5, line
    assert line["status"] == "refused_changed"
    assert line["message"].rstrip(".").endswith("Use a new release id")
    assert "use a new release id" in error.lower() and "Move it away" not in error
    history = Ledger(ledger).history()
    assert [(e.release_id, e.status) for e in history] == [("small-1", "committed")]


def test_row_6_failed_resumable_then_resumed(tmp_path, capsys, ledger_at, monkeypatch):
    spec_file, ledger = write_spec(tmp_path), ledger_at()

    def disk_full(name: str) -> None:
        if name == "after_noise":
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(protocol, "checkpoint", disk_full)
    status, line, _ = run_json(capsys, spec_file, "--ledger", ledger)
    assert status == ExitCode.FAILED_RESUMABLE == 6 and line["cumulative"]["epsilon"] > 0
    monkeypatch.setattr(protocol, "checkpoint", lambda name: None)
    assert run_json(capsys, spec_file, "--ledger", ledger)[0] == ExitCode.PUBLISHED


def test_row_7_refused_input_is_charged(tmp_path, capsys, ledger_at):
    spec = spec_with(tmp_path, csv_with(tmp_path, many_bad_units()))
    ledger = ledger_at()
    status, line, _ = run_json(capsys, spec.source, "--ledger", ledger)
    assert status == ExitCode.REFUSED_INPUT == 7 and line["cumulative"] is not None
    # Recorded as refused (charged), not left "reading" as if its run were alive.
    entry = Ledger(ledger).entry(spec.release_id)
    assert (entry.status, entry.state) == ("reserved", "refused")
    assert run_json(capsys, spec.source, "--ledger", ledger)[0] == ExitCode.REFUSED_INPUT
    assert Ledger(ledger).entry(spec.release_id).state == "refused"
    assert main(["ledger", "--ledger", ledger]) == 0
    listed = [row for row in capsys.readouterr().out.splitlines() if spec.release_id in row]
    assert listed and "refused" in listed[-1] and "(run " not in listed[-1]


def test_row_8_busy_is_answered_before_the_engine_starts(tmp_path, capsys, ledger_at, monkeypatch):
    spec_file, ledger = write_spec(tmp_path), ledger_at()

    def engine_started(*arguments, **keywords):
        raise AssertionError("the engine was started before the lease was checked")

    monkeypatch.setattr(run_module, "open_input", engine_started)
    with Ledger(ledger) as holder, holder.lease("small-1"):
        status, line, _ = run_json(capsys, spec_file, "--ledger", ledger)
    assert status == ExitCode.BUSY == 8, line
    assert line["status"] == "busy" and "holds the lease" in line["message"]


def test_row_1_an_unexpected_error_is_1(tmp_path, capsys, ledger_at, monkeypatch):
    def broken(*arguments):
        raise RuntimeError("a bug")

    monkeypatch.setattr(run_module, "release_identity", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["run", write_spec(tmp_path), "--ledger", ledger_at(), "--json", "--quiet"])
