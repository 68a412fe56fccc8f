"""A spec is hostile input: it runs no code and cannot choose where the budget or the key
is (its Spark settings come from an allowlist; its ledger and key file must be the
operator's); ledger locations are parsed strictly and a ledger's lease follows the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dp_pipeline.release import cli
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.lease import LeaseHeldError
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_location import ledger_location
from dp_pipeline.release.outcome import public_location
from dp_pipeline.release.run import Progress, apply_overrides, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from dp_pipeline.release.spec.spark_allowlist import spec_setting_problem
from tests.unit.release.sources.test_release_inputs import SPEC, write_inputs

ATTACK = "-XX:MaxMetaspaceSize=16m '-XX:OnOutOfMemoryError=cat $DP_PIPELINE_HOME/master.key > /x'"


def spec_file(tmp_path: Path, conf: str, engine: str = "pandas", input_line: str = "") -> Path:
    """The inputs tests' spec (its input a Parquet file) with ``conf`` as [run.spark_conf]."""
    _, parquet_path = write_inputs(tmp_path)
    text = SPEC.format(tmp=tmp_path, input=parquet_path, format="parquet", engine=engine)
    if input_line:
        text = text.replace(f'path = "{parquet_path}"\nformat = "parquet"', input_line)
    path = tmp_path / "spec.toml"
    path.write_text(text + f"\n[run.spark_conf]\n{conf}\n")
    return path


# ------------------------------------------------------------ [run.spark_conf]


def test_the_jvm_option_attack_is_refused_at_plan_time_naming_only_the_key(tmp_path, capsys):
    path = spec_file(tmp_path, f'"spark.driver.extraJavaOptions" = "{ATTACK}"', "spark")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "run.spark_conf 'spark.driver.extraJavaOptions': a spec may not set it" in message
    assert "dp-release run --conf" in message and "spark-defaults.conf" in message
    assert "OnOutOfMemoryError" not in message and "master.key" not in message
    assert cli.main(["plan", str(path)]) == 2
    assert "spark.driver.extraJavaOptions" in capsys.readouterr().err
    # run: the same one line before anything is read or reserved; no ledger is created.
    code = cli.main(["run", str(path), "--json", "--quiet"])
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert code == result["exit_code"] and result["status"] != "published"
    assert "OnOutOfMemoryError" not in captured.out + captured.err
    assert not (tmp_path / "ledger.sqlite").exists()


@pytest.mark.parametrize(
    "key",
    [
        "spark.driver.extraJavaOptions",
        "spark.executor.extraJavaOptions",
        "spark.driver.extraClassPath",
        "spark.executor.extraLibraryPath",
        "spark.jars",
        "spark.jars.packages",
        "spark.jars.repositories",
        "spark.jars.ivySettings",
        "spark.pyspark.python",
        "spark.pyspark.driver.python",
        "spark.executorEnv.PYTHONPATH",
        "spark.extraListeners",
        "spark.sql.queryExecutionListeners",
        "spark.plugins",
        "spark.sql.extensions",
        "spark.serializer",
        "spark.submit.deployMode",
        "spark.files",
        "spark.archives",
        "spark.redaction.regex",
        "spark.eventLog.dir",
        "spark.ui.enabled",
        "spark.local.dir",
        "spark.sql.catalog.spark_catalog",
        "spark.sql.adaptive.customCostEvaluatorClass",
        "spark.sql.parquet.output.committer.class",
        "spark.hadoop.fs.s3a.impl",
        "spark.hadoop.fs.s3a.aws.credentials.provider",
        "spark.hadoop.io.compression.codecs",
        "spark.hadoop.fs.defaultFS",
        "spark.sql.catalogImplementation",
        "spark.some.future.setting",
    ],
)
def test_each_code_loading_family_and_anything_unlisted_is_refused(tmp_path, key):
    with pytest.raises(SpecError) as caught:
        load_spec(spec_file(tmp_path, f'"{key}" = "VALUE-NEVER-SHOWN"'))
    message = str(caught.value)
    assert f"run.spark_conf {key!r}:" in message
    assert "it belongs to the operator: pass it to dp-release run --conf" in message
    assert "VALUE-NEVER-SHOWN" not in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.hadoop.fs.viewfs.mounttable.c.link./data", "file:///srv/data"),
        ("spark.hadoop.fs.s3a.endpoint", "http://minio:9000"),
        ("spark.hadoop.fs.s3a.bucket.people.endpoint.region", "eu-west-1"),
        ("spark.sql.warehouse.dir", "/srv/warehouse"),
        ("spark.sql.shuffle.partitions", "8"),
        ("spark.sql.session.timeZone", "UTC"),
        ("spark.sql.ansi.enabled", "true"),
        ("spark.sql.caseSensitive", "false"),
        ("spark.driver.memory", "2g"),
        ("spark.executor.memory", "4g"),
        ("spark.executor.cores", "2"),
        ("spark.memory.fraction", "0.5"),
    ],
)
def test_allowlisted_settings_are_accepted(key, value):
    assert spec_setting_problem(key, value) is None


def test_a_value_that_would_read_the_environment_is_refused(tmp_path):
    conf = '"spark.sql.warehouse.dir" = "/srv/${env:DP_PIPELINE_MASTER_KEY}"'
    with pytest.raises(SpecError) as caught:
        load_spec(spec_file(tmp_path, conf))
    message = str(caught.value)
    assert "run.spark_conf 'spark.sql.warehouse.dir': the value holds '${'" in message
    assert "DP_PIPELINE_MASTER_KEY" not in message


def test_the_operators_conf_still_takes_any_setting(tmp_path):
    spec = load_spec(spec_file(tmp_path, '"spark.sql.session.timeZone" = "UTC"'))
    operator = ["spark.driver.extraJavaOptions=-XX:+UseG1GC", "spark.jars=/opt/x.jar"]
    merged = apply_overrides(spec, spark_conf=operator)
    assert merged.spark_conf.as_dict() == {
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC",
        "spark.jars": "/opt/x.jar",
        "spark.sql.session.timeZone": "UTC",
    }


@pytest.mark.spark
def test_allowlisted_spec_settings_reach_the_session(spark, tmp_path):
    _, parquet_path = write_inputs(tmp_path)
    data = tmp_path / "mounted"
    data.mkdir()
    (data / "part-0.parquet").write_bytes(parquet_path.read_bytes())
    conf = (
        f'"spark.hadoop.fs.viewfs.mounttable.dphostile.link./data" = "file://{data}"\n'
        '"spark.sql.session.timeZone" = "UTC"'
    )
    path = spec_file(tmp_path, conf, "spark", 'path = "viewfs://dphostile/data"')
    lines: list[str] = []

    class Lines(Progress):
        def __call__(self, message: str) -> None:
            lines.append(message)

    # The input is reachable only through the spec's mount: the settings reached Spark.
    result = run_release(load_spec(path), progress=Lines(), spark=spark)
    assert result.outcome == "reserved"
    assert any("spark.sql.session.timeZone" in line and "running session" in line for line in lines)


# ------------------------------------------------------------ ledger locations

PASSWORD = "hunter2-never-shown"
CONNINFO = f"host=127.0.0.1 port=1 user=x password={PASSWORD} dbname=budget connect_timeout=2"


def test_a_libpq_string_is_a_postgresql_ledger_with_its_password_masked():
    location = ledger_location(CONNINFO)
    assert (location.kind, location.path, location.conninfo) == ("postgresql", None, CONNINFO)
    assert location.shown == (
        "host=127.0.0.1 port=1 user=x password=*** dbname=budget connect_timeout=2"
    )
    assert PASSWORD not in repr(location) and PASSWORD not in str(location)
    assert public_location(CONNINFO) == "host=127.0.0.1 port=1 dbname=budget"
    quoted = ledger_location("dbname='my budget' password='a b\\'c'")
    assert quoted.shown == "dbname='my budget' password=***"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"host=db password={PASSWORD}", "names no database; add dbname=NAME"),
        (f"host=db password={PASSWORD} dbnam=y", "starts like a libpq connection string"),
        (f"password={PASSWORD} trailing", "starts like a libpq connection string"),
        ("ledger=1.sqlite", "a SQLite file whose name holds '=' as ./NAME"),
    ],
)
def test_a_string_that_starts_like_libpq_is_a_connection_or_an_error(text, expected):
    with pytest.raises(LedgerError) as caught:
        ledger_location(text)
    assert expected in str(caught.value) and PASSWORD not in str(caught.value)
    assert ledger_location("./ledger=1.sqlite").path == Path("ledger=1.sqlite")


def test_a_libpq_ledger_flag_never_becomes_a_file_nor_shows_its_password(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    path = spec_file(tmp_path, '"spark.sql.session.timeZone" = "UTC"')
    # The operator names the ledger: the spec names none.
    path.write_text(path.read_text().replace(f'ledger = "{tmp_path}/ledger.sqlite"\n', ""))
    code = cli.main(["run", str(path), "--ledger", CONNINFO, "--json", "--quiet"])
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert code == result["exit_code"] != 0
    assert result["ledger"] == "host=127.0.0.1 port=1 dbname=budget"
    assert "cannot be opened" in result["message"]
    assert PASSWORD not in captured.out + captured.err
    # Nothing named after the string, anywhere under the working directory.
    assert not [p for p in tmp_path.rglob("*") if "dbname" in p.name]
    assert cli.main(["plan", str(path), "--ledger", CONNINFO, "--json"]) == 2
    captured = capsys.readouterr()
    assert "cannot be opened" in captured.err and PASSWORD not in captured.out + captured.err


# ------------------------------------------------------------ the run lease


def test_a_symbolic_link_to_the_ledger_reaches_the_same_lease(tmp_path):
    real = tmp_path / "ledgers" / "ledger.sqlite"
    Ledger(real).close()
    link = tmp_path / "link.sqlite"
    link.symlink_to(real)
    first = Ledger(real)
    with first.lease("r-1"), pytest.raises(LeaseHeldError) as caught, Ledger(link) as second:
        second.lease("r-1").__enter__()
    assert "holds the lease" in str(caught.value)
    assert not (tmp_path / "link.sqlite.leases").exists()


def test_a_hard_linked_ledger_is_refused_before_a_lease(tmp_path):
    real = tmp_path / "ledger.sqlite"
    Ledger(real).close()
    os.link(real, tmp_path / "other.sqlite")
    with pytest.raises(LedgerError) as caught, Ledger(tmp_path / "other.sqlite") as ledger:
        ledger.lease("r-1").__enter__()
    assert "the file has 2 names (hard links)" in str(caught.value)
    assert "keep one name" in str(caught.value)


# ------------------------------------------------------------ run.ledger and run.key_file


def test_a_spec_cannot_choose_a_fresh_ledger_or_key_file(tmp_path, capsys):
    text = spec_file(tmp_path, '"spark.sql.session.timeZone" = "UTC"').read_text()
    fresh = text.replace(f"{tmp_path}/ledger.sqlite", "fresh/ledger.sqlite").replace(
        f"{tmp_path}/master.key", "fresh/master.key"
    )
    path = tmp_path / "fresh.toml"
    path.write_text(fresh)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert (
        f"run.ledger = '{tmp_path}/fresh/ledger.sqlite': a spec cannot choose the ledger its "
        f"budget is counted in; it must name the operator's, '{tmp_path}/ledger.sqlite' "
        "(--ledger, else ledger.sqlite in $DP_PIPELINE_HOME)"
    ) in message
    assert "run.key_file = " in message and "a spec cannot choose the master key file" in message
    assert "have the operator pass --key-file or set DP_PIPELINE_HOME" in message
    # The command line refuses it before anything is read, reserved or created.
    assert cli.main(["run", str(path), "--quiet"]) == 2
    assert "a spec cannot choose the ledger" in capsys.readouterr().err
    assert not (tmp_path / "fresh").exists() and not (tmp_path / "ledger.sqlite").exists()


def test_a_spec_naming_the_operators_ledger_and_key_is_accepted(tmp_path, monkeypatch):
    path = spec_file(tmp_path, '"spark.sql.session.timeZone" = "UTC"')
    spec = load_spec(path)  # {tmp}/ledger.sqlite is the home's ($DP_PIPELINE_HOME)
    assert spec.ledger_path == str(tmp_path / "ledger.sqlite")
    # The operator's flags decide; a spec naming the same file through a link agrees.
    operator = tmp_path / "operator"
    operator.mkdir()
    (operator / "ledger.sqlite").touch()
    (tmp_path / "ledger.sqlite").symlink_to(operator / "ledger.sqlite")
    flagged = load_spec(path, ledger=str(operator / "ledger.sqlite"))
    assert flagged.ledger_path == str(operator / "ledger.sqlite")
    # A flag decides outright: the spec's own key file is not used.
    chosen = load_spec(path, key_file=str(operator / "master.key"))
    assert chosen.key_file == str(operator / "master.key")
    # $DP_PIPELINE_LEDGER is the operator's ledger when no --ledger is given.
    monkeypatch.setenv("DP_PIPELINE_LEDGER", str(operator / "other.sqlite"))
    with pytest.raises(SpecError, match=r"run.ledger = .* it must name the operator's"):
        load_spec(path)
    monkeypatch.setenv("DP_PIPELINE_LEDGER", "postgresql://db.example/other")
    with pytest.raises(SpecError, match=r"run.ledger = .* it must name the operator's"):
        load_spec(path)
    monkeypatch.setenv("DP_PIPELINE_LEDGER", "relative.sqlite")
    with pytest.raises(SpecError, match=r"\$DP_PIPELINE_LEDGER: must be a URL or an absolute"):
        load_spec(path)


def test_a_spec_cannot_move_the_ledger_to_a_server_the_operator_did_not_name(tmp_path):
    text = spec_file(tmp_path, '"spark.sql.session.timeZone" = "UTC"').read_text()
    server = f"postgresql://x:{PASSWORD}@db.example/budget"
    path = tmp_path / "server.toml"
    path.write_text(text.replace(f'"{tmp_path}/ledger.sqlite"', repr(server)))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert "run.ledger = 'postgresql://x:***@db.example/budget': a spec cannot" in str(caught.value)
    assert PASSWORD not in str(caught.value)
    # The operator's own server, written another way (another user): the same ledger.
    spec = load_spec(path, ledger="host=db.example dbname=budget user=y")
    assert spec.ledger_path == "host=db.example dbname=budget user=y"
