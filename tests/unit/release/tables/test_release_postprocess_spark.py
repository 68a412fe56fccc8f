"""Large combined tables are made consistent on Spark: the same published bytes as the driver."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dp_pipeline.release.plan.postprocess as postprocess_checks
import dp_pipeline.release.publish.outputs as outputs
import dp_pipeline.release.publish.writer as writer
from dp_pipeline.release.cli import main
from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from tests.unit.release.plan.test_release_consistency import fixed_key, geo_spec  # noqa: F401 (fixture)

QUIET = Progress(quiet=True)


def _persisted(spark) -> set[int]:
    """The ids of the RDDs persisted in the session (other tests may leave theirs)."""
    return set(spark.sparkContext._jsc.getPersistentRDDs().keys())


def _files(folder):
    """Every published file's bytes; the report without its ledger reservation time (and
    the manifest without the report's digest)."""
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    report = files.pop("privacy_report.json").decode()
    reserved = [line for line in report.splitlines() if '"reserved_at"' in line]
    assert len(reserved) == 1
    files["privacy_report.json"] = report.replace(reserved[0], "").encode()
    manifest = json.loads(files.pop("manifest.json"))
    assert set(manifest["files"]) == set(files)
    del manifest["files"]["privacy_report.json"]
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def _margins(folder) -> dict:
    """The privacy report's margins of error of ``value``, by table."""
    report = json.loads((folder / "privacy_report.json").read_text())
    return report["postprocessing"]["value_margin_of_error"]


@pytest.mark.spark
def test_spark_post_processing_publishes_the_driver_files_byte_for_byte(
    tmp_path, spark, monkeypatch
):
    driver = run_release(geo_spec(tmp_path / "d", engine="spark"), progress=QUIET, spark=spark)
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    lines = []
    on_spark = run_release(
        geo_spec(tmp_path / "s", engine="spark"), progress=lines.append, spark=spark
    )
    assert any("on Spark, one task per top-level group" in line for line in lines)
    published = _files(on_spark.output)
    assert {"county_sex.parquet", "state_sex.parquet", "state_tenure.parquet"} <= set(published)
    assert {"county_sex", "state_sex", "state_tenure"} <= set(_margins(on_spark.output))
    assert published == _files(driver.output)


def _with_national_table(folder):
    geo_spec(folder, engine="spark")
    path = folder / "geo.toml"
    text = path.read_text()
    last = text.rindex('share = "1/4"')  # state_income: half of its share to the new table
    text = text[:last] + 'share = "1/8"' + text[last + len('share = "1/4"') :]
    path.write_text(text + '\n[[tables]]\nname = "sex_total"\nkeys = ["sex"]\nshare = "1/8"\n')
    return load_spec(path)


@pytest.mark.spark
def test_a_national_table_on_spark_publishes_the_driver_files_byte_for_byte(
    tmp_path, spark, monkeypatch
):
    driver = run_release(_with_national_table(tmp_path / "d"), progress=QUIET, spark=spark)
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    lines = []
    on_spark = run_release(_with_national_table(tmp_path / "s"), progress=lines.append, spark=spark)
    assert any("on Spark, one task per top-level group" in line for line in lines)
    published = _files(on_spark.output)
    assert "sex_total.parquet" in published
    assert published == _files(driver.output)
    # The executors aggregating, the tables kept on Spark: the national block too.
    # PySpark is imported only by the Spark tests (the core install has none)
    monkeypatch.setattr("dp_pipeline.release.tables.on_spark.DRIVER_INPUT_BYTES", 0)
    lines = []
    kept = run_release(_with_national_table(tmp_path / "k"), progress=lines.append, spark=spark)
    assert any("kept there for post-processing" in line for line in lines)
    assert _files(kept.output) == _files(driver.output)


def _top_down_coupled(folder):
    """A county table whose tenure margin only a national table has: refused per group."""
    geo_spec(folder, engine="spark")
    path = folder / "geo.toml"
    text = path.read_text().replace(
        'name = "state_tenure"\nkeys = ["state", "tenure"]',
        'name = "county_tenure"\nkeys = ["county", "tenure"]',
    )
    last = text.rindex('share = "1/4"')  # state_income: half of its share to the new table
    text = text[:last] + 'share = "1/8"' + text[last + len('share = "1/4"') :]
    path.write_text(
        text + '\n[[tables]]\nname = "tenure_total"\nkeys = ["tenure"]\nshare = "1/8"\n'
    )
    return path


REFUSED = (
    "postprocess: table 'county_tenure' (by county) takes the margin national x tenure from "
    "the national table 'tenure_total', so its top-down step couples every state"
)


def test_a_coupled_top_down_step_above_the_driver_limit_is_refused_before_any_spend(
    tmp_path, monkeypatch
):
    spec = load_spec(_top_down_coupled(tmp_path))
    assert "tenure_total" in spec.postprocess.tables
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    with pytest.raises(SpecError, match=re.escape(REFUSED)):
        run_release(spec, progress=QUIET)
    # Refused before the ledger is opened: nothing reserved, nothing written.
    assert not (tmp_path / "ledger.sqlite").exists()
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 10**9)
    postprocess_checks.check_postprocess_engine(spec)  # on the driver the global solve takes it


@pytest.mark.spark
@pytest.mark.parametrize(("rows", "general"), [(1000, False), (1024 * 1024, False), (1000, True)])
def test_tables_kept_on_spark_publish_the_driver_files_byte_for_byte(
    tmp_path, spark, monkeypatch, rows, general
):
    # The executors aggregate (no small-input shortcut) on both runs; the second keeps
    # the combined tables on Spark from the noise to the writer, in ranges of ``rows``
    # cells (1000: several row groups per county table, the same cut on both runs).
    # ``general``: the Spark SQL aggregation (its aggregates a DataFrame from the
    # start) instead of the pass over the Parquet row groups.
    from dp_pipeline.engines.spark import parquet_plan

    if general:
        monkeypatch.setattr(parquet_plan, "ONE_PASS_CELLS", 0)
    # PySpark is imported only by the Spark tests (the core install has none)
    monkeypatch.setattr("dp_pipeline.release.tables.on_spark.DRIVER_INPUT_BYTES", 0)
    monkeypatch.setattr(outputs, "ROW_GROUP_ROWS", rows)
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", rows)
    driver = run_release(geo_spec(tmp_path / "d", engine="spark"), progress=QUIET, spark=spark)
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    persisted = _persisted(spark)
    lines = []
    kept = run_release(geo_spec(tmp_path / "s", engine="spark"), progress=lines.append, spark=spark)
    assert any("kept there for post-processing" in line for line in lines)
    published = _files(kept.output)
    assert {"county_sex.parquet", "state_sex.parquet", "accuracy.json"} <= set(published)
    assert {"county_sex", "state_sex", "state_tenure"} <= set(_margins(kept.output))
    # The tallies of a table written in batches check its cells against that margin too.
    accuracy = {r["table"]: r for r in json.loads(published["accuracy.json"])["accuracy_vs_truth"]}
    classes = accuracy["county_sex"]["by_true_count"]
    assert {c["value_margin_of_error"] for c in classes} == {_margins(kept.output)["county_sex"]}
    assert all("within_value_margin" in c for c in classes)
    if rows == 1000:
        county = pq.ParquetFile(kept.output / "county_sex.parquet")
        assert [county.metadata.row_group(i).num_rows for i in range(7)] == [1000] * 6 + [286]
    assert published == _files(driver.output)
    assert _persisted(spark) <= persisted  # the release left nothing persisted


def test_the_streaming_writer_cuts_row_groups_where_write_table_does(tmp_path):
    size = outputs.ROW_GROUP_ROWS
    table = pa.table(
        {
            "county": pa.array(np.arange(2 * size + 17) // 3, pa.int64()),
            "sex": pa.array(np.where(np.arange(2 * size + 17) % 2, "F", "M")),
        }
    )
    outputs.write_table(table, tmp_path / "whole.parquet")
    pq.write_table(table, tmp_path / "default.parquet", compression="zstd")
    batches = (table.slice(start, size) for start in range(0, table.num_rows, size))
    assert outputs.write_batches(batches, tmp_path / "batches.parquet") == table.num_rows
    whole = (tmp_path / "whole.parquet").read_bytes()
    assert (tmp_path / "batches.parquet").read_bytes() == whole
    assert (tmp_path / "default.parquet").read_bytes() == whole
    assert pq.ParquetFile(tmp_path / "whole.parquet").metadata.num_row_groups == 3


def test_the_streaming_writer_refuses_a_short_batch_before_the_last(tmp_path):
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    batches = [table.slice(0, 1), table.slice(1, 2)]
    with pytest.raises(ValueError, match=r"x\.parquet: batches must have \d+ rows, all but"):
        outputs.write_batches(iter(batches), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"y\.parquet: no batch to write"):
        outputs.write_batches(iter([]), tmp_path / "y.parquet")


@pytest.mark.spark
def test_a_failure_mid_table_publishes_nothing_and_the_rerun_resumes(tmp_path, spark, monkeypatch):
    from dp_pipeline.engines.spark import postprocess
    from dp_pipeline.release.ledger.store import Ledger

    # PySpark is imported only by the Spark tests (the core install has none)
    monkeypatch.setattr("dp_pipeline.release.tables.on_spark.DRIVER_INPUT_BYTES", 0)
    monkeypatch.setattr(outputs, "ROW_GROUP_ROWS", 1000)
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 1000)
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    batches = postprocess.FittedCells.batches

    def lost_after_one_range(self, table, cells, rows):
        yield next(batches(self, table, cells, rows))
        raise RuntimeError("executor lost while reading the consistent cells")

    monkeypatch.setattr(postprocess.FittedCells, "batches", lost_after_one_range)
    spec = geo_spec(tmp_path, engine="spark")
    persisted = _persisted(spark)
    with pytest.raises(RuntimeError, match="executor lost while reading"):
        run_release(spec, progress=QUIET, spark=spark)
    out = tmp_path / "out"
    assert not (out / spec.release_id).exists()
    assert not list(out.glob(".*"))  # the hidden folder with the half-written file is gone
    # The data was read: the run is charged, its reservation stays spent.
    assert [(e.status, e.state) for e in Ledger(spec.ledger_path).history()] == [
        ("reserved", "noised")
    ]
    assert _persisted(spark) <= persisted
    # The same release id then resumes it whole (same noise, no new spend).
    monkeypatch.setattr(postprocess.FittedCells, "batches", batches)
    result = run_release(spec, progress=QUIET, spark=spark)
    assert result.outcome == "resumed"
    assert pq.ParquetFile(result.output / "county_sex.parquet").metadata.num_rows == 6286


KILLED_RUN = """
import sys
sys.path.insert(0, sys.argv[2])
import protocol_launcher
import dp_pipeline.release.plan.postprocess as postprocess_checks
import dp_pipeline.release.publish.outputs as outputs
import dp_pipeline.release.publish.writer as writer
import dp_pipeline.release.run as run
import dp_pipeline.release.tables.on_spark as spark_tables
from dp_pipeline.release.spec.load import load_spec

postprocess_checks.DRIVER_POSTPROCESS_CELLS = 100
spark_tables.DRIVER_INPUT_BYTES = 0
outputs.ROW_GROUP_ROWS = writer.ROW_GROUP_ROWS = 1000
protocol_launcher.install("mid_table", "kill")
run.run_release(load_spec(sys.argv[1]), progress=run.Progress(quiet=True))
"""


@pytest.mark.spark
def test_a_job_killed_mid_table_leaves_no_release_and_the_rerun_resumes(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from dp_pipeline.release.ledger.store import Ledger

    spec = geo_spec(tmp_path, engine="spark")
    environment = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[4]))
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            KILLED_RUN,
            str(tmp_path / "geo.toml"),
            str(Path(__file__).resolve().parents[3] / "support"),
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -9, killed.stderr
    out = tmp_path / "out"
    assert not (out / spec.release_id).exists()
    assert [p.name.startswith(f".{spec.release_id}.tmp-") for p in out.iterdir()] == [True]
    ledger = Ledger(spec.ledger_path)
    assert ledger.entry(spec.release_id).state == "noised"  # still counts as spent
    # The next run resumes the reservation (no new spend, the same noise) and publishes
    # what a release that was never interrupted publishes.
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    # PySpark is imported only by the Spark tests (the core install has none)
    monkeypatch.setattr("dp_pipeline.release.tables.on_spark.DRIVER_INPUT_BYTES", 0)
    monkeypatch.setattr(outputs, "ROW_GROUP_ROWS", 1000)
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 1000)
    resumed = run_release(spec, progress=QUIET)
    assert resumed.outcome == "resumed"
    assert ledger.entry(spec.release_id).status == "committed"
    assert not list(out.glob(".*"))  # the killed run's hidden folder is removed
    fresh = run_release(geo_spec(tmp_path / "fresh", engine="spark"), progress=QUIET)
    assert _files(resumed.output) == _files(fresh.output)
    # National tables the groups can take pass on Spark too.
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    postprocess_checks.check_postprocess_engine(_with_national_table(tmp_path / "national"))


def test_dp_release_plan_refuses_what_run_refuses(tmp_path, monkeypatch, capsys):
    path = _top_down_coupled(tmp_path)
    monkeypatch.setattr(postprocess_checks, "DRIVER_POSTPROCESS_CELLS", 100)
    with pytest.raises(SpecError) as refused:
        run_release(load_spec(path), progress=QUIET)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dp-release plan: ")
    assert str(refused.value) in err
    assert REFUSED in err
    assert not (tmp_path / "ledger.sqlite").exists()
