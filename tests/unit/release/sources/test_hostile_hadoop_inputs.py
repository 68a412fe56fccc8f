"""Inputs on a Hadoop file system that are no data are refused before the reservation
(dp_pipeline.release.sources.hadoop_kinds), on Hadoop's own viewfs: a spec's mount onto
the local disk, where Hadoop's local file system reports a link to the key, a FIFO or a
file of /proc as a plain file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dp_pipeline.release.run import run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from tests.unit.release.sources.test_hostile_inputs import (
    KEY_HEX,
    QUIET,
    assert_no_key,
    nothing_reserved,
    write_key,
)
from tests.unit.release.sources.test_release_inputs import SPEC, write_inputs

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def key_from_its_file(monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)


def mounted_spec(tmp_path: Path, mount: str, target: Path | str, fmt: str) -> Path:
    """A Spark spec whose input is ``viewfs://<mount>/data``, mounted (by the spec's own
    allowlisted setting) onto ``target``. Hadoop caches a viewfs file system by its
    name: each test mounts its own."""
    write_key(tmp_path)
    location = f"viewfs://{mount}/data"
    text = SPEC.format(tmp=tmp_path, input=location, format=fmt, engine="spark")
    conf = f'"spark.hadoop.fs.viewfs.mounttable.{mount}.link./data" = "file://{target}"'
    path = tmp_path / "mounted.toml"
    path.write_text(text + f"\n[run.spark_conf]\n{conf}\n")
    return path


def refusal(spark, spec_path: Path) -> str:
    with pytest.raises(SpecError) as caught:
        run_release(load_spec(spec_path), QUIET, spark=spark)
    return str(caught.value)


def test_a_link_to_the_key_behind_a_viewfs_mount_is_refused_before_the_reservation(spark, tmp_path):
    _, parquet = write_inputs(tmp_path)
    folder = tmp_path / "parts"
    folder.mkdir()
    parquet.rename(folder / "part-0.parquet")
    (folder / "part-1.parquet").symlink_to(tmp_path / "master.key")
    message = refusal(spark, mounted_spec(tmp_path, "dphostilelink", folder, "parquet"))
    assert "its file 'viewfs://dphostilelink/data/part-1.parquet': its file system maps it " in (
        message
    )
    assert "onto the local disk, where it is the master key file of this run" in message
    assert_no_key(message)
    assert nothing_reserved(tmp_path)


def test_a_fifo_behind_a_viewfs_mount_is_refused_before_the_reservation(spark, tmp_path):
    csv, _ = write_inputs(tmp_path)
    folder = tmp_path / "parts"
    folder.mkdir()
    csv.rename(folder / "part-0.csv")
    os.mkfifo(folder / "part-1.csv")  # a read would block until someone writes to it
    message = refusal(spark, mounted_spec(tmp_path, "dphostilefifo", folder, "csv"))
    assert "its file 'viewfs://dphostilefifo/data/part-1.csv'" in message
    assert "where it is a FIFO (named pipe), not a regular file" in message
    assert nothing_reserved(tmp_path)


def test_a_viewfs_mount_onto_proc_is_refused_before_the_reservation(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("DP_HOSTILE_SECRET", KEY_HEX)
    message = refusal(spark, mounted_spec(tmp_path, "dphostileproc", "/proc/self/environ", "csv"))
    assert "its file system maps it onto the local disk, where it is under /proc" in message
    assert_no_key(message)
    assert nothing_reserved(tmp_path)
