"""`dp-release plan --ledger`: the cost of a release before it runs, and what fits (real SQLite)."""

from __future__ import annotations

import hashlib
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest
from release_specs import SMALL_SPEC

from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.budget import _round_down
from dp_pipeline.release.ledger.records import BudgetExceededError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.spec.load import load_spec

KEY_HEX = "b59163f6516e8ee81ecc2cfc05e6ebbc7d81b82a9ae660ea6820b535d9e12845"
LARGEST = re.compile(r"The largest epsilon at this delta that fits is ([0-9.e-]+)\.")


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def write_spec(tmp_path: Path, epsilon="2", cap="{ epsilon = 4, delta = 1e-8 }") -> str:
    """SMALL_SPEC with cap (epsilon=4, delta=1e-8) and the given budget epsilon (delta 1e-9)."""
    text = SMALL_SPEC.format(tmp=tmp_path)
    text = text.replace("cap = { epsilon = 8, delta = 1e-8 }", f"cap = {cap}")
    text = text.replace("epsilon = 2\n", f"epsilon = {epsilon}\n")
    path = tmp_path / "small.toml"
    path.write_text(text)
    return str(path)


def run(spec_file: str, release_id: str):
    spec = load_spec(spec_file).with_release_id(release_id)
    return run_release(spec, progress=Progress(quiet=True))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plan_output(capsys, *arguments, code: int = 0) -> str:
    capsys.readouterr()
    assert main(["plan", *arguments]) == code
    return capsys.readouterr().out


def test_a_release_that_fits_is_reported_and_the_ledger_is_left_unchanged(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    run(spec_file, "small-1")
    ledger = tmp_path / "ledger.sqlite"
    before, files = digest(ledger), sorted(p.name for p in tmp_path.iterdir())
    # --ledger omitted: the spec's run.ledger is read because the file exists.
    for arguments in ((), ("--ledger", str(ledger))):
        out = plan_output(capsys, spec_file, "--release-id", "small-2", *arguments)
        assert f"ledger {ledger}, population small-people" in out
        assert "spent (1 committed, 0 reserved): epsilon at delta=1e-08 in (" in out
        assert "this release: epsilon at delta=1e-08 in (" in out
        assert "fits: yes; after it: ε " in out and "left" in out
    described = json.loads(plan_output(capsys, spec_file, "--release-id", "small-2", "--json"))
    assert described["ledger"]["outcome"] == "new" and described["ledger"]["fits"] is True
    assert described["ledger"]["committed"] == 1 and described["ledger"]["largest"] is None
    # Read only: no schema write, no lease, no journal left; the same bytes.
    assert digest(ledger) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == files
    assert len(Ledger(ledger).history()) == 1


def test_an_id_committed_with_this_spec_costs_nothing_and_another_identity_is_refused(
    tmp_path, capsys
):
    spec_file = write_spec(tmp_path)
    run(spec_file, "small-1")
    out = plan_output(capsys, spec_file, "--release-id", "small-1")
    assert "this release: costs nothing (release id already committed with this spec" in out
    assert "fits: yes (no new spend)" in out
    # The same id with another budget: refused by plan in the words run uses.
    other = write_spec(tmp_path, epsilon="1")
    out = plan_output(capsys, other, "--release-id", "small-1")
    assert (
        "refused, as dp-release run would refuse it: release id 'small-1' is committed with "
        "another spec, input or key; these parts differ: budget changed; planned mechanisms "
        "changed"
    ) in out
    assert "fits: yes" not in out
    assert main(["run", other, "--release-id", "small-1", "--quiet"]) == 5


def test_the_largest_budget_that_fits_is_accepted_by_run_and_a_larger_one_refused(tmp_path, capsys):
    run(write_spec(tmp_path), "small-1")
    too_large = write_spec(tmp_path, epsilon="4")
    out = plan_output(capsys, too_large, "--release-id", "small-2", code=4)
    assert "fits: no, dp-release run would refuse it. The largest epsilon at this delta" in out
    suggested = LARGEST.search(out).group(1)
    with pytest.raises(BudgetExceededError) as info:
        run(too_large, "small-2")
    message = str(info.value)
    assert message.startswith("release 'small-2' refused: population 'small-people' would exceed")
    assert message.endswith(
        f"Nothing was read or written. The largest epsilon at this delta that fits is {suggested}."
    )
    # One unit more in the last of its three digits does not fit; the suggestion does.
    figure = Fraction(suggested)
    unit = Fraction(10) ** (len(suggested.rstrip("0").split(".")[1]) * -1)
    assert _round_down(figure) == figure
    with pytest.raises(BudgetExceededError):
        run(write_spec(tmp_path, epsilon=str(float(figure + unit))), "small-2")
    result = run(write_spec(tmp_path, epsilon=suggested), "small-2")
    assert result.outcome == "reserved"
    assert result.reservation.cumulative["delta"] <= 1e-8


def test_an_exhausted_cap_says_nothing_fits(tmp_path, capsys):
    cap = '{ rho = "1/20" }'
    spec_file = write_spec(tmp_path, cap=cap)
    text = Path(spec_file).read_text().replace("epsilon = 2\ndelta = 1e-9\n", 'rho = "1/20"\n')
    Path(spec_file).write_text(text)
    run(spec_file, "small-1")
    out = plan_output(capsys, spec_file, "--release-id", "small-2", code=4)
    assert "spent (1 committed, 0 reserved): rho 0.05" in out
    assert "fits: no, dp-release run would refuse it. Nothing fits:" in out
    with pytest.raises(BudgetExceededError) as info:
        run(spec_file, "small-2")
    assert str(info.value).endswith(
        "Nothing was read or written. Nothing fits: what is left of the cap is too small "
        "for any budget."
    )


def test_a_missing_ledger_is_a_one_line_error_and_is_not_created(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    # The operator's --ledger decides: the spec names no ledger of its own.
    text = Path(spec_file).read_text()
    Path(spec_file).write_text(text.replace(f'ledger = "{tmp_path}/ledger.sqlite"\n', ""))
    missing = tmp_path / "nowhere" / "ledger.sqlite"
    assert main(["plan", spec_file, "--ledger", str(missing)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert f"ledger '{missing}': no ledger file there" in error
    assert not missing.parent.exists()
    # Without --ledger and without the spec's ledger file: the plan alone, nothing created.
    out = plan_output(capsys, spec_file)
    assert "population small-people (cap" not in out
    assert not (tmp_path / "ledger.sqlite").exists()


def test_round_down_keeps_three_significant_digits_and_never_rounds_up():
    assert _round_down(Fraction(7312, 10000)) == Fraction(731, 1000)
    assert _round_down(Fraction(99999, 100000)) == Fraction(999, 1000)
    assert _round_down(Fraction(123456, 100)) == 1230
    assert _round_down(Fraction(1, 3)) == Fraction(333, 1000)
    assert _round_down(Fraction(1239, 10**7)) == Fraction(123, 10**6)
