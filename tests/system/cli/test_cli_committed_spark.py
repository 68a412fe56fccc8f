"""A retry of a committed release on the Spark engine starts no JVM when its copy is intact.

``dp-release run`` in a child process, as a scheduler runs it: the first run publishes
on Spark; the retries run with ``JAVA_HOME`` pointing at a stand-in ``java`` that only
records that it was started (and fails), so a retry that starts Spark is seen, not timed.
An intact copy is re-emitted (exit 3) without it; a damaged file sends the retry down the
engine's path, which starts Java to recompute it. Both ledger backends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from release_specs import SMALL_SPEC, operator_home

from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.outcome import ExitCode

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[3]
KEY_HEX = "3c9e1b7a5d2f8e4c6a0b9d3f7e1c5a8b2d6f0e4a9c3b7d1f5e8a2c6b0d4f9e3a"


def _spark_spec(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    operator_home(folder)
    text = SMALL_SPEC.format(tmp=folder).replace('engine = "pandas"', 'engine = "spark"')
    path = folder / "small.toml"
    path.write_text(text.replace("synthetic_persons = 3000", "synthetic_persons = 200"))
    return path


def _stand_in_java(folder: Path) -> tuple[dict[str, str], Path]:
    """A JAVA_HOME whose ``bin/java`` writes ``started`` and exits 1 (no JVM can start)."""
    marker = folder / "started"
    java = folder / "java-home" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho java >> {marker}\nexit 1\n")
    java.chmod(0o755)
    return {"JAVA_HOME": str(java.parent.parent)}, marker


def _run(spec: Path, folder: Path, ledger: str, extra: dict[str, str] | None = None):
    """``dp-release run SPEC --ledger LEDGER --json`` in a child process."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_MASTER_KEY=KEY_HEX)
    environment.update(extra or {})
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dp_pipeline.release",
            "run",
            str(spec),
            "--ledger",
            ledger,
            "--json",
        ],
        env=environment,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_committed_retry_on_spark_reemits_an_intact_copy_without_starting_java(
    tmp_path, ledger_at
):
    spec, ledger = _spark_spec(tmp_path / "job"), ledger_at()
    first = _run(spec, tmp_path, ledger)
    assert first.returncode == ExitCode.PUBLISHED, first.stderr[-3000:]
    folder = tmp_path / "job" / "out" / "small-1"
    published = {path.name: path.read_bytes() for path in sorted(folder.iterdir())}
    java, marker = _stand_in_java(tmp_path)

    retry = _run(spec, tmp_path, ledger, java)
    assert retry.returncode == ExitCode.ALREADY_COMMITTED == 3, retry.stderr[-3000:]
    line = json.loads(retry.stdout)
    assert line["status"] == "already_committed" and line["output"] == str(folder)
    assert not marker.exists(), "the retry of an intact committed release started Java"
    assert "spark: starting" not in retry.stderr
    assert "the published copy is intact" in retry.stderr
    assert {path.name: path.read_bytes() for path in sorted(folder.iterdir())} == published
    entry = Ledger(ledger).entry("small-1")
    assert (entry.status, entry.cumulative) == ("committed", line["cumulative"])

    # A damaged published file: the retry takes the engine's path, which starts Java.
    table = folder / "tenure.parquet"
    table.write_bytes(table.read_bytes()[:-1] + b"!")
    damaged = _run(spec, tmp_path, ledger, java)
    assert marker.exists(), damaged.stderr[-3000:]
    assert "spark: starting a session" in damaged.stderr
    assert damaged.returncode != ExitCode.ALREADY_COMMITTED
