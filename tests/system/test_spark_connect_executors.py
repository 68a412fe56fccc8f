"""A Spark Connect server whose executors' Python lacks dp_pipeline: refused before anything.

The server runs in a child process (a local-mode JVM with the Connect plugin) started
from a folder without the package, its executors' Python a fresh virtual environment
with no packages (``PYSPARK_PYTHON``), as a server started from another environment.
``dp-release run --remote sc://...`` in another child process is its client: the
executors check must refuse in one line naming that Python, that it is the Connect
server's, and the fix; exit 2; the ledger records nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from connect_server import SERVER
from release_specs import SMALL_SPEC, operator_home

from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.version import __version__

pytestmark = pytest.mark.spark
pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")

ROOT = Path(__file__).resolve().parents[2]
KEY_HEX = "e1c7a3f9b5d2084c6e1a7f3b9d5c2e8a4f0b6d2c8e4a0f6b2d8c4e0a6f2b8d4c"
# This tree first on the path of the server's and the client's own Python, and no
# PYTHONPATH for Spark to hand on to the executors' Python: only their packages are theirs.
ON_PATH = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
CLI = ON_PATH + "from dp_pipeline.release.cli import main; sys.exit(main())"


def _bare_python(folder: Path) -> Path:
    venv.create(folder, with_pip=False)  # a Python with no packages: no dp_pipeline
    return folder / "bin" / "python"


def test_a_connect_server_without_dp_pipeline_is_refused_before_the_reservation(tmp_path):
    worker = _bare_python(tmp_path / "bare")
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.pop("SPARK_REMOTE", None)
    environment.pop("SPARK_CONNECT_MODE_ENABLED", None)
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-c", ON_PATH + SERVER, "2", "4"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=tmp_path,  # a worker's `python -m` puts its working folder on its path
        env=dict(environment, PYSPARK_PYTHON=str(worker)),
    )
    try:
        words = server.stdout.readline().split()
        assert words[:1] == ["ready"], (tmp_path / "server.log").read_text()[-3000:]
        folder = tmp_path / "job"
        folder.mkdir()
        operator_home(folder)
        spec = folder / "small.toml"
        spec.write_text(
            SMALL_SPEC.format(tmp=folder).replace("3000", "60").replace('"pandas"', '"spark"')
        )
        remote = f"sc://127.0.0.1:{words[1]}"
        result = subprocess.run(
            [sys.executable, "-c", CLI, "run", str(spec), "--json", "--remote", remote],
            env=dict(environment, DP_PIPELINE_MASTER_KEY=KEY_HEX, DP_PIPELINE_HOME=str(folder)),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("dp-release run:")]
    assert errors == [
        f"dp-release run: the Spark Connect server's executors' Python {worker} cannot "
        "import dp_pipeline (ModuleNotFoundError: no module 'dp_pipeline'): install "
        f"dp_pipeline {__version__} in the Spark Connect server's environment (the Python "
        "its executors run: PYSPARK_PYTHON where the server starts) and restart the server"
    ], result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    line = json.loads(result.stdout.splitlines()[-1])
    assert (line["status"], line["exit_code"]) == ("spec_error", 2)
    assert "cumulative" not in line  # nothing reserved
    ledger = folder / "ledger.sqlite"
    assert not ledger.exists() or Ledger(ledger).history() == []
