"""`python -m dp_pipeline.demo` (named in the README) must work and print every category."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

from dp_pipeline import MasterKey
from dp_pipeline.demo import CATEGORIES, noisy_counts, synthetic_table

ROOT = Path(__file__).resolve().parents[3]


def test_demo_runs_as_module():
    completed = subprocess.run(
        [sys.executable, "-m", "dp_pipeline.demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for category in CATEGORIES:
        assert category in completed.stdout
    assert "noisy_count" in completed.stdout


def test_demo_releases_every_category_with_integer_noise():
    table = synthetic_table()
    key = MasterKey.from_hex("11" * 32)
    first = noisy_counts(table, Fraction(25), key)
    again = noisy_counts(table, Fraction(25), MasterKey.from_hex("11" * 32))
    assert list(first["region"]) == CATEGORIES
    assert first.loc[first["region"] == "islands", "true_count"].item() == 0
    assert first["true_count"].sum() == len(table)
    assert first["noisy_count"].dtype.kind == "i"
    assert first.equals(again)  # same key and labels: the same noise
