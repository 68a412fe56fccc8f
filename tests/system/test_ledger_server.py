"""Ledger locations and the server ledger: URLs, clear errors before anything is read,
schema versions, 16 racing processes, runs killed or cut off from the server, leases
across connections, and the budget anchored to the key and the input.

Tests taking ``ledger_at`` run on SQLite and PostgreSQL; those taking
``postgres_server`` on a throw-away PostgreSQL server only (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from release_specs import SMALL_SPEC, operator_paths

from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.release.ledger.budget import LedgerError, accountant_type
from dp_pipeline.release.ledger.identity import ReleaseIdentity
from dp_pipeline.release.ledger.lease import LeaseHeldError
from dp_pipeline.release.ledger.records import InputReuseError
from dp_pipeline.release.ledger.schema import SCHEMA_VERSION
from dp_pipeline.release.ledger.store import Ledger, read_ledger
from dp_pipeline.release.ledger_location import ledger_location, mask_url
from dp_pipeline.release.outcome import ExitCode
from dp_pipeline.release.run import Progress, apply_overrides, read_release, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import Budget

# The server's behaviour does not depend on the pandas version: the core install's tier
# (-m "not spark and not postgresql") leaves these to the main run.
pytestmark = pytest.mark.postgresql

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = str(ROOT / "tests" / "support" / "protocol_launcher.py")
QUIET = Progress(quiet=True)
KEY_HEX = "b59163f6516e8ee81ecc2cfc05e6ebbc7d81b82a9ae660ea6820b535d9e12845"
RHO_CAP = Budget(rho=Fraction(1))
MANIFEST = {"format": 1, "files": {"t.parquet": {"sha256": "ab" * 32, "bytes": 10}}}


def accountant(sigma2):
    """One discrete Gaussian count: rho = 1 / (2 sigma2) (CKS Prop. 5)."""
    result = accountant_type()()
    result.add(DiscreteGaussian(Fraction(sigma2)), sensitivity=1, count=1)
    return result


def identity(release_id, fingerprint, unit="person_id", sigma2=4):
    return ReleaseIdentity.of_parts(
        release_id,
        {
            "privacy unit": {"column": unit},
            "planned mechanisms": accountant(sigma2).to_dict(),
            "input data": fingerprint,
        },
    )


# ----------------------------------------------------------------- locations


@pytest.mark.parametrize(
    ("given", "kind", "shown"),
    [
        ("ledger.sqlite", "sqlite", "ledger.sqlite"),
        ("sqlite:///rel/ledger.sqlite", "sqlite", "rel/ledger.sqlite"),
        ("sqlite:////abs/ledger.sqlite", "sqlite", "/abs/ledger.sqlite"),
        ("postgresql://ledger@db.example:5432/budget", "postgresql", None),
        (
            "postgres://ann:s3cret@db.example/budget?sslmode=require&password=other",
            "postgresql",
            "postgres://ann:***@db.example/budget?sslmode=require&password=***",
        ),
    ],
)
def test_ledger_locations(given, kind, shown):
    location = ledger_location(given)
    assert location.kind == kind
    assert location.shown == (given if shown is None else shown)
    assert "s3cret" not in repr(location) and "other" not in str(location)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("mysql://u:pw@h/db", r"ledger 'mysql://u:\*\*\*@h/db': unknown scheme 'mysql://'"),
        ("sqlite://host/x", "a SQLite ledger URL is sqlite:///relative/path"),
        ("postgresql://u:pw@h:99999/db", r"'postgresql://u:\*\*\*@h:99999/db': not a valid"),
        ("postgresql://h", "the URL names no database"),
        ("postgresql:/h/db", "a ledger URL is sqlite:///path or postgresql://"),
    ],
)
def test_bad_ledger_urls_are_refused_before_anything_is_opened(tmp_path, given, message):
    with pytest.raises(LedgerError, match=message) as info:
        Ledger(given)
    assert "pw" not in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_without_psycopg_a_server_ledger_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as on the core install
    with pytest.raises(LedgerError, match=r"pip install 'dp-pipeline\[postgresql\]'"):
        Ledger("postgresql://u:pw@127.0.0.1:1/db")


def test_mask_url_hides_every_password_form():
    assert mask_url("postgresql://u:p%40ss@h/db") == "postgresql://u:***@h/db"
    assert mask_url("postgresql://h/db?password=x&user=u") == (
        "postgresql://h/db?password=***&user=u"
    )


# ----------------------------------------------------------------- server errors


def test_unreachable_server_wrong_credentials_and_missing_database(postgres_server):
    server = postgres_server
    unreachable = f"postgresql://dp_test:{server.password}@127.0.0.1:1/x?connect_timeout=3"
    cases = [
        (unreachable, "the server cannot be reached"),
        (server.url(password="wrong-Pa55"), "the server refused the credentials"),
        (server.url("no_such_database"), "the database does not exist"),
    ]
    for url, reason in cases:
        with pytest.raises(LedgerError) as info:
            Ledger(url)
        message = str(info.value)
        assert message.startswith(f"ledger {mask_url(url)!r} cannot be opened: {reason}")
        assert server.password not in message and "wrong-Pa55" not in message
        assert "\n" not in message
    # The same errors from `plan --ledger` (read only).
    with pytest.raises(LedgerError, match="the server refused the credentials"):
        read_ledger(server.url(password="wrong-Pa55"), "p", "r")


def test_plan_reads_a_server_ledger_without_creating_it(postgres_server):
    url = postgres_server.url(postgres_server.create_database())
    with pytest.raises(LedgerError, match="no ledger in that database; a ledger is created"):
        read_ledger(url, "p", "r")
    with Ledger(url) as ledger:
        ledger.reserve(
            population="p", release_id="r1", accountant=accountant(4), fingerprint="a", cap=RHO_CAP
        )
    view = read_ledger(url, "p", "r2")
    assert (view.cap, view.reserved, view.path) == (
        {"rho": "1", "epsilon": None, "delta": None},
        1,
        mask_url(url),
    )


def test_a_newer_schema_is_refused_and_an_older_one_migrated(ledger_at, tmp_path):
    location = ledger_at()
    Ledger(location).close()
    if ledger_at.kind == "sqlite":
        with sqlite3.connect(location) as connection:
            connection.execute("UPDATE ledger_meta SET value = '99' WHERE name = 'schema_version'")
    else:
        import psycopg

        with psycopg.connect(location, autocommit=True) as connection:
            connection.execute("UPDATE ledger_meta SET value = '99' WHERE name = 'schema_version'")
    for opening in (Ledger, lambda at: read_ledger(at, "p", "r")):
        with pytest.raises(LedgerError, match="has schema version 99, newer than this"):
            opening(location)
    # Today's SQLite ledgers (no version table) are migrated in one transaction.
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as connection:
        connection.executescript(
            "CREATE TABLE populations (name TEXT PRIMARY KEY, cap TEXT NOT NULL, "
            "created_at TEXT NOT NULL);"
            "CREATE TABLE releases (release_id TEXT PRIMARY KEY, population TEXT NOT NULL, "
            "status TEXT NOT NULL, fingerprint TEXT NOT NULL, accountant TEXT NOT NULL, "
            "guarantee TEXT NOT NULL, cumulative TEXT NOT NULL, reserved_at TEXT NOT NULL, "
            "finished_at TEXT, owner TEXT NOT NULL, output TEXT);"
        )
    Ledger(old).reserve(
        population="p", release_id="r", accountant=accountant(4), fingerprint="a", cap=RHO_CAP
    )
    with sqlite3.connect(old) as connection:
        version = connection.execute("SELECT value FROM ledger_meta").fetchone()
    assert version == (str(SCHEMA_VERSION),)


def test_an_old_ledger_that_cannot_be_migrated_names_the_command_that_migrates_it(tmp_path):
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as connection:
        connection.execute("CREATE TABLE releases (release_id TEXT PRIMARY KEY)")
    # Another process holds the file's write lock for longer than this opening waits.
    holder = sqlite3.connect(old, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(LedgerError) as info:
            Ledger(old, timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    message = str(info.value)
    version = SCHEMA_VERSION
    assert f"needs its schema created or migrated to version {version}, which failed" in message
    assert f"nothing was changed. Run `dp-release ledger --ledger {old}`" in message
    with sqlite3.connect(old) as connection:  # nothing was changed
        assert connection.execute("PRAGMA table_info(releases)").fetchall()[1:] == []


# ----------------------------------------------------------------- races

RACER = textwrap.dedent(
    """
    import json, sys, time
    from fractions import Fraction
    from pathlib import Path
    from dp_pipeline.release.ledger.records import BudgetExceededError
    from dp_pipeline.release.ledger.store import Ledger
    from dp_pipeline.release.ledger.budget import accountant_type
    from dp_pipeline.mechanisms import DiscreteGaussian
    from dp_pipeline.release.spec.model import Budget

    location, go_file, release_id = sys.argv[1:4]
    accountant = accountant_type()()
    accountant.add(DiscreteGaussian(Fraction(5, 2)), sensitivity=1, count=1)  # rho = 1/5
    manifest = {"format": 1, "files": {"t.parquet": {"sha256": "ab" * 32, "bytes": 1}}}
    ledger = Ledger(location)
    Path(go_file + "." + release_id + ".ready").touch()
    while not Path(go_file).exists():
        time.sleep(0.001)
    started = time.perf_counter()
    try:
        reservation = ledger.reserve(population="people", release_id=release_id,
                                     accountant=accountant, fingerprint=release_id,
                                     cap=Budget(rho=Fraction(1)))
    except BudgetExceededError:
        print(json.dumps(["refused", time.perf_counter() - started]))
        sys.exit(0)
    seconds = time.perf_counter() - started
    with ledger.lease(release_id):
        ledger.advance(reservation, "reading")
        ledger.advance(reservation, "noised")
        ledger.mark_publishing(reservation, manifest, "pandas")
        ledger.commit(reservation)
    print(json.dumps(["committed", seconds]))
    """
)


def race(location, folder: Path, count: int) -> list[str]:
    go_file = folder / "go"
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, location, str(go_file), f"r{i:02d}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            text=True,
        )
        for i in range(count)
    ]
    deadline = time.monotonic() + 1200
    while not all((folder / f"go.r{i:02d}.ready").exists() for i in range(count)):
        assert time.monotonic() < deadline, "racers did not start within 1200 s"
        assert all(p.poll() is None for p in processes), [p.communicate() for p in processes]
        time.sleep(0.05)
    go_file.touch()
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        outcomes.append(json.loads(out)[0])
    return outcomes


def test_sixteen_processes_racing_commit_exactly_what_the_cap_admits(ledger_at, tmp_path):
    """A cap of rho 1 admits exactly five releases of rho 1/5: of 16 racers, five commit."""
    location = ledger_at()
    Ledger(location).close()
    outcomes = race(location, tmp_path, 16)
    assert sorted(outcomes) == ["committed"] * 5 + ["refused"] * 11
    with Ledger(location) as ledger:
        assert ledger.spent("people")[0].rho == Fraction(1)
        assert sum(e.status == "committed" for e in ledger.history()) == 5
        assert len(ledger.history()) == 5


# ----------------------------------------------------------------- leases


def test_a_server_lease_is_held_across_connections_and_freed_with_its_session(postgres_server):
    url = postgres_server.url(postgres_server.create_database())
    first, second = Ledger(url), Ledger(url)
    args = dict(population="p", accountant=accountant(4), cap=RHO_CAP)
    with first.lease("r1"):
        first.reserve(release_id="r1", fingerprint="a", **args)
        with pytest.raises(LeaseHeldError) as info, second.lease("r1"):
            pass
        assert f"process {os.uname().nodename}:{os.getpid()} holds the lease" in str(info.value)
        with pytest.raises(LeaseHeldError, match="aborting it refused"):
            second.abort("r1")
        with second.lease("r2"):  # another release id: another lease
            pass
    second.abort("r1")  # the run ended: its lease is free
    assert second.entry("r1").status == "aborted"


# ----------------------------------------------------------------- kills and lost connections


def cli(arguments, point=None, action="kill"):
    environment = dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_MASTER_KEY=KEY_HEX)
    command = [LAUNCHER, point, action] if point else ["-m", "dp_pipeline.release"]
    return subprocess.Popen(
        [sys.executable, *command, *arguments],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def small_spec(folder: Path, ledger: str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "small.toml"
    path.write_text(SMALL_SPEC.format(tmp=folder))
    return path, apply_overrides(load_spec(path, **operator_paths(folder)), ledger_path=ledger)


@pytest.fixture(scope="module")
def reference_tables(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
        # An operator of its own: the tests run the same key on server ledgers as other
        # users (one key, one ledger per user), and the fixture may be made again.
        patch.setenv("DP_PIPELINE_HOME", str(folder))
        patch.setenv("HOME", str(folder / "user"))
        _, spec = small_spec(folder, str(folder / "ledger.sqlite"))
        return read_release(run_release(spec, progress=QUIET).output)


@pytest.mark.parametrize(
    ("point", "state"),
    [("mid_reserve", None), ("after_reserve", "reserved"), ("after_publish", "publishing")],
)
def test_a_run_killed_mid_reservation_or_mid_publication_resumes_on_the_server_ledger(
    postgres_server, tmp_path, point, state, reference_tables
):
    url = postgres_server.url(postgres_server.create_database())
    spec_file, spec = small_spec(tmp_path, url)
    killed = cli(["run", str(spec_file), "--ledger", url], point)
    _, err = killed.communicate(timeout=600)
    assert killed.returncode == -9, err
    with Ledger(url) as ledger:
        entry = ledger.entry(spec.release_id)
        if state is None:  # killed inside the transaction: the server rolled it back
            assert entry is None
        else:
            assert (entry.status, entry.state) == ("reserved", state)  # still spent
        monkey = pytest.MonkeyPatch()
        monkey.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
        try:
            result = run_release(spec, progress=QUIET)
        finally:
            monkey.undo()
        assert result.outcome == ("reserved" if state is None else "resumed")
        assert ledger.entry(spec.release_id).status == "committed"
        assert len(ledger.history()) == 1
    for name, frame in read_release(result.output).items():
        pd.testing.assert_frame_equal(frame, reference_tables[name])


def test_a_run_that_loses_its_server_connection_fails_closed(
    postgres_server, tmp_path, reference_tables
):
    """The server drops the run's connections after the noise: the run stops with one line,
    publishes nothing, its reservation stays spent, and the next run resumes it."""
    database = postgres_server.create_database()
    url = postgres_server.url(database)
    spec_file, spec = small_spec(tmp_path, url)
    go = tmp_path / "go"
    run = cli(["run", str(spec_file), "--ledger", url, "--quiet"], "after_noise", f"wait:{go}")
    deadline = time.monotonic() + 600
    while not go.with_name("go.reached").exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert postgres_server.terminate(database) == 2  # the run's connection and its lease's
    go.touch()
    _, err = run.communicate(timeout=600)
    assert run.returncode == ExitCode.FAILED_RESUMABLE  # charged; the same id resumes
    lines = [text for text in err.splitlines() if text.startswith("dp-release run:")]
    assert any("the connection to the server was lost while" in line for line in lines), err
    assert postgres_server.password not in err
    assert not (Path(spec.output_dir) / spec.release_id).exists()
    with Ledger(url) as ledger:
        entry = ledger.entry(spec.release_id)
        assert (entry.status, entry.state) == ("reserved", "noised")  # charged
        with pytest.raises(LedgerError, match="cannot be aborted: its run reached state"):
            ledger.abort(spec.release_id)
    monkey = pytest.MonkeyPatch()
    monkey.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    try:
        result = run_release(spec, progress=QUIET)
    finally:
        monkey.undo()
    assert result.outcome == "resumed"
    for name, frame in read_release(result.output).items():
        pd.testing.assert_frame_equal(frame, reference_tables[name])


# ----------------------------------------------------------------- key and input anchoring


def test_a_ledger_records_its_key_and_refuses_another(ledger_at):
    with Ledger(ledger_at()) as ledger:
        args = dict(population="p", accountant=accountant(8), cap=RHO_CAP)
        ledger.reserve(release_id="r1", fingerprint="a", key_fingerprint="1" * 16, **args)
        assert ledger.key_fingerprint() == "1" * 16
        with pytest.raises(LedgerError) as info:
            ledger.reserve(release_id="r2", fingerprint="b", key_fingerprint="2" * 16, **args)
        message = str(info.value)
        assert f"records the master key with fingerprint {'1' * 16}" in message
        assert f"this run's key has fingerprint {'2' * 16}" in message
        assert ledger.entry("r2") is None
        ledger.reserve(release_id="r2", fingerprint="b", key_fingerprint="1" * 16, **args)


def test_a_ledger_from_before_keys_were_recorded_adopts_only_its_own_key(ledger_at):
    old_key = ReleaseIdentity.of_parts("old", {"master key": "1" * 16, "input data": "a"})
    with Ledger(ledger_at()) as ledger:
        args = dict(population="p", accountant=accountant(8), cap=RHO_CAP)
        ledger.reserve(release_id="old", fingerprint="a", identity=old_key, **args)
        assert ledger.key_fingerprint() is None
        with pytest.raises(LedgerError, match="records release 'old' made with another master"):
            ledger.reserve(release_id="r2", fingerprint="b", key_fingerprint="2" * 16, **args)
        ledger.reserve(release_id="r2", fingerprint="b", key_fingerprint="1" * 16, **args)
        assert ledger.key_fingerprint() == "1" * 16


def test_an_input_recorded_under_another_population_is_refused_unless_declared(ledger_at):
    with Ledger(ledger_at()) as ledger:
        args = dict(accountant=accountant(4), cap=RHO_CAP, fingerprint="same-input")
        ledger.reserve(
            population="persons", release_id="a", identity=identity("a", "same-input"), **args
        )
        with pytest.raises(InputReuseError) as info:
            ledger.reserve(
                population="people", release_id="b", identity=identity("b", "same-input"), **args
            )
        message = str(info.value)
        assert "already recorded under population 'persons' (release 'a')" in message
        assert 'shares_input_with = ["persons"]' in message
        assert ledger.entry("b") is None
        # Another privacy unit on the same input is another population of units.
        ledger.reserve(
            population="households",
            release_id="c",
            identity=identity("c", "same-input", unit="household_id"),
            **args,
        )
        # The rare legitimate case: declared, and recorded with the release.
        ledger.reserve(
            population="people",
            release_id="b",
            identity=identity("b", "same-input"),
            shared_input_with=["persons"],
            **args,
        )
        assert ledger.entry("b").input_override == ["persons"]
        # An aborted release read nothing: it does not hold its input.
        ledger.abort("b")
        ledger.reserve(
            population="persons", release_id="d", identity=identity("d", "same-input"), **args
        )


def test_the_spec_declares_shared_input(tmp_path):
    path, _ = small_spec(tmp_path, str(tmp_path / "ledger.sqlite"))
    text = path.read_text().replace(
        'name = "small-people"', 'name = "small-people"\nshares_input_with = ["census"]'
    )
    path.write_text(text)
    assert load_spec(path).shares_input_with == ("census",)
    path.write_text(text.replace('["census"]', '["small-people"]'))
    with pytest.raises(ValueError, match="names 'small-people', this release's own population"):
        load_spec(path)


def test_the_cli_never_shows_the_ledger_password(postgres_server, tmp_path, capsys):
    from dp_pipeline.release.cli import main

    url = postgres_server.url(postgres_server.create_database())
    assert main(["ledger", "--ledger", url]) == 0
    assert main(["ledger", "--ledger", url, "--population", "nobody"]) == 2
    spec_file, _ = small_spec(tmp_path, url)
    assert main(["plan", str(spec_file), "--ledger", url]) == 0
    assert main(["ledger", "--ledger", postgres_server.url(password="bad-Secret-1")]) == 2
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "no releases yet" in text and "not in the ledger" in text
    assert mask_url(url) in text
    assert postgres_server.password not in text and "bad-Secret-1" not in text


def test_plan_checks_the_operators_server_ledger(postgres_server, tmp_path, capsys, monkeypatch):
    from dp_pipeline.release.cli import main

    url = postgres_server.url(postgres_server.create_database())
    # The operator's ledger (the environment's); the spec's run.ledger names the same one.
    monkeypatch.setenv("DP_PIPELINE_LEDGER", url)
    spec_file, _ = small_spec(tmp_path, url)
    spec_file.write_text(
        spec_file.read_text().replace(f'ledger = "{tmp_path}/ledger.sqlite"', f"ledger = {url!r}")
    )
    # No ledger in that database yet: planned anyway, with a note saying why unchecked.
    assert main(["plan", str(spec_file)]) == 0
    captured = capsys.readouterr()
    assert "note: the spec's ledger was not checked: " in captured.err
    assert "no ledger in that database" in captured.err
    with Ledger(url) as ledger:
        ledger.reserve(
            population="small-people",
            release_id="earlier",
            accountant=accountant(4),
            fingerprint="a",
            cap=RHO_CAP,
        )
    assert main(["plan", str(spec_file)]) == 0
    captured = capsys.readouterr()
    assert f"ledger {mask_url(url)}, population small-people" in captured.out
    assert "spent (0 committed, 1 reserved)" in captured.out
    # An unreachable server is a note too; its password is never shown.
    unreachable = f"postgresql://dp_test:{postgres_server.password}@127.0.0.1:1/x?connect_timeout=3"
    spec_file.write_text(spec_file.read_text().replace(repr(url), repr(unreachable)))
    monkeypatch.setenv("DP_PIPELINE_LEDGER", unreachable)
    assert main(["plan", str(spec_file)]) == 0
    captured = capsys.readouterr()
    assert "note: the spec's ledger was not checked: " in captured.err
    assert "the server cannot be reached" in captured.err
    assert postgres_server.password not in captured.out + captured.err


def test_a_bad_ledger_stops_a_run_before_the_key_or_the_input(postgres_server, tmp_path, capsys):
    from dp_pipeline.release.cli import main

    spec_file, spec = small_spec(tmp_path, str(tmp_path / "unused.sqlite"))
    for url, reason in (
        ("mysql://u:pw@h/db", "unknown scheme 'mysql://'"),
        (postgres_server.url(password="bad-Secret-1"), "the server refused the credentials"),
    ):
        assert main(["run", str(spec_file), "--ledger", url, "--quiet"]) == 2
        error = capsys.readouterr().err
        assert reason in error and "bad-Secret-1" not in error and ":pw@" not in error
    assert not Path(spec.key_file).exists()  # refused before the key was created
    assert not (tmp_path / "samples").exists() and not (tmp_path / "out").exists()


def test_a_run_with_another_key_is_refused_by_the_ledger(ledger_at, tmp_path, monkeypatch):
    _, spec = small_spec(tmp_path, ledger_at())
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    run_release(spec, progress=QUIET)
    other = "5" + KEY_HEX[1:]
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", other)
    with pytest.raises(LedgerError, match="records the master key with fingerprint"):
        run_release(apply_overrides(spec, release_id="small-2"), progress=QUIET)
    with Ledger(spec.ledger_path) as ledger:
        assert [entry.release_id for entry in ledger.history()] == [spec.release_id]
    assert not (Path(spec.output_dir) / "small-2").exists()


def test_credentials_come_from_the_password_file_or_the_environment(
    postgres_server, tmp_path, monkeypatch
):
    server = postgres_server
    database = server.create_database()
    url = f"postgresql://dp_test@127.0.0.1:{server.port}/{database}"
    monkeypatch.delenv("PGPASSWORD", raising=False)
    password_file = tmp_path / "pgpass"
    password_file.write_text(f"127.0.0.1:{server.port}:*:dp_test:{server.password}\n")
    password_file.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(password_file))
    with Ledger(url) as ledger:
        assert ledger.populations() == {}
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    with pytest.raises(LedgerError, match="the server refused the credentials"):
        Ledger(url)
    monkeypatch.setenv("PGPASSWORD", server.password)
    with Ledger(url) as ledger:
        assert ledger.populations() == {}
