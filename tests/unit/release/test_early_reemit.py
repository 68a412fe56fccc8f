"""The driver's listing of a local Spark input, used to decide a committed retry before the
JVM starts: the files Spark lists, named as the fingerprint names them, or no answer."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from dp_pipeline.release.early_reemit import spark_local_files
from dp_pipeline.release.sources.fingerprint import file_name

FRAME = pd.DataFrame({"person_id": [1, 2, 3], "age": [30, 40, 50]})


def _folder(tmp_path):
    """A folder as Spark writes one, with the names Spark's file index skips."""
    root = tmp_path / "people"
    frame = FRAME
    for name in ("part-0.parquet", "_x=1.parquet"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(root / name)
    for name in ("_SUCCESS", ".part-0.parquet.crc", "part-2.parquet._COPYING_"):
        (root / name).write_bytes(b"")
    (root / "_temporary" / "0").mkdir(parents=True)
    (root / "_temporary" / "0" / "part-9.parquet").write_bytes(b"x")
    return root


def _partitioned(tmp_path):
    """A partitioned folder (``name=value`` subfolders), with a hidden file in one."""
    root = tmp_path / "parted"
    for name in ("year=2020/sex=M/part-0.parquet", "year=2021/sex=F/part-0.parquet"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        FRAME.to_parquet(root / name)
    (root / "year=2020" / "sex=M" / "_SUCCESS").write_bytes(b"")
    return root


def _names(files, root) -> list[str]:
    return sorted(file_name(str(file), str(root)) for file in files)


def test_a_folder_is_listed_as_spark_lists_it_and_a_file_as_itself(tmp_path):
    root = _folder(tmp_path)
    assert _names(spark_local_files(str(root)), root) == ["_x=1.parquet", "part-0.parquet"]
    parted = _partitioned(tmp_path)
    assert _names(spark_local_files(str(parted)), parted) == [
        "year=2020/sex=M/part-0.parquet",
        "year=2021/sex=F/part-0.parquet",
    ]
    file = root / "part-0.parquet"
    assert spark_local_files(str(file)) == (file,)
    assert spark_local_files(f"file://{file}") == (file,)


def test_no_answer_for_what_only_spark_can_list(tmp_path):
    assert spark_local_files(str(tmp_path / "missing")) is None
    assert spark_local_files("hdfs://namenode/people") is None
    (tmp_path / "empty" / "_SUCCESS").parent.mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_bytes(b"")
    assert spark_local_files(str(tmp_path / "empty")) is None  # no data file
    loop = _partitioned(tmp_path / "loop")
    os.symlink(loop, loop / "year=2022")
    assert spark_local_files(str(loop)) is None  # a link back up the tree
    nested = _folder(tmp_path / "nested")
    (nested / "sub").mkdir()
    assert spark_local_files(str(nested)) is None  # no partition: Spark's to answer
    beside = _partitioned(tmp_path / "beside")
    FRAME.to_parquet(beside / "part-9.parquet")
    assert spark_local_files(str(beside)) is None  # files beside partitions


@pytest.mark.spark
def test_the_drivers_listing_is_sparks_own(spark, tmp_path):
    from dp_pipeline.release.sources.spark_listing import listed_files

    root, parted = _folder(tmp_path), _partitioned(tmp_path)
    for location in (str(root), str(parted), str(root / "part-0.parquet")):
        listed = listed_files(spark, location, "parquet", None)
        names = sorted(file_name(uri, location) for uri in listed)
        assert names == _names(spark_local_files(location), location)
