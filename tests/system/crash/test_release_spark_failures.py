"""A Spark session that dies under a release: one line naming what happened and the fix.

The JVM of a local session is a real child process of the run (`dp-release run` in a
child process here): it is killed with SIGKILL, as the system's out-of-memory killer
does, while the run holds its reservation. The run is then charged (the reservation
stays, in state ``reading``), says so in one line with no py4j traceback, and the
same command resumes it, with other driver settings too (they are not part of the
release's identity).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from release_specs import SMALL_SPEC, operator_home

from dp_pipeline.engines.spark.session.failures import session_failure
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.run import Progress, apply_overrides, read_release, run_release
from dp_pipeline.release.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = str(ROOT / "tests" / "support" / "protocol_launcher.py")
KEY_HEX = "b59163f6516e8ee81ecc2cfc05e6ebbc7d81b82a9ae660ea6820b535d9e12845"

KILLED = (
    "dp-release run: the Spark engine stopped while the release ran: the Spark JVM was "
    "killed (SIGKILL; the system's out-of-memory killer sends SIGKILL when the machine runs "
    "short of memory); keep spark.driver.memory (the JVM's heap in local mode, 2g unless "
    "set) within the memory the machine has free, or run on a larger machine or a cluster; "
    "then run the same command again: the budget stays reserved and the same release id "
    "resumes the run with the same noise, no new spend"
)


def small_spec_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "small.toml"
    text = SMALL_SPEC.format(tmp=folder)
    operator_home(folder)  # the spec's ledger and key are the operator's
    path.write_text(text.replace("synthetic_persons = 3000", "synthetic_persons = 600"))
    return path


def environment() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_MASTER_KEY=KEY_HEX)


def java_processes(parent: int) -> list[int]:
    """The ``java`` processes among ``parent``'s descendants (its session's JVM)."""
    children: dict[int, list[int]] = {}
    names = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        pid = int(entry.name)
        names[pid] = name
        children.setdefault(int(rest.split()[1]), []).append(pid)
    found, stack = [], [parent]
    while stack:
        for child in children.get(stack.pop(), []):
            stack.append(child)
            if names[child] == "java":
                found.append(child)
    return found


def test_a_session_that_did_not_stop_is_not_a_failure():
    assert session_failure(None, RuntimeError("any")) is None


@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the JVM through /proc")
def test_a_jvm_killed_after_the_reservation_is_one_line_charged_and_resumed(tmp_path):
    spec_path = small_spec_file(tmp_path / "run")
    go = tmp_path / "go"
    reached = tmp_path / "go.reached"
    command = [sys.executable, LAUNCHER, "after_reserve", f"wait:{go}", "run", str(spec_path)]
    child = subprocess.Popen(
        [*command, "--engine", "spark", "--json"],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not reached.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reached.exists(), child.communicate(timeout=60)[1][-2000:]
        (jvm,) = java_processes(child.pid)
        os.kill(jvm, signal.SIGKILL)  # as the out-of-memory killer does
        while Path(f"/proc/{jvm}").exists() and "Z" not in _state(jvm):
            time.sleep(0.05)
        go.touch()  # the run goes on: it reads, and finds its JVM gone
        out, err = child.communicate(timeout=600)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 6, err[-3000:]
    # One line (and the JVM log's note), no py4j traceback; no figure of the data in it.
    errors = [line for line in err.splitlines() if line.startswith("dp-release run:")]
    assert errors == [
        KILLED,
        "dp-release run: exit 6: the reservation stays spent; run the same command again "
        "to resume it (same noise, no new spend)",
    ]
    assert "Traceback" not in err and "py4j" not in err.lower()
    result = json.loads(out.splitlines()[-1])
    assert result["status"] == "failed_resumable"
    assert result["message"] == KILLED.removeprefix("dp-release run: ")
    # Charged: the reservation stays, the run had started reading.
    spec = load_spec(spec_path)
    entry = Ledger(spec.ledger_path).entry(spec.release_id)
    assert (entry.status, entry.state) == ("reserved", "reading")
    # The same command resumes it, with other driver memory (not part of the identity).
    resume = ["run", str(spec_path), "--engine", "spark", "--conf", "spark.driver.memory=1g"]
    again = subprocess.run(
        [sys.executable, "-m", "dp_pipeline.release", *resume],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "published and committed (resumed an interrupted run)" in again.stdout
    assert Ledger(spec.ledger_path).entry(spec.release_id).status == "committed"
    # The same tables as an uninterrupted release (the pandas engine's, bit-identical).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
        reference = small_spec_file(tmp_path / "reference")
        done = run_release(apply_overrides(load_spec(reference)), progress=Progress(quiet=True))
    published = read_release(Path(spec.output_dir) / spec.release_id)
    for name, frame in read_release(done.output).items():
        pd.testing.assert_frame_equal(published[name], frame)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "Z"
    return stat[stat.rindex(")") + 2 :].split()[0]
