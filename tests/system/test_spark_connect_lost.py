"""A Spark Connect server that stops under a release: one line naming it, the run resumable.

The server runs in a child process (a local-mode JVM with the Connect plugin on a
free port of 127.0.0.1); the release runs in another, as its Connect client, and
the server's JVM is killed as soon as the ledger has reserved the release's budget.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from connect_server import connect_server
from release_specs import SMALL_SPEC

from dp_pipeline.engines.spark.session.failures import connect_server_lost, session_failure

pytestmark = pytest.mark.spark
grpc = pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")

ROOT = Path(__file__).resolve().parents[2]
KEY_HEX = "a7d393ef6fecbbd9712b118e67aee439871402fd15b4ba05fd5f5db5b4d22ede"

# The release's client: its retries shortened (the client's default waits minutes for a
# server to come back); the server's JVM killed once the budget is reserved.
CLIENT = """
import os, signal, sys
from pyspark.sql.connect.client.retries import DefaultPolicy
from pyspark.sql.connect.session import SparkSession as Connect
from dp_pipeline.release.run import run_release
from dp_pipeline.release.spec.load import load_spec

port, jvm, spec_path = sys.argv[1:4]
os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
session = Connect.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
session.client.set_retry_policies(
    [DefaultPolicy(max_retries=2, initial_backoff=50, max_backoff=200)]
)

def progress(message):
    if message.startswith("ledger: reserved"):
        os.kill(int(jvm), signal.SIGKILL)

try:
    run_release(load_spec(spec_path), progress=progress, spark=session)
except Exception as error:
    print("raised", type(error).__name__)
    print(error)
else:
    print("published")
"""


def test_a_connect_servers_unavailable_status_is_a_lost_server_whatever_its_text():
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    lost = SparkConnectGrpcException("any text", grpc_status_code=grpc.StatusCode.UNAVAILABLE)
    other = SparkConnectGrpcException("UNAVAILABLE", grpc_status_code=grpc.StatusCode.UNKNOWN)
    assert connect_server_lost(lost)
    assert not connect_server_lost(other)
    assert not connect_server_lost(RuntimeError("UNAVAILABLE"))
    try:
        try:
            raise lost
        except SparkConnectGrpcException:
            raise ValueError("wrapped") from None  # context kept, as PySpark raises
    except ValueError as wrapped:
        assert connect_server_lost(wrapped)


def test_a_connect_server_that_dies_after_the_reservation_is_named_in_one_line(tmp_path):
    spec_path = tmp_path / "small.toml"
    spec_path.write_text(SMALL_SPEC.format(tmp=tmp_path).replace('"pandas"', '"spark"'))
    env = {**os.environ, "DP_PIPELINE_MASTER_KEY": KEY_HEX, "PYTHONPATH": str(ROOT)}
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_CONNECT_AUTHENTICATE_TOKEN"):
        env.pop(name, None)
    with connect_server(tmp_path / "server.log", cores=1, partitions=2, env=env) as (port, jvm):
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, str(port), str(jvm), str(spec_path)],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
    lines = client.stdout.strip().splitlines()
    assert lines[0] == "raised EngineStoppedError", client.stdout + client.stderr[-3000:]
    message = lines[1]
    assert len(lines) == 2
    assert "the Spark Connect server is unreachable" in message
    assert "the same release id resumes the run" in message and "no new spend" in message
    # Nothing of the client's or the server's own text.
    for text in ("UNAVAILABLE", "StatusCode", "grpc", "127.0.0.1", str(port), "refused"):
        assert text not in message


def test_a_classic_session_is_not_taken_for_a_lost_connect_server(spark):
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    lost = SparkConnectGrpcException("x", grpc_status_code=grpc.StatusCode.UNAVAILABLE)
    assert session_failure(spark, lost) is None
