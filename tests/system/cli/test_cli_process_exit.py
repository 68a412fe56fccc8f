"""``dp-release`` exits with its documented code even when the interpreter's teardown aborts.

Native libraries can abort a process after its work is done (PyArrow's threads at the
C++ runtime's exit: SIGABRT, status 134). The condition is made certain here: the child
process registers C's ``abort`` as an exit handler of the C runtime before it runs the
console script's entry point, exactly as a ``dp-release`` process whose teardown aborts.
Each outcome must still exit with its code from docs/scheduling.md's table, with its
complete result line on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.outcome import ExitCode
from tests.system.cli.test_cli_exit_codes import KEY_HEX, write_spec

ROOT = Path(__file__).resolve().parents[3]
# The console script's own two lines, after an exit handler of the C runtime that aborts.
ABORTING = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.__cxa_atexit(libc.abort, None, None)\n"
    "from dp_pipeline.release.cli import main\n"
    "sys.exit(main())\n"
)


def _dp_release(*arguments: str, home: Path) -> subprocess.CompletedProcess:
    environment = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        DP_PIPELINE_MASTER_KEY=KEY_HEX,
        DP_PIPELINE_HOME=str(home),
        HOME=str(home / "user"),  # each home an operator of its own (one key, one ledger)
    )
    return subprocess.run(
        [sys.executable, "-c", ABORTING, *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_teardown_abort_is_real_without_the_command():
    """The condition holds: the same child without dp-release's exit dies of SIGABRT."""
    done = subprocess.run(
        [sys.executable, "-c", ABORTING.replace("from dp_pipeline", "#")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -6


def test_every_outcome_exits_with_its_documented_code_when_teardown_aborts(tmp_path):
    spec = write_spec(tmp_path)
    expected = [
        (["run", spec, "--json", "--quiet"], ExitCode.PUBLISHED),
        (["run", spec, "--json", "--quiet"], ExitCode.ALREADY_COMMITTED),
        (["run", spec, "--json", "--quiet", "--persons", "2000"], ExitCode.REFUSED_CHANGED),
    ]
    for arguments, code in expected:
        done = _dp_release(*arguments, home=tmp_path)
        assert done.returncode == code, (arguments, done.returncode, done.stderr[-2000:])
        line = json.loads(done.stdout)  # the whole result line was written before the exit
        assert (line["exit_code"], line["status"]) == (int(code), code.status)
        assert "terminate called" not in done.stderr

    over = write_spec(tmp_path / "over", cap="{ epsilon = 1, delta = 1e-8 }")
    done = _dp_release("run", over, "--json", "--quiet", home=tmp_path / "over")
    assert done.returncode == ExitCode.REFUSED_BUDGET == 4, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "refused_budget"
    done = _dp_release("plan", over, home=tmp_path / "over")
    assert done.returncode == ExitCode.REFUSED_BUDGET, done.stderr[-2000:]  # as run would
    done = _dp_release("plan", spec, home=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("arguments", "code", "stream", "text"),
    [
        (["--version"], 0, "stdout", "dp-release "),
        (["run"], 2, "stderr", "the following arguments are required: spec"),
        (["run", "missing.toml", "--quiet"], 2, "stderr", "dp-release run: "),
        (["ledger", "--ledger", "postgresql://"], 2, "stderr", "dp-release ledger: "),
    ],
)
def test_usage_and_spec_errors_keep_their_codes_when_teardown_aborts(
    tmp_path, arguments, code, stream, text
):
    done = _dp_release(*arguments, home=tmp_path)
    assert done.returncode == code, done.stderr[-2000:]
    assert text in getattr(done, stream)


def test_an_unexpected_error_is_1_with_its_traceback_when_teardown_aborts(tmp_path):
    spec = write_spec(tmp_path)
    broken = ABORTING.replace(
        "from dp_pipeline.release.cli import main\n",
        "from dp_pipeline.release import run\n"
        "def broken(*arguments):\n"
        "    raise RuntimeError('a bug')\n"
        "run.release_identity = broken\n"
        "from dp_pipeline.release.cli import main\n",
    )
    environment = dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_MASTER_KEY=KEY_HEX)
    done = subprocess.run(
        [sys.executable, "-c", broken, "run", spec, "--json", "--quiet"],
        env=dict(environment, DP_PIPELINE_HOME=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == ExitCode.ERROR == 1, done.stderr[-2000:]
    assert "Traceback" in done.stderr and "RuntimeError: a bug" in done.stderr
    assert json.loads(done.stdout)["status"] == "error"


def test_resumable_and_busy_keep_their_codes_when_teardown_aborts(tmp_path):
    spec, ledger = write_spec(tmp_path), str(tmp_path / "ledger.sqlite")
    disk_full = ABORTING.replace(
        "from dp_pipeline.release.cli import main\n",
        "from dp_pipeline.release import protocol\n"
        "def checkpoint(name):\n"
        "    if name == 'after_noise':\n"
        "        raise OSError(28, 'No space left on device')\n"
        "protocol.checkpoint = checkpoint\n"
        "from dp_pipeline.release.cli import main\n",
    )
    environment = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        DP_PIPELINE_MASTER_KEY=KEY_HEX,
        DP_PIPELINE_HOME=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-c", disk_full, "run", spec, "--ledger", ledger, "--json", "--quiet"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == ExitCode.FAILED_RESUMABLE == 6, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "failed_resumable"
    with Ledger(ledger) as holder, holder.lease("small-1"):
        done = _dp_release("run", spec, "--ledger", ledger, "--json", "--quiet", home=tmp_path)
    assert done.returncode == ExitCode.BUSY == 8, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "busy"
    done = _dp_release("run", spec, "--ledger", ledger, "--json", "--quiet", home=tmp_path)
    assert done.returncode == ExitCode.PUBLISHED, done.stderr[-2000:]  # resumed, no new spend
