"""Budget ledger: caps, refusals that say what is left, release-id reuse, two-process races.

Every test taking ``ledger_at`` runs on both backends: a SQLite file and a database on
a throw-away PostgreSQL server (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest

from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.release.ledger.budget import LedgerError, accountant_type
from dp_pipeline.release.ledger.records import BudgetExceededError, ReleaseIdReuseError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.spec.model import Budget

ROOT = Path(__file__).resolve().parents[4]


def accountant(sigma2, sensitivity=1):
    """One discrete Gaussian query: rho = sensitivity² / (2 sigma2) (CKS Prop. 5)."""
    result = accountant_type()()
    result.add(DiscreteGaussian(sigma2), sensitivity=sensitivity, count=1)
    return result


RHO_CAP = Budget(rho=Fraction(1))
MANIFEST = {"format": 1, "files": {"t.parquet": {"sha256": "ab" * 32, "bytes": 10}}}


def publish(ledger, reservation, output=None, manifest=MANIFEST):
    """Walk a reservation through the run's states to committed, as a run does."""
    ledger.advance(reservation, "reading")
    ledger.advance(reservation, "noised")
    ledger.mark_publishing(reservation, manifest, "pandas")
    ledger.commit(reservation, output=output)


def test_reserve_commit_and_history(ledger_at):
    ledger = Ledger(ledger_at())
    reservation = ledger.reserve(
        population="people",
        release_id="r1",
        accountant=accountant(Fraction(5, 4)),  # rho = 2/5
        fingerprint="aa",
        cap=RHO_CAP,
    )
    assert reservation.outcome == "reserved"
    assert Fraction(reservation.cumulative["rho"]) == Fraction(2, 5)
    assert ledger.entry("r1").status == "reserved"
    publish(ledger, reservation, output="out/r1")
    entry = ledger.entry("r1")
    assert (entry.status, entry.output, entry.fingerprint) == ("committed", "out/r1", "aa")
    assert (entry.state, entry.manifest, entry.engine) == ("committed", MANIFEST, "pandas")
    spend, left = ledger.spent("people")
    assert spend.rho == Fraction(2, 5)
    assert "3/5" in left or "0.6 left" in left
    assert [e.release_id for e in ledger.history("people")] == ["r1"]
    assert ledger.populations() == {"people": {"rho": "1", "epsilon": None, "delta": None}}


def test_refusal_above_cap_says_how_much_is_left(ledger_at):
    ledger = Ledger(ledger_at())
    for release_id in ("r1", "r2"):
        ledger.reserve(
            population="people",
            release_id=release_id,
            accountant=accountant(Fraction(5, 4)),
            fingerprint=release_id,
            cap=RHO_CAP,
        )
    # 2/5 + 2/5 spent (r2 only reserved: reservations count); 2/5 more would reach 6/5 > 1.
    with pytest.raises(BudgetExceededError) as info:
        ledger.reserve(
            population="people",
            release_id="r3",
            accountant=accountant(Fraction(5, 4)),
            fingerprint="r3",
            cap=RHO_CAP,
        )
    message = str(info.value)
    assert "release 'r3' refused" in message
    assert "ρ 0.8 of 1 spent, 0.2 left" in message
    assert "Nothing was read or written" in message
    assert ledger.entry("r3") is None
    # The just-fitting twin: rho 1/5 exactly reaches the cap and is accepted.
    ledger.reserve(
        population="people",
        release_id="r3",
        accountant=accountant(Fraction(5, 2)),
        fingerprint="r3",
        cap=RHO_CAP,
    )


def test_abort_returns_the_budget(ledger_at):
    ledger = Ledger(ledger_at())
    args = dict(population="people", accountant=accountant(Fraction(5, 4)), cap=RHO_CAP)
    ledger.reserve(release_id="r1", fingerprint="a", **args)
    second = ledger.reserve(release_id="r2", fingerprint="b", **args)
    ledger.abort("r2")  # nothing read (state reserved), no run alive
    ledger.reserve(release_id="r3", fingerprint="c", **args)  # fits again
    with pytest.raises(LedgerError, match="release id 'r2': committing refused, because this"):
        ledger.commit(second)
    with pytest.raises(LedgerError, match="release id 'nope' is not in the ledger"):
        ledger.abort("nope")
    # An aborted id published nothing, so it may be reserved again (even on other data).
    ledger.abort("r3")
    assert ledger.reserve(release_id="r2", fingerprint="z", **args).outcome == "reserved"


def test_release_id_reuse(ledger_at):
    ledger = Ledger(ledger_at())
    args = dict(population="people", release_id="r1", cap=RHO_CAP)
    first = ledger.reserve(accountant=accountant(Fraction(5, 4)), fingerprint="data-1", **args)
    # A stale reservation (crashed job) on the same data and plan is resumed, no new spend,
    # under a new run token: the run it was taken from can no longer move it.
    resumed = ledger.reserve(accountant=accountant(Fraction(5, 4)), fingerprint="data-1", **args)
    assert resumed.outcome == "resumed"
    assert resumed.token != first.token and resumed.digest == first.digest
    with pytest.raises(LedgerError, match="another run holds it now"):
        ledger.advance(first, "reading")
    publish(ledger, resumed)
    again = ledger.reserve(accountant=accountant(Fraction(5, 4)), fingerprint="data-1", **args)
    assert again.outcome == "already_committed"
    assert (again.token, again.manifest, again.engine) == (None, MANIFEST, "pandas")
    assert ledger.spent("people")[0].rho == Fraction(2, 5)  # no new spend
    with pytest.raises(
        ReleaseIdReuseError,
        match="committed with another spec, input or key; these parts differ: input data changed",
    ):
        ledger.reserve(accountant=accountant(Fraction(5, 4)), fingerprint="data-2", **args)
    with pytest.raises(ReleaseIdReuseError, match="differ: planned mechanisms changed"):
        ledger.reserve(accountant=accountant(Fraction(5, 3)), fingerprint="data-1", **args)
    with pytest.raises(ReleaseIdReuseError, match="already used for population 'people'"):
        ledger.reserve(
            population="others",
            release_id="r1",
            accountant=accountant(Fraction(5, 4)),
            fingerprint="data-1",
            cap=RHO_CAP,
        )


def test_cap_cannot_change(ledger_at):
    ledger = Ledger(ledger_at())
    ledger.reserve(
        population="people",
        release_id="r1",
        accountant=accountant(4),
        fingerprint="a",
        cap=RHO_CAP,
    )
    with pytest.raises(LedgerError, match="cap rho <= 2 differs from the ledger's cap rho <= 1"):
        ledger.reserve(
            population="people",
            release_id="r2",
            accountant=accountant(4),
            fingerprint="b",
            cap=Budget(rho=Fraction(2)),
        )


def test_epsilon_delta_cap(ledger_at):
    ledger = Ledger(ledger_at())
    cap = Budget(epsilon=Fraction(1), delta=Fraction(1, 10**6))
    # sigma = 20: one release is far inside (epsilon, delta) = (1, 1e-6) ...
    ledger.reserve(
        population="p", release_id="a", accountant=accountant(400), fingerprint="a", cap=cap
    )
    # ... a release with sigma = 1 alone is far outside it.
    with pytest.raises(BudgetExceededError) as info:
        ledger.reserve(
            population="p", release_id="b", accountant=accountant(1), fingerprint="b", cap=cap
        )
    assert "(epsilon=1, delta=1/1000000)" in str(info.value)
    assert "left" in str(info.value)


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

    ledger_path, go_file, release_id = sys.argv[1:4]
    accountant = accountant_type()()
    accountant.add(DiscreteGaussian(Fraction(5, 4)), sensitivity=1, count=1)  # rho = 2/5
    ledger = Ledger(ledger_path)
    Path(go_file + "." + release_id + ".ready").touch()  # imports done: ready to race
    while not Path(go_file).exists():
        time.sleep(0.001)
    try:
        ledger.reserve(population="people", release_id=release_id, accountant=accountant,
                       fingerprint=release_id, cap=Budget(rho=Fraction(1)))
        print(json.dumps("reserved"))
    except BudgetExceededError:
        print(json.dumps("refused"))
    """
)


def test_concurrent_processes_cannot_double_spend(tmp_path, ledger_at):
    """Three real processes race for a cap that holds two releases: exactly two win."""
    ledger_path = ledger_at()
    Ledger(ledger_path).close()  # create the schema before the race
    go_file = tmp_path / "go"
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(ledger_path), str(go_file), f"r{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            text=True,
        )
        for i in range(3)
    ]
    # Start the race only once every process has imported and is polling (imports are slow
    # on a loaded machine; a fixed sleep would let early processes run unopposed).
    deadline = time.monotonic() + 1200
    while not all((tmp_path / f"go.r{i}.ready").exists() for i in range(3)):
        assert time.monotonic() < deadline, "racers did not start within 1200 s"
        assert all(p.poll() is None for p in processes), [p.communicate() for p in processes]
        time.sleep(0.05)
    go_file.touch()
    results = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    assert sorted(results) == ["refused", "reserved", "reserved"]
    spend, _ = Ledger(ledger_path).spent("people")
    assert spend.rho == Fraction(4, 5)


def test_the_run_states_move_forward_only_for_the_token_holder(ledger_at):
    ledger = Ledger(ledger_at())
    args = dict(population="people", release_id="r1", cap=RHO_CAP, fingerprint="a")
    reservation = ledger.reserve(accountant=accountant(Fraction(5, 4)), **args)
    assert ledger.entry("r1").state == "reserved"
    # No state is skipped: noised needs reading, publishing needs noised.
    with pytest.raises(LedgerError, match="it must be reading before it is noised"):
        ledger.advance(reservation, "noised")
    with pytest.raises(LedgerError, match="only a noised release can be published"):
        ledger.mark_publishing(reservation, MANIFEST, "pandas")
    ledger.advance(reservation, "reading")
    with pytest.raises(LedgerError, match="only a release whose publication was recorded"):
        ledger.commit(reservation)
    ledger.advance(reservation, "noised")
    ledger.advance(reservation, "reading")  # a resumed run repeating a step: no move back
    assert ledger.entry("r1").state == "noised"
    # Another identity under the same token, or a forged token, moves nothing.
    other = dataclasses.replace(reservation, digest="0" * 64)
    with pytest.raises(LedgerError, match="the ledger records another identity"):
        ledger.mark_publishing(other, MANIFEST, "pandas")
    forged = dataclasses.replace(reservation, token="f" * 32)
    with pytest.raises(LedgerError, match="another run holds it now"):
        ledger.commit(forged)
    ledger.mark_publishing(reservation, MANIFEST, "pandas")
    # Publication records the bytes: other bytes under the same reservation are refused.
    changed = {"format": 1, "files": {"t.parquet": {"sha256": "cd" * 32, "bytes": 10}}}
    with pytest.raises(LedgerError, match="re-emits the same bytes or nothing"):
        ledger.mark_publishing(reservation, changed, "spark")
    ledger.commit(reservation)
    assert ledger.entry("r1").state == "committed"
    with pytest.raises(LedgerError, match="is committed; only a reserved release"):
        ledger.abort("r1")


def test_a_result_returned_in_memory_commits_from_reading_in_one_move(ledger_at):
    ledger = Ledger(ledger_at())
    args = dict(population="people", release_id="q/0", cap=RHO_CAP, fingerprint="a")
    reservation = ledger.reserve(accountant=accountant(Fraction(5, 4)), **args)
    returned = {"files": {}, "published": "returned to the caller"}
    # Only a run that has started reading (and so is charged) hands a result back.
    with pytest.raises(LedgerError, match="only a release that is reading can hand"):
        ledger.commit_returned(reservation, returned, "pandas")
    ledger.advance(reservation, "reading")
    forged = dataclasses.replace(reservation, token="f" * 32)
    with pytest.raises(LedgerError, match="another run holds it now"):
        ledger.commit_returned(forged, returned, "pandas")
    ledger.commit_returned(reservation, returned, "pandas")
    entry = ledger.entry("q/0")
    assert (entry.status, entry.state) == ("committed", "committed")
    with pytest.raises(LedgerError, match="is committed; only a reserved release"):
        ledger.abort("q/0")


def test_a_new_ledger_is_the_owners_only(tmp_path):
    path = tmp_path / "fresh" / "ledger.sqlite"
    ledger = Ledger(path)
    with ledger.lease("r") as lease:
        ledger.reserve(
            population="p", release_id="r", accountant=accountant(4), fingerprint="a", cap=RHO_CAP
        )
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert lease.path.parent == path.with_name("ledger.sqlite.leases")
    assert stat.S_IMODE(lease.path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(lease.path.stat().st_mode) == 0o600


OLD_SCHEMA = """
CREATE TABLE populations (name TEXT PRIMARY KEY, cap TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE releases (
    release_id TEXT PRIMARY KEY,
    population TEXT NOT NULL REFERENCES populations(name),
    status TEXT NOT NULL CHECK (status IN ('reserved', 'committed', 'aborted')),
    fingerprint TEXT NOT NULL, accountant TEXT NOT NULL, guarantee TEXT NOT NULL,
    cumulative TEXT NOT NULL, reserved_at TEXT NOT NULL, finished_at TEXT,
    owner TEXT NOT NULL, output TEXT, identity TEXT, published_at TEXT
);
"""


def test_a_ledger_written_before_run_states_stays_readable_and_charged(tmp_path):
    """Rows without a state get the most charged state their columns allow."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    for release_id in ("old-reserved", "old-committed"):
        ledger.reserve(
            population="p",
            release_id=release_id,
            accountant=accountant(8),
            fingerprint=release_id,
            cap=RHO_CAP,
        )
    rows = sqlite3.connect(path).execute("SELECT * FROM releases").fetchall()
    old = path.with_name("old.sqlite")
    with sqlite3.connect(old) as connection:
        connection.executescript(OLD_SCHEMA)
        connection.execute(
            "INSERT INTO populations VALUES ('p', ?, 'then')",
            (
                json.dumps(
                    {"rho": "1", "epsilon": None, "delta": None},
                    sort_keys=True,
                    separators=(",", ":"),
                ),
            ),
        )
        for row in rows:
            connection.execute(
                "INSERT INTO releases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row[:13]
            )
        connection.execute("UPDATE releases SET status = 'committed' WHERE release_id LIKE '%c%'")
    upgraded = Ledger(old)
    states = {e.release_id: (e.status, e.state) for e in upgraded.history()}
    assert states == {
        "old-reserved": ("reserved", "reading"),  # it may have read data: charged
        "old-committed": ("committed", "committed"),
    }
    with pytest.raises(LedgerError, match="cannot be aborted: its run reached state 'reading'"):
        upgraded.abort("old-reserved")
    # A committed release with no recorded digests cannot prove a re-run's bytes.
    with pytest.raises(ReleaseIdReuseError, match="recorded no digests of its files"):
        upgraded.reserve(
            population="p",
            release_id="old-committed",
            accountant=accountant(8),
            fingerprint="old-committed",
            cap=RHO_CAP,
        )


def test_selections_compose_in_the_ledger_by_their_bounded_range_curve(ledger_at):
    # five exponential mechanisms at ε = 0.1 over two releases: ε(1e-6) = 0.4132 by the
    # optimal adaptive composition of their bounded-range curves (0.4227 by one-run pairs,
    # 0.4821 as randomized response capped by ρ = ε²/8, which refused the second release
    # under this cap); the twin cap just below 0.4132 refuses it
    from dp_pipeline.mechanisms import BaseTwoExponential

    def selections(count):
        result = accountant_type()()
        result.add(BaseTwoExponential(Fraction(1, 10)), count=count)
        return result

    for cap_epsilon, second in ((Fraction(42, 100), "reserved"), (Fraction(41, 100), None)):
        ledger = Ledger(ledger_at(f"ledger-{cap_epsilon.numerator}"))
        cap = Budget(epsilon=cap_epsilon, delta=Fraction(1, 10**6))
        ledger.reserve(
            population="p", release_id="a", accountant=selections(3), fingerprint="a", cap=cap
        )
        if second is None:
            with pytest.raises(BudgetExceededError):
                ledger.reserve(
                    population="p",
                    release_id="b",
                    accountant=selections(2),
                    fingerprint="b",
                    cap=cap,
                )
            continue
        reservation = ledger.reserve(
            population="p", release_id="b", accountant=selections(2), fingerprint="b", cap=cap
        )
        assert reservation.outcome == second
        assert 0.413 < reservation.cumulative["epsilon"] < 0.414
