"""Large combined tables are made consistent on Spark: the same published bytes as the driver."""

from __future__ import annotations

import re

import pytest

import dp_pipeline.release.consistency as consistency
from dp_pipeline.release.cli import main
from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.spec import load_spec
from dp_pipeline.release.spec_model import SpecError
from tests.test_release_consistency import fixed_key, geo_spec  # noqa: F401 (fixture)

QUIET = Progress(quiet=True)


def _files(folder):
    """Every published file's bytes; the report without its ledger reservation time."""
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    report = files.pop("privacy_report.json").decode()
    reserved = [line for line in report.splitlines() if '"reserved_at"' in line]
    assert len(reserved) == 1
    files["privacy_report.json"] = report.replace(reserved[0], "").encode()
    return files


@pytest.mark.spark
def test_spark_post_processing_publishes_the_driver_files_byte_for_byte(
    tmp_path, spark, monkeypatch
):
    driver = run_release(geo_spec(tmp_path / "d", engine="spark"), progress=QUIET, spark=spark)
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 100)
    lines = []
    on_spark = run_release(
        geo_spec(tmp_path / "s", engine="spark"), progress=lines.append, spark=spark
    )
    assert any("on Spark, one task per top-level group" in line for line in lines)
    published = _files(on_spark.output)
    assert {"county_sex.parquet", "state_sex.parquet", "state_tenure.parquet"} <= set(published)
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
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 100)
    lines = []
    on_spark = run_release(_with_national_table(tmp_path / "s"), progress=lines.append, spark=spark)
    assert any("on Spark, one task per top-level group" in line for line in lines)
    published = _files(on_spark.output)
    assert "sex_total.parquet" in published
    assert published == _files(driver.output)


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
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 100)
    with pytest.raises(SpecError, match=re.escape(REFUSED)):
        run_release(spec, progress=QUIET)
    # Refused before the ledger is opened: nothing reserved, nothing written.
    assert not (tmp_path / "ledger.sqlite").exists()
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 10**9)
    consistency.check_postprocess_engine(spec)  # on the driver the global solve takes it
    # National tables the groups can take pass on Spark too.
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 100)
    consistency.check_postprocess_engine(_with_national_table(tmp_path / "national"))


def test_dp_release_plan_refuses_what_run_refuses(tmp_path, monkeypatch, capsys):
    path = _top_down_coupled(tmp_path)
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 100)
    with pytest.raises(SpecError) as refused:
        run_release(load_spec(path), progress=QUIET)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dp-release plan: ")
    assert str(refused.value) in err
    assert REFUSED in err
    assert not (tmp_path / "ledger.sqlite").exists()
