"""Spark Connect: releases and every dp_pipeline.spark function give the classic session's bytes.

A Spark Connect server runs in a child process (a local-mode JVM with the Connect
plugin, on a free port of 127.0.0.1); this process is its client, as a notebook
on Spark Connect is: no SparkContext, no RDDs, no py4j. A classic session (the
shared ``spark`` fixture) runs the same release first; Connect mode then lasts
until the module ends. One more test starts ``dp-release run --remote local[2]``,
which starts PySpark's own local Connect server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from connect_server import connect_server
from release_specs import SMALL_SPEC

import dp_pipeline.release.plan.postprocess as postprocess_checks
from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.spec.load import load_spec
from tests.unit.release.plan.test_release_consistency import geo_spec

pytestmark = pytest.mark.spark
pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")

ROOT = Path(__file__).resolve().parents[2]
QUIET = Progress(quiet=True)
KEY_HEX = "a7d393ef6fecbbd9712b118e67aee439871402fd15b4ba05fd5f5db5b4d22ede"
KEY = MasterKey.from_hex("5a" * 32)


def _published(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def classic(spark, tmp_path_factory):
    """A release on the classic session (tables made consistent on Spark), before Connect."""
    folder = tmp_path_factory.mktemp("classic")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
        patch.setattr("dp_pipeline.release.tables.on_spark.DRIVER_INPUT_BYTES", 0)
        patch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
        spec = geo_spec(folder, engine="spark")
        result = run_release(spec, progress=QUIET, spark=spark)
    assert result.outcome == "reserved"
    published = _published(result.output)
    # The Connect run re-emits the committed release: the ledger checks its bytes too.
    shutil.rmtree(result.output)
    return folder, published


@pytest.fixture(scope="module")
def connect(classic, tmp_path_factory):
    """A Spark Connect session on a server in a child process (this process: the client)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    log = tmp_path_factory.mktemp("server") / "server.log"
    with connect_server(log) as (port, _):
        # As a Connect client process: PySpark's functions build Connect columns.
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        session = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        try:
            yield session
        finally:
            session.stop()
            del os.environ["SPARK_CONNECT_MODE_ENABLED"]


@pytest.fixture
def paths(monkeypatch):
    """The aggregation paths taken: ("arrow", took it) and ("parquet", took it) per call."""
    import dp_pipeline.engines.spark.aggregate as spark_aggregate

    calls = []
    for name in ("arrow_pass", "parquet_pass"):
        original = getattr(spark_aggregate, name)

        def recording(*args, _original=original, _name=name):
            result = _original(*args)
            calls.append((_name.split("_")[0], result is not None))
            return result

        monkeypatch.setattr(spark_aggregate, name, recording)
    return calls


def test_the_session_is_spark_connect(connect):
    from dp_pipeline.engines.spark.session.kinds import is_connect, session_master

    frame = connect.range(3)
    assert is_connect(connect) and is_connect(frame)
    assert session_master(connect).endswith("Spark Connect")
    assert frame.count() == 3


def test_a_release_on_spark_connect_publishes_the_classic_sessions_bytes(
    connect, classic, paths, monkeypatch
):
    folder, published = classic
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    lines = []
    # The same spec, key and ledger: the committed release re-emitted, computed again on
    # Connect, and its bytes checked against those the ledger recorded.
    result = run_release(geo_spec(folder, engine="spark"), progress=lines.append, spark=connect)
    assert result.outcome == "already_committed"
    assert any("Spark Connect" in line for line in lines)
    assert any("kept there for post-processing" in line for line in lines)
    assert paths == [("parquet", False), ("arrow", True)]  # no RDDs on Connect
    assert _published(result.output) == published


def _people(n: int, seed: int, units: str) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    return pd.DataFrame(
        {
            "state": rng.integers(-1, 6, n),
            "sex": rng.choice(["f", "m", "x"], n).astype(object),
            "unit": np.arange(n) if units == "one row each" else rng.integers(0, n // 4, n),
            "income": rng.normal(50, 40, n),
        }
    )


def _query(statistic: str, table: str, **overrides) -> QuerySpec:
    params = dict(
        by=["state", "sex"],
        domains={"state": range(0, 5), "sex": ["f", "m"]},
        noise=DiscreteGaussian(16),
        key=KEY,
        release_id="connect",
        table=table,
        noise_partitions=3,
        privacy_unit="unit",
    )
    if statistic != "count":
        params.update(column="income", bounds=(-20, 100), granularity="1/4")
    params.update(overrides)
    return QuerySpec.build(statistic, **params)


def _same_as_pandas(noisy, df: pd.DataFrame, query: QuerySpec) -> None:
    _same_frames(noisy.toPandas(), df, query)


def _same_frames(got: pd.DataFrame, df: pd.DataFrame, query: QuerySpec) -> None:
    keys = list(query.cells.columns)
    got = got.sort_values(keys).reset_index(drop=True)
    expected = run_pandas(df, query)[0].sort_values(keys).reset_index(drop=True)
    assert list(got.columns) == list(expected.columns)
    for column in got.columns:
        assert got[column].astype(object).tolist() == expected[column].astype(object).tolist()


@pytest.mark.parametrize("units", ["one row each", "several rows"])
def test_every_spark_function_on_connect_gives_the_pandas_release(connect, paths, units):
    from dp_pipeline.spark import (
        SparkDPQuery,
        dp_count,
        dp_mean,
        dp_sum,
        run_queries,
        run_spark,
    )

    df = _people(400, 3, units)
    sdf = connect.createDataFrame(df)
    common = dict(
        by=["state", "sex"],
        domains={"state": range(0, 5), "sex": ["f", "m"]},
        noise=DiscreteGaussian(16),
        key=KEY,
        release_id="connect",
        privacy_unit="unit",
    )
    value = dict(column="income", bounds=(-20, 100), granularity="1/4")
    for function, statistic, extra in (
        (dp_count, "count", {}),
        (dp_sum, "sum", value),
        (dp_mean, "mean", value),
    ):
        query = function(table=statistic, **common, **extra)
        assert isinstance(query, SparkDPQuery)
        _same_as_pandas(sdf.transform(query), df, query.spec)
        assert query.diagnostics.rows_in == len(df)
    queries = [_query("count", "a"), _query("sum", "b")]
    for (noisy, _), query in zip(run_queries(sdf, queries), queries, strict=True):
        _same_as_pandas(noisy, df, query)
    _same_as_pandas(run_spark(sdf, queries[1])[0], df, queries[1])
    # Sorted ids take the Arrow pass; units with several rows the Spark SQL jobs.
    taken = {took for name, took in paths if name == "arrow"}
    assert taken == {units == "one row each"}
    assert ("parquet", True) not in paths


def test_the_noise_steps_on_connect_give_the_pandas_release(connect):
    from dp_pipeline.engines.spark.cells import NoisyCells
    from dp_pipeline.spark import collect_noisy_cells, noisy_cells, noisy_table

    df = _people(300, 5, "several rows")
    sdf = connect.createDataFrame(df)
    queries = [_query("count", "a"), _query("sum", "b")]
    with NoisyCells(sdf, queries) as cells:
        released = cells.collect_released(2)
        for index, query in enumerate(queries):
            _same_frames(released[index].table, df, query)
            _same_as_pandas(noisy_table(cells.aggregates, index, query, sdf), df, query)
        # The Spark noise job (above the driver's limit) draws what the driver draws.
        on_spark, _ = collect_noisy_cells(cells.aggregates, queries, connect, driver_cells=0)
        on_driver, _ = collect_noisy_cells(cells.aggregates, queries, connect)
        in_order = on_spark.sort_by([("_dp_table", "ascending"), ("_cell", "ascending")])
        assert in_order.to_pydict() == on_driver.to_pydict()
        lazy = noisy_cells(cells.aggregates, queries, connect).toArrow()
        assert lazy.num_rows == sum(q.cells.total for q in queries)


class _Squatter:
    """A process's listener on PySpark's default Connect port (15002), counting connections."""

    def __init__(self) -> None:
        self.accepted = 0
        self.socket = socket.socket()
        try:
            self.socket.bind(("127.0.0.1", 15002))
        except OSError:  # something holds it already: it is the squatter then
            self.socket.close()
            self.socket = None
            return
        self.socket.listen()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()


def test_dp_release_run_remote_local_publishes_the_classic_sessions_bytes(tmp_path):
    """``--remote local[2]`` starts a local Connect server in the job's process, on a port
    of its own: a process holding PySpark's default port 15002 sees no connection."""
    # Another process: this one is a Connect client (or has a classic session) already.
    spec_path = tmp_path / "small.toml"
    spec_path.write_text(SMALL_SPEC.format(tmp=tmp_path).replace('"pandas"', '"spark"'))
    env = {**os.environ, "DP_PIPELINE_MASTER_KEY": KEY_HEX, "PYTHONPATH": str(ROOT)}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)
    run = [sys.executable, "-m", "dp_pipeline.release.cli", "run", str(spec_path)]
    squatter = _Squatter()
    try:
        connect_run = subprocess.run(
            [*run, "--remote", "local[2]"],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
    finally:
        squatter.close()
    assert connect_run.returncode == 0, connect_run.stderr[-3000:]
    assert squatter.accepted == 0
    assert "starting a Spark Connect session on local[2]" in connect_run.stderr
    spec = load_spec(spec_path)
    remote = Path(spec.output_dir) / spec.release_id
    connect_files = _published(remote)
    # The classic run of the same release, its output moved away: the ledger re-emits it.
    shutil.move(remote, tmp_path / "connect-out")
    classic_run = subprocess.run(
        [*run, "--master", "local[2]"], env=env, capture_output=True, text=True, cwd=ROOT
    )
    # Exit 3: already committed, the same bytes re-emitted (nothing spent).
    assert classic_run.returncode == 3, classic_run.stderr[-3000:]
    assert "already committed" in classic_run.stdout
    assert _published(remote) == connect_files


LOCAL_SERVER_TOKEN = """
import os
from pyspark.sql.connect.session import SparkSession as Connect
from dp_pipeline.engines.spark.session.start import connect_session
session = connect_session("local[1]")
assert session.range(3).count() == 3
port = int(session.client._builder.endpoint.rsplit(":", 1)[1])
token = os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"]
assert port != 15002 and len(token) >= 32
intruder = Connect.builder.remote(f"sc://localhost:{port}/;token=not-{token}").create()
try:
    intruder.range(3).count()
except Exception as error:
    print("refused", type(error).__name__)
else:
    print("admitted")
intruder.client.close()
session.stop()
"""


def test_the_local_connect_server_admits_only_its_own_token():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_CONNECT_AUTHENTICATE_TOKEN"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", LOCAL_SERVER_TOKEN],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused" in done.stdout and "admitted" not in done.stdout, done.stdout


def test_remote_and_master_together_are_refused(tmp_path, capsys):
    from dp_pipeline.release.cli import main

    spec_path = tmp_path / "small.toml"
    spec_path.write_text(SMALL_SPEC.format(tmp=tmp_path))
    code = main(["run", str(spec_path), "--remote", "sc://localhost", "--master", "local[1]"])
    assert code == 2
    assert "--remote and --master: give one" in capsys.readouterr().err
    code = main(["run", str(spec_path), "--remote", "sc://localhost"])  # the spec says pandas
    assert code == 2
    assert "--remote: a Spark Connect URL is for the spark engine" in capsys.readouterr().err
    assert "SPARK_REMOTE" not in os.environ
    assert not (tmp_path / "ledger.sqlite").exists()  # refused before anything
