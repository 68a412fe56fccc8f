"""A spec is hostile input: it runs no code and cannot choose where the budget or the key
is (its Spark settings come from an allowlist; its ledger and key file must be the
operator's); ledger locations are parsed strictly and a ledger's lease follows the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dp_pipeline.release import cli
from dp_pipeline.release.run import Progress, apply_overrides, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from dp_pipeline.release.spec.spark_allowlist import spec_setting_problem
from tests.test_release_inputs import SPEC, write_inputs

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
