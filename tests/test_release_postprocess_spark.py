"""Large combined tables are made consistent on Spark: the same published bytes as the driver."""

from __future__ import annotations

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


def test_a_national_table_above_the_driver_limit_is_refused_before_any_spend(tmp_path, monkeypatch):
    spec = _with_national_table(tmp_path)
    assert "sex_total" in spec.postprocess.tables
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 100)
    with pytest.raises(SpecError, match=r"table 'sex_total' has no hierarchy key \(county, state"):
        run_release(spec, progress=QUIET)
    # Refused before the ledger is opened: nothing reserved, nothing written.
    assert not (tmp_path / "ledger.sqlite").exists()
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 10**9)
    consistency.check_postprocess_engine(spec)  # on the driver the global solve takes it


def test_dp_release_plan_refuses_what_run_refuses(tmp_path, monkeypatch, capsys):
    spec = _with_national_table(tmp_path)
    monkeypatch.setattr(consistency, "DRIVER_POSTPROCESS_CELLS", 100)
    with pytest.raises(SpecError) as refused:
        run_release(spec, progress=QUIET)
    assert main(["plan", str(tmp_path / "geo.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dp-release plan: ")
    assert str(refused.value) in err
    assert "table 'sex_total' has no hierarchy key" in err
    assert not (tmp_path / "ledger.sqlite").exists()
