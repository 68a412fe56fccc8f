"""A standalone Spark cluster on 127.0.0.1: the release job submitted to it equals local mode.

The fixture starts a master and two one-core workers with PySpark's bundled
``spark-class`` (real Spark daemons, no mocks), and stops them afterwards. The
job is ``jobs/census_release.py`` under ``spark-submit``, so this also covers
the spark-submit entry point and its master detection.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from release_specs import SMALL_SPEC, operator_home

from dp_pipeline.release.run import read_release

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
KEY_HEX = "57af74b97b8dca150c88eab838b51b745293770fb15167e0b7f938bd350df2e2"


def _spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environment(tmp: Path) -> dict[str, str]:
    from dp_pipeline.spark import ensure_java

    return dict(
        os.environ,
        JAVA_HOME=ensure_java(),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp / "logs"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=str(ROOT),
        DP_PIPELINE_MASTER_KEY=KEY_HEX,
    )


def _alive_workers(web_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=5) as reply:
            return int(json.load(reply).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """spark://127.0.0.1:<port> with two registered one-core workers; stopped afterwards."""
    tmp = tmp_path_factory.mktemp("cluster")
    environment = _environment(tmp)
    port, web_port = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = _spark_bin("spark-class")
    started = []
    log = open(tmp / "daemons.log", "w")  # noqa: SIM115  (closed in the finally below)
    try:
        started.append(
            subprocess.Popen(
                [
                    *(spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"),
                    *("--port", str(port), "--webui-port", str(web_port)),
                ],
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        for index in range(2):
            work = tmp / f"worker-{index}"
            work.mkdir()
            started.append(
                subprocess.Popen(
                    [
                        *(spark_class, "org.apache.spark.deploy.worker.Worker", url),
                        *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
                        *("--webui-port", str(_free_port()), "--work-dir", str(work)),
                    ],
                    env=environment,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.monotonic() + 120
        while _alive_workers(web_port) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                log.flush()
                pytest.fail(
                    "the standalone cluster did not start:\n" + (tmp / "daemons.log").read_text()
                )
            time.sleep(1)
        yield url, environment
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()


def _spec_file(tmp: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "spec.toml"
    path.write_text(SMALL_SPEC.format(tmp=tmp))
    operator_home(tmp)  # the spec's ledger and key are the operator's
    return path


def test_release_submitted_to_a_standalone_cluster_equals_local_mode(standalone_cluster, tmp_path):
    from dp_pipeline.datasets.synthetic import write_census_sample

    url, environment = standalone_cluster
    data = write_census_sample(tmp_path / "persons.parquet", 4000, seed=9)

    # Both runs: the shared small spec on the same file, Spark engine; only the master differs.
    job = ["run", "--input", str(data), "--engine", "spark"]
    cluster_spec = _spec_file(tmp_path / "cluster")
    submitted = subprocess.run(
        [
            *(_spark_bin("spark-submit"), "--master", url, "--conf", "spark.ui.enabled=false"),
            *("--conf", "spark.sql.shuffle.partitions=3"),
            *(str(ROOT / "jobs" / "census_release.py"), *job, str(cluster_spec)),
        ],
        env=dict(
            environment,
            DP_PIPELINE_HOME=str(cluster_spec.parent),
            HOME=str(cluster_spec.parent / "user"),  # each run an operator of its own
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert submitted.returncode == 0, submitted.stderr[-4000:]
    # The job ran on the cluster (the spark-submit master), not on the spec's local[1].
    # spark-submit's Python runner merges the driver's stderr (progress lines) into stdout.
    output = (submitted.stdout + submitted.stderr).splitlines()
    progress = [line for line in output if "] spark: " in line]
    assert any(url in line for line in progress), progress

    local_spec = _spec_file(tmp_path / "local")
    local = subprocess.run(
        [
            sys.executable,
            "-m",
            "dp_pipeline.release",
            *job,
            str(local_spec),
            "--master",
            "local[1]",
        ],
        env=dict(
            environment,
            DP_PIPELINE_HOME=str(local_spec.parent),
            HOME=str(local_spec.parent / "user"),
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert local.returncode == 0, local.stderr[-4000:]

    on_cluster = read_release(tmp_path / "cluster" / "out" / "small-1")
    in_local_mode = read_release(tmp_path / "local" / "out" / "small-1")
    assert set(on_cluster) == {"state_sex_age", "tenure", "state_income"}
    for name, frame in in_local_mode.items():
        assert frame.equals(on_cluster[name]), name
    assert len(on_cluster["state_sex_age"]) == 51 * 2 * 116  # spec ranges include stop
