"""A Spark Connect server in a child process, for the tests that are its clients.

The server is a local-mode JVM with the Connect plugin listening on a free port of
127.0.0.1 (the port chosen by the server itself, so two test processes never race
for one); `connect_server` yields once it listens, with its port and its JVM's
process id (a test may kill that JVM to lose the server under a client).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SERVER = """
import sys
from dp_pipeline.engines.spark.session.start import local_session
cores, partitions = int(sys.argv[1]), int(sys.argv[2])
session = local_session(cores, shuffle_partitions=partitions, driver_memory="1g", conf={
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.connect.grpc.binding.port": "0",
})
service = getattr(session._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
port = int(getattr(service, "MODULE$").localPort())
print("ready", port, session.sparkContext._gateway.proc.pid, flush=True)
sys.stdin.read()
try:
    session.stop()
except Exception:  # the test killed the JVM: nothing to stop
    pass
"""


class ServerStartError(RuntimeError):
    """The server exited before it listened; the message ends with its log."""


@contextlib.contextmanager
def connect_server(
    log: Path, cores: int = 2, partitions: int = 4, env: Mapping[str, str] | None = None
) -> Iterator[tuple[int, int]]:
    """Start the server (its stderr to ``log``), yield ``(port, jvm_pid)``, stop it after.

    ``env`` replaces the child's environment (default: this process's), with this
    checkout on PYTHONPATH either way.
    """
    child_env = {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)}
    with log.open("w") as errors:
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(cores), str(partitions)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            cwd=ROOT,
            env=child_env,
        )
    try:
        words = server.stdout.readline().split()
        if len(words) != 3 or words[0] != "ready":
            raise ServerStartError(
                f"the Spark Connect server did not start:\n{log.read_text()[-3000:]}"
            )
        yield int(words[1]), int(words[2])
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
