"""A year of monthly releases from two hosts against one ledger (examples/monthly_schedule.py).

The ledger is a parameter: a SQLite file, and a database on a throw-away PostgreSQL
server (``ledger_at`` in conftest.py), as a scheduler's hosts share it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples"))

import monthly_schedule  # noqa: E402

from dp_pipeline.release.ledger.store import Ledger  # noqa: E402


# The example starts every month's release as a CLI process.
@pytest.mark.system
def test_two_hosts_a_year_one_ledger_and_the_annual_cap_holds(tmp_path, capsys, ledger_at):
    ledger = ledger_at()
    arguments = ["--work", str(tmp_path / "work"), "--ledger", ledger]
    status = monthly_schedule.main(arguments)
    out = capsys.readouterr().out
    assert status == 0, out
    lines = out.splitlines()
    runs = [line.split() for line in lines[1:14]]
    assert [(host, release_id[-7:], int(code)) for host, release_id, code, *_ in runs] == [
        ("host-a", "2026-01", 0),
        ("host-b", "2026-01", 3),  # the other host's retry: the same release, re-emitted
        *[("host-b" if m % 2 == 0 else "host-a", f"2026-{m:02d}", 0) for m in range(2, 11)],
        ("host-a", "2026-11", 4),
        ("host-b", "2026-12", 4),
    ]
    assert "the annual cap held" in lines[-1]
    work = tmp_path / "work"
    # Each host wrote its own outputs; neither host's working directory holds a ledger.
    assert (work / "host-b" / "out" / "labour-2026-01").is_dir()  # re-emitted there
    assert not (work / "host-a" / "out" / "labour-2026-11").exists()
    for host in ("host-a", "host-b"):
        assert not (work / host / ".dp_pipeline").exists()
        assert not (work / host / "home" / ".dp_pipeline" / "ledger.sqlite").exists()
    with Ledger(ledger) as shared:
        entries = shared.history()
    assert [e.status for e in entries] == ["committed"] * 10
    assert entries[-1].cumulative["rho"] == "1/10"
