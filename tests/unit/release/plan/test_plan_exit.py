"""``dp-release plan``'s exit status (4 when ``run`` would refuse the release over the cap)
and ``dp-release ledger SPEC`` reading the spec's ledger as ``run`` does."""

from __future__ import annotations

import json

from release_specs import operator_home

from dp_pipeline.release.cli import main
from dp_pipeline.release.outcome import ExitCode
from tests.system.cli.test_cli_exit_codes import run_json, write_spec


def plan(capsys, *arguments) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["plan", *arguments])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_plan_exits_0_when_the_release_fits(tmp_path, capsys):
    status, _, err = plan(capsys, write_spec(tmp_path))
    assert status == ExitCode.PUBLISHED == 0
    assert "exit 4" not in err


def test_plan_exits_4_when_the_release_alone_is_over_the_cap_and_no_ledger_exists(tmp_path, capsys):
    spec_file = write_spec(tmp_path, cap="{ epsilon = 1, delta = 1e-8 }")
    status, _, err = plan(capsys, spec_file)
    assert status == ExitCode.REFUSED_BUDGET == 4
    assert "dp-release plan: exit 4: release 'small-1' does not fit what is left of " in err
    assert "The largest epsilon at this delta that fits is" in err
    assert not (tmp_path / "ledger.sqlite").exists()  # a plan creates no ledger
    assert run_json(capsys, spec_file)[0] == ExitCode.REFUSED_BUDGET  # as run answers


def test_plan_exits_4_when_what_is_left_in_the_ledger_is_too_small(tmp_path, capsys, ledger_at):
    spec_file = write_spec(tmp_path, cap="{ epsilon = 2.5, delta = 1e-8 }")
    ledger = ledger_at()
    assert run_json(capsys, spec_file, "--ledger", ledger)[0] == ExitCode.PUBLISHED
    status, out, err = plan(capsys, spec_file, "--release-id", "small-2", "--ledger", ledger)
    assert status == ExitCode.REFUSED_BUDGET == 4
    assert "fits: no, dp-release run would refuse it." in out
    assert "exit 4: release 'small-2' does not fit" in err
    status, out, _ = plan(
        capsys, spec_file, "--release-id", "small-2", "--ledger", ledger, "--json"
    )
    assert status == 4 and json.loads(out)["ledger"]["fits"] is False
    # The committed id itself costs nothing more: it fits.
    assert plan(capsys, spec_file, "--ledger", ledger)[0] == 0


def test_the_ledger_command_reads_the_spec_s_ledger(tmp_path, capsys):
    spec_file = write_spec(tmp_path)  # the operator's home: the spec's ledger is its own
    assert run_json(capsys, spec_file)[0] == ExitCode.PUBLISHED
    capsys.readouterr()
    assert main(["ledger", spec_file, "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["ledger"] == str(tmp_path / "ledger.sqlite")
    assert [p["population"] for p in described["populations"]] == ["small-people"]
    assert main(["ledger", spec_file]) == 0
    assert "small-1" in capsys.readouterr().out
    # Without the spec: the environment's dp_pipeline home, here another that holds no ledger.
    operator_home(tmp_path / "home")
    assert main(["ledger", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["populations"] == []
