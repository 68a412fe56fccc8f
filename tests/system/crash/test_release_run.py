"""Releases end to end: both engines, crashes and re-runs, id reuse, the monthly scenario."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from release_specs import SMALL_SPEC, operator_home, operator_paths

from dp_pipeline.datasets.synthetic import write_census_sample
from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.records import BudgetExceededError, ReleaseIdReuseError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.run import (
    InputChangedError,
    Progress,
    apply_overrides,
    read_release,
    run_release,
)
from dp_pipeline.release.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
QUIET = Progress(quiet=True)
# a fixed test key: runs in different ledgers draw the same noise
KEY_HEX = "b59163f6516e8ee81ecc2cfc05e6ebbc7d81b82a9ae660ea6820b535d9e12845"


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def small_spec(tmp_path: Path, **overrides):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "small.toml"
    path.write_text(SMALL_SPEC.format(tmp=tmp_path))
    return apply_overrides(load_spec(path, **operator_paths(tmp_path)), **overrides)


def check_release(result, spec):
    folder = result.output
    assert folder == Path(spec.output_dir) / spec.release_id
    tables = read_release(folder)
    assert set(tables) == {t.name for t in spec.tables}
    for table in spec.tables:
        frame = tables[table.name]
        assert list(frame.columns) == [*table.keys, "value"]
        assert len(frame) == table.cells  # every declared cell, zero counts included
        assert not frame.duplicated(list(table.keys)).any()
    report = json.loads((folder / "privacy_report.json").read_text())
    assert report["release_id"] == spec.release_id
    assert {t["name"] for t in report["tables"]} == {t.name for t in spec.tables}
    assert all("sigma2" in t and "margin_of_error" in t for t in report["tables"])
    assert report["ledger"]["cumulative"]["epsilon"] is not None
    html = (folder / "report.html").read_text()
    assert "data:image/png;base64," in html and "margin of error" in html
    assert "Accuracy against the truth" in html  # synthetic input
    return tables, report


def test_pandas_release_end_to_end(tmp_path):
    spec = small_spec(tmp_path)
    result = run_release(spec, progress=QUIET)
    assert result.outcome == "reserved"
    check_release(result, spec)
    accuracy = json.loads((result.output / "accuracy.json").read_text())["accuracy_vs_truth"]
    assert {row["table"] for row in accuracy} == {"state_sex_age", "tenure", "state_income"}
    assert Ledger(spec.ledger_path).entry(spec.release_id).status == "committed"
    assert not list(Path(spec.output_dir).glob(".*"))  # no temporary folder left
    # Same id, same data, same plan: identical bytes, no new spend.
    before = {p.name: p.read_bytes() for p in result.output.iterdir()}
    again = run_release(spec, progress=QUIET)
    assert again.outcome == "already_committed"
    assert {p.name: p.read_bytes() for p in again.output.iterdir()} == before
    assert len(Ledger(spec.ledger_path).history()) == 1
    # Readers trust a folder only through its manifest, written last.
    manifest = json.loads((result.output / "manifest.json").read_text())
    assert set(manifest["files"]) == set(before) - {"manifest.json"}
    table = result.output / "tenure.parquet"
    table.write_bytes(table.read_bytes()[:-1] + b"!")
    with pytest.raises(ValueError, match=r"tenure\.parquet' differs from the release's manifest"):
        read_release(result.output)
    (result.output / "manifest.json").unlink()
    with pytest.raises(ValueError, match=r"is not a complete release: it has no manifest\.json"):
        read_release(result.output)


@pytest.mark.spark
def test_spark_and_pandas_releases_are_identical(tmp_path, spark):
    # One key on two ledgers: each engine's ledger is run from its own home (key binding).
    pandas_spec = small_spec(tmp_path / "p")
    spark_spec = small_spec(tmp_path / "s", engine="spark")
    operator_home(tmp_path / "p")
    pandas_tables, _ = check_release(run_release(pandas_spec, progress=QUIET), pandas_spec)
    operator_home(tmp_path / "s")
    spark_tables, _ = check_release(run_release(spark_spec, progress=QUIET), spark_spec)
    # The release used the session already running in this process and left it running.
    assert spark.range(3).count() == 3
    for name, frame in pandas_tables.items():
        pd.testing.assert_frame_equal(
            frame.reset_index(drop=True), spark_tables[name].reset_index(drop=True)
        )


@pytest.mark.spark
def test_each_row_releases_are_identical_on_both_engines(tmp_path, spark):
    specs = []
    for folder, engine in (("p", "pandas"), ("s", "spark")):
        path = tmp_path / folder
        path.mkdir()
        text = SMALL_SPEC.format(tmp=path).replace('column = "person_id"', "each_row = true")
        (path / "small.toml").write_text(text)
        spec = load_spec(path / "small.toml", **operator_paths(path))
        specs.append(apply_overrides(spec, engine=engine))
    assert specs[0].privacy_unit is None
    results = []
    for spec in specs:  # one key on two ledgers: each ledger run from its own home
        operator_home(Path(spec.ledger_path).parent)
        results.append(check_release(run_release(spec, progress=QUIET), spec))
    (pandas_tables, _), (spark_tables, _) = results
    for name, frame in pandas_tables.items():
        pd.testing.assert_frame_equal(frame, spark_tables[name])
    html = (Path(specs[0].output_dir) / specs[0].release_id / "report.html").read_text()
    assert "privacy unit: one row (every row is a different unit)" in html


LAUNCHER = str(ROOT / "tests" / "support" / "protocol_launcher.py")


def run_cli_process(arguments, kill_at=None, cwd=None):
    """The CLI in a child process; with ``kill_at``, SIGKILLed at that protocol point."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_MASTER_KEY=KEY_HEX)
    command = [LAUNCHER, kill_at, "kill"] if kill_at else ["-m", "dp_pipeline.release"]
    return subprocess.run(
        [sys.executable, *command, *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def reference_tables(tmp_path_factory):
    """The small release computed once, without interruption, in its own ledger."""
    folder = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
        # An operator of its own: the fixture may be made again when the module's tests are
        # spread over workers, and one key with a second ledger of one user is refused.
        patch.setenv("DP_PIPELINE_HOME", str(folder))
        patch.setenv("HOME", str(folder / "user"))
        return read_release(run_release(small_spec(folder), progress=QUIET).output)


@pytest.mark.parametrize(
    ("kill_at", "state"),
    [
        ("after_reserve", "reserved"),
        ("after_noise", "noised"),
        ("before_publish", "noised"),
        ("after_publish", "publishing"),
    ],
)
def test_killed_job_leaves_no_partial_release_and_the_rerun_resolves_it(
    tmp_path, kill_at, state, reference_tables
):
    spec = small_spec(tmp_path)
    spec_file = str(tmp_path / "small.toml")
    killed = run_cli_process(["run", spec_file], kill_at=kill_at)
    assert killed.returncode == -9, killed.stderr
    final = Path(spec.output_dir) / spec.release_id
    ledger = Ledger(spec.ledger_path)
    entry = ledger.entry(spec.release_id)
    assert (entry.status, entry.state) == ("reserved", state)  # still counts as spent
    hidden = list(Path(spec.output_dir).glob(f".{spec.release_id}.tmp-*"))
    if kill_at == "after_publish":
        assert (final / "manifest.json").exists()  # complete, only the commit is missing
        assert entry.manifest == json.loads((final / "manifest.json").read_text())
    else:
        assert not final.exists()  # nothing half-written is visible
    if kill_at == "before_publish":  # complete, but hidden and the owner's only
        (folder,) = hidden
        assert (folder / "manifest.json").exists()
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    else:
        assert not hidden
    # The next run of the same id resumes the reservation: no new spend, same noise.
    result = run_release(spec, progress=QUIET)
    assert result.outcome == "resumed"
    assert ledger.entry(spec.release_id).status == "committed"
    assert len(ledger.history()) == 1
    assert not list(Path(spec.output_dir).glob(".*"))  # leftovers removed
    for name, frame in read_release(result.output).items():
        pd.testing.assert_frame_equal(frame, reference_tables[name])


def test_release_id_reuse_on_changed_data_is_refused(tmp_path):
    first = write_census_sample(tmp_path / "a.parquet", 2000, seed=1)
    second = write_census_sample(tmp_path / "b.parquet", 2000, seed=2)
    spec = small_spec(tmp_path, input_path=str(first))
    run_release(spec, progress=QUIET)
    with pytest.raises(ReleaseIdReuseError, match="these parts differ: input data changed"):
        run_release(apply_overrides(spec, input_path=str(second)), progress=QUIET)
    # The CLI reports the refusal with status 5 (refused: input or spec changed) and
    # writes nothing new.
    spec_file = str(tmp_path / "small.toml")
    status = main(["run", spec_file, "--input", str(second), "--quiet"])
    assert status == 5
    assert len(Ledger(spec.ledger_path).history()) == 1
    # Reading no data happens before the refusal: a changed plan is refused the same way.
    document = (tmp_path / "small.toml").read_text().replace("epsilon = 2", "epsilon = 1")
    (tmp_path / "small.toml").write_text(document)
    assert main(["run", spec_file, "--input", str(first), "--quiet"]) == 5


def test_input_changed_during_the_run_publishes_nothing_and_stays_charged(tmp_path, monkeypatch):
    import dp_pipeline.release.tables.engines as engines

    data = write_census_sample(tmp_path / "persons.parquet", 2000, seed=4)
    other = write_census_sample(tmp_path / "other.parquet", 2000, seed=5)
    compute_tables = engines.compute_tables

    def compute_then_overwrite(*args, **kwargs):
        result = compute_tables(*args, **kwargs)
        data.write_bytes(other.read_bytes())  # another job rewrites the input meanwhile
        return result

    monkeypatch.setattr(engines, "compute_tables", compute_then_overwrite)
    spec = small_spec(tmp_path, input_path=str(data))
    with pytest.raises(InputChangedError, match=r"input '.*persons.parquet' changed while"):
        run_release(spec, progress=QUIET)
    assert not (Path(spec.output_dir) / spec.release_id).exists()
    # The data was read: the run is charged, and neither abort nor a re-run on the new
    # bytes returns the budget or publishes anything under this id.
    # Recorded as refused after reading (still charged), not left "reading" as if alive.
    ledger = Ledger(spec.ledger_path)
    entry = ledger.entry(spec.release_id)
    assert (entry.status, entry.state) == ("reserved", "refused")
    with pytest.raises(LedgerError, match="cannot be aborted: its run reached state 'refused'"):
        ledger.abort(spec.release_id)
    monkeypatch.setattr(engines, "compute_tables", compute_tables)
    with pytest.raises(ReleaseIdReuseError, match="these parts differ: input data changed"):
        run_release(spec, progress=QUIET)


@pytest.mark.parametrize("failure", ["shrank", "vanished"])
def test_a_file_that_shrinks_or_vanishes_while_hashed_again_is_a_changed_input(
    tmp_path, monkeypatch, failure
):
    import dp_pipeline.release.sources.source as source_module
    from dp_pipeline.release.sources.fingerprint import FileRangeError

    data = write_census_sample(tmp_path / "persons.parquet", 2000, seed=4)
    local_digests = source_module.local_digests
    calls = []

    def hash_then_fail(*args, **kwargs):
        # The second hashing is the mid-run check: the file changes under it.
        calls.append(1)
        if len(calls) == 1:
            return local_digests(*args, **kwargs)
        if failure == "shrank":
            raise FileRangeError("a file held fewer bytes than listed")
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(source_module, "local_digests", hash_then_fail)
    spec = small_spec(tmp_path, input_path=str(data))
    with pytest.raises(InputChangedError, match=r"input '.*persons.parquet' changed while"):
        run_release(spec, progress=QUIET)
    assert len(calls) == 2
    assert not (Path(spec.output_dir) / spec.release_id).exists()
    entry = Ledger(spec.ledger_path).entry(spec.release_id)
    assert (entry.status, entry.state) == ("reserved", "refused")  # read: still charged


def test_monthly_scenario_twelve_accepted_thirteenth_refused(tmp_path, capsys):
    """conf/monthly_example.toml: 12 monthly releases fit the annual cap, the 13th is refused."""
    spec = apply_overrides(
        load_spec(ROOT / "conf" / "monthly_example.toml"),
        output_dir=str(tmp_path / "out"),
        ledger_path=str(tmp_path / "ledger.sqlite"),
        key_file=str(tmp_path / "key"),
    )
    cumulative = []
    months = [f"labour-2026-{m:02d}" for m in range(1, 13)] + ["labour-2027-01"]
    for index, release_id in enumerate(months):
        data = write_census_sample(tmp_path / f"{release_id}.parquet", 500, seed=index)
        month = apply_overrides(spec, release_id=release_id, input_path=str(data))
        if index < 12:
            result = run_release(month, progress=QUIET)
            report = json.loads((result.output / "privacy_report.json").read_text())
            cumulative.append(report["ledger"]["cumulative"]["epsilon"])
        else:
            with pytest.raises(BudgetExceededError) as info:
                run_release(month, progress=QUIET)
            message = str(info.value)
            assert "release 'labour-2027-01' refused" in message
            assert "12 earlier release(s)" in message and "left" in message
            assert not (tmp_path / "out" / release_id).exists()
    assert cumulative == sorted(cumulative) and len(set(cumulative)) == 12
    assert cumulative[-1] <= 2.9
    assert main(["ledger", "--ledger", str(tmp_path / "ledger.sqlite")]) == 0
    listing = capsys.readouterr().out
    history = [line.split() for line in listing.splitlines() if line.startswith("  labour-")]
    assert [row[1] for row in history] == ["committed"] * 12
    assert "labour-2027-01" not in listing
