"""``conf/merchant_payments.toml`` end to end through the ``dp-release`` command: merchants
selected from synthetic payments, tables on exactly them, a SQLite ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from dp_pipeline.datasets.payments import write_payments
from dp_pipeline.release.ledger.store import Ledger

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "conf" / "merchant_payments.toml"


def dp_release(*arguments: str, home: Path) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_HOME=str(home))
    command = [sys.executable, "-m", "dp_pipeline.release", *arguments]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)


def test_merchant_payments_example_runs_end_to_end(tmp_path):
    write_payments(tmp_path / "payments.csv")
    home = tmp_path / "home"
    planned = dp_release("plan", str(SPEC), home=home)
    assert planned.returncode == 0, planned.stderr
    assert "key selection of 'merchant': a key is released when" in planned.stdout
    out = tmp_path / "out"
    arguments = ["--input", str(tmp_path / "payments.csv"), "--output", str(out)]
    done = dp_release("run", str(SPEC), *arguments, "--json", "--quiet", home=home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "published"

    folder = out / "merchant-payments-2026"
    report = json.loads((folder / "privacy_report.json").read_text())
    (selection,) = report["key_selections"]
    kept = selection["keys_kept"]
    counts = pd.read_parquet(folder / "payments_by_merchant.parquet")
    sums = pd.read_parquet(folder / "amount_by_merchant_channel.parquet")
    assert 5 <= kept == len(counts) == len(sums) // 3
    assert counts["merchant"].is_monotonic_increasing and counts["merchant"].is_unique
    assert set(sums["merchant"]) == set(counts["merchant"])
    # The release's guarantee includes the selection, and so does the ledger's spend.
    assert report["guarantee"]["epsilon_tight"]["method"].endswith("key_selection")
    assert report["guarantee"]["delta_tight"]["upper"] <= 1e-8
    (entry,) = Ledger(home / "ledger.sqlite").history()
    assert any(e["mechanism"]["type"] == "key_selection" for e in entry.accountant["events"])
    assert "Keys selected from the data" in (folder / "report.html").read_text()
    assert not (folder / "accuracy.json").exists()  # real input: no truth to compare

    again = dp_release("run", str(SPEC), *arguments, "--json", "--quiet", home=home)
    assert again.returncode == 3, again.stderr  # already committed: the same bytes
    assert pd.read_parquet(folder / "payments_by_merchant.parquet").equals(counts)
