"""Runs ``dp-release`` with the release protocol stopped at one named point (crash tests).

    python tests/support/protocol_launcher.py POINT kill ARGS...
    python tests/support/protocol_launcher.py POINT wait:GO_FILE ARGS...

The package has no fault injection of its own: ``protocol.checkpoint`` is a no-op
called at each named point of the protocol (``protocol.Checkpoint``: mid_reserve,
inside the ledger's reservation transaction, then after_reserve, after_noise,
mid_table, before_publish, the steps of an output URI's publication from
before_upload to after_manifest, after_publish). This launcher, run by the tests in a
child process, replaces it before calling the CLI's ``main(ARGS)``:

- ``kill``: the process kills itself with SIGKILL at POINT (no clean-up,
  exactly like an OOM kill or a lost node);
- ``wait:GO_FILE``: at POINT it creates ``GO_FILE.reached`` and waits until
  GO_FILE exists, then goes on (a run that is alive, holding its lease).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dp_pipeline.release import protocol
from dp_pipeline.release.cli import main


def install(point: str, action: str) -> None:
    """Replace the protocol's no-op checkpoint with one that acts at ``point``."""

    def checkpoint(name: str) -> None:
        if name != point:
            return
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        go = Path(action.removeprefix("wait:"))
        go.with_name(go.name + ".reached").touch()
        deadline = time.monotonic() + 600
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    if action != "kill" and not action.startswith("wait:"):
        raise SystemExit(f"action {action!r}: must be 'kill' or 'wait:GO_FILE'")
    if point not in set(protocol.Checkpoint):
        raise SystemExit(f"point {point!r}: must be one of {', '.join(protocol.Checkpoint)}")
    protocol.checkpoint = checkpoint


if __name__ == "__main__":
    install(sys.argv[1], sys.argv[2])
    sys.exit(main(sys.argv[3:]))
