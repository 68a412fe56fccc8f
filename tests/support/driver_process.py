"""Run a short Python driver script in a fresh process (its own JVM), for the tests of
how a driver JVM starts."""

from __future__ import annotations

import subprocess
import sys


def run_driver(script: str, environment: dict[str, str]) -> str:
    """The last line the script prints; fails the test, showing its stderr, if it fails."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]
