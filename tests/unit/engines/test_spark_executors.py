"""The executors' Python is asked for dp_pipeline before a release reserves anything.

A real local-mode release (`dp-release run` in a child process) whose workers run a
fresh virtual environment without dp_pipeline (``PYSPARK_PYTHON``) is refused in one
line naming that Python and the fix, exit 2, and the ledger records nothing; the
answer of each worker Python is read from the probe's own results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from types import SimpleNamespace

import pytest
from release_specs import SMALL_SPEC, operator_home

pytest.importorskip("pyspark")

import dp_pipeline.engines.spark.session.executors as executors
from dp_pipeline.engines.spark.session.executors import WorkerPython, check_executors, probe
from dp_pipeline.errors import SparkExecutorsError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
KEY_HEX = "b59163f6516e8ee81ecc2cfc05e6ebbc7d81b82a9ae660ea6820b535d9e12845"
# The CLI with this tree first on the driver's path, and no PYTHONPATH to pass on to the
# workers, run from a folder without the package (a worker's ``python -m`` puts its working
# folder on its path): a worker Python sees only its own packages.
CLI = (
    f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
    "from dp_pipeline.release.cli import main; sys.exit(main())"
)


def test_the_probe_answers_with_this_python_and_its_version():
    import dp_pipeline

    assert probe(iter(())) == [(sys.executable, dp_pipeline.__version__, "")]
    assert WorkerPython("/p", None, "ModuleNotFoundError").version is None


def _session() -> SimpleNamespace:
    """Stands for a classic session with a fixed application id (the job is replaced)."""
    return SimpleNamespace(sparkContext=SimpleNamespace(applicationId="local-test"))


def test_another_version_on_the_executors_is_named_with_the_fix(monkeypatch):
    answers = {WorkerPython("/opt/old/bin/python", "0.0.9"), WorkerPython("/w/python", "0.1.0")}
    monkeypatch.setattr(executors, "executor_pythons", lambda spark: answers)
    with pytest.raises(SparkExecutorsError) as raised:
        check_executors(_session(), "0.1.0")
    assert str(raised.value) == (
        "the Spark executors' Python /opt/old/bin/python has dp_pipeline 0.0.9, this driver "
        "0.1.0: install dp_pipeline 0.1.0 in that Python, or set PYSPARK_PYTHON (or "
        "spark.pyspark.python) to a Python that has it, on every executor host"
    )
    asked = []
    good = {WorkerPython("/w/python", "0.1.0")}
    monkeypatch.setattr(executors, "executor_pythons", lambda spark: asked.append(1) or good)
    check_executors(_session(), "0.1.0")
    check_executors(_session(), "0.1.0")  # one application: asked once
    assert asked == [1]


@pytest.mark.spark
def test_workers_without_dp_pipeline_are_refused_before_the_reservation(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    operator_home(folder)
    spec_path = folder / "small.toml"
    text = SMALL_SPEC.format(tmp=folder)
    spec_path.write_text(text.replace("synthetic_persons = 3000", "synthetic_persons = 60"))
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a Python with no packages: no dp_pipeline
    worker = bare / "bin" / "python"
    environment = dict(os.environ, PYSPARK_PYTHON=str(worker), DP_PIPELINE_MASTER_KEY=KEY_HEX)
    environment.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", CLI, "run", str(spec_path), "--engine", "spark", "--json"],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("dp-release run:")]
    assert errors[0] == (
        f"dp-release run: the Spark executors' Python {worker} cannot import "
        "dp_pipeline (ModuleNotFoundError: no module 'dp_pipeline'): install dp_pipeline "
        "0.1.0 in that Python, or set PYSPARK_PYTHON (or spark.pyspark.python) to a Python "
        "that has it, on every executor host"
    ), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["status"] == "spec_error"
    spec = load_spec(spec_path)
    ledger = Path(spec.ledger_path)
    assert not ledger.exists() or Ledger(spec.ledger_path).history() == []
