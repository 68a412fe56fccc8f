"""Where a release's rows come from: local files, any Hadoop file system URI, a catalog
table; their fingerprint computed where the bytes are; bad sources refused before the
reservation; Spark settings from the spec and the command line, secrets never shown."""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dp_pipeline import MasterKey
from dp_pipeline.release import cli
from dp_pipeline.release.ledger.identity import release_identity
from dp_pipeline.release.run import Progress, apply_overrides, run_release
from dp_pipeline.release.sources import fingerprint
from dp_pipeline.release.sources.fingerprint import (
    chunk_ranges,
    content_digest,
    digests_fingerprint,
    file_name,
    local_digests,
)
from dp_pipeline.release.sources.source import shown_location
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from dp_pipeline.release.spec.spark_conf import SparkConf, identity_settings
from tests.unit.release.sources.test_release_inputs import SPEC, write_inputs

KEY = MasterKey.from_hex("5a" * 32)
SECRET = "TOPSECRET-value-42"


def spec_text(tmp_path: Path, input_line: str, engine: str = "spark", run_extra: str = "") -> str:
    text = SPEC.format(tmp=tmp_path, input="@", format="parquet", engine=engine)
    text = text.replace('path = "@"\nformat = "parquet"', input_line)
    return text.replace('key_file = "', run_extra + 'key_file = "', 1) if run_extra else text


def write_spec(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def quiet_lines() -> tuple[Progress, list[str]]:
    lines: list[str] = []

    class Lines(Progress):
        def __call__(self, message: str) -> None:
            lines.append(message)

    return Lines(), lines


# ----------------------------------------------------------------- the content digest


def test_a_files_ranges_combine_to_one_digest_whatever_thread_hashes_them(tmp_path, monkeypatch):
    monkeypatch.setattr(fingerprint, "CHUNK_BYTES", 1000)
    data = tmp_path / "blob.bin"
    data.write_bytes(bytes(range(256)) * 10)  # 2,560 bytes: three ranges
    assert chunk_ranges(2560) == [(0, 1000), (1000, 1000), (2000, 560)]
    one = local_digests([data], ["blob.bin"], threads=1)
    four = local_digests([data], ["blob.bin"], threads=4)
    assert one == four and one[0].size == 2560
    changed = bytearray(data.read_bytes())
    changed[1500] ^= 1  # one bit in the middle range
    data.write_bytes(bytes(changed))
    assert local_digests([data], ["blob.bin"])[0].sha256 != one[0].sha256
    assert digests_fingerprint(KEY, one) != digests_fingerprint(KEY, local_digests([data], ["b"]))


def test_an_empty_file_has_one_empty_range_and_a_digest():
    assert chunk_ranges(0) == [(0, 0)]
    import hashlib

    assert len(content_digest(0, [hashlib.sha256(b"").digest()])) == 64


def test_names_are_relative_to_the_root_on_every_file_system(tmp_path):
    assert file_name(f"file:{tmp_path}/a=1/p.parquet", str(tmp_path)) == "a=1/p.parquet"
    assert file_name("viewfs://c1/data/a=1/p.parquet", "viewfs://c1/data/") == "a=1/p.parquet"
    assert file_name("viewfs://c1/data/p.parquet", "viewfs://c1/data/p.parquet") == "p.parquet"
    # Outside the root (or on another authority): the whole URI, never less.
    assert file_name("viewfs://c2/data/p.parquet", "viewfs://c1/data") == (
        "viewfs://c2/data/p.parquet"
    )
    assert shown_location("s3a://AKIA:hunter2@bucket/x") == "s3a://<credentials>@bucket/x"


def test_a_uri_query_or_fragment_is_never_shown():
    # pyarrow's file systems take keys in the query, and a shared-access signature
    # is one; a query can hold nothing else worth the risk.
    shown = shown_location("s3://bucket/p.parquet?access_key=AKIA&secret_key=hunter2")
    assert shown == "s3://bucket/p.parquet?<query>"
    assert shown_location("https://acct.blob.example/c/x.csv?sv=1&sig=hunter2") == (
        "https://acct.blob.example/c/x.csv?<query>"
    )
    assert shown_location("gs://bucket/x.csv#hunter2") == "gs://bucket/x.csv"
    assert shown_location("viewfs://c1/data/x.parquet") == "viewfs://c1/data/x.parquet"
    # A local path is shown as written, whatever characters its name has.
    assert shown_location("/data/a?b#c.csv") == "/data/a?b#c.csv"


# ----------------------------------------------------------------- the spec's fields


def test_input_table_and_spark_conf_are_read_and_checked(tmp_path):
    text = spec_text(tmp_path, 'table = "census.persons"')
    text += "\n[run.spark_conf]\nspark.sql.ansi.enabled = true\n"
    text += '"spark.hadoop.fs.s3a.endpoint" = "y"\n'
    spec = load_spec(write_spec(tmp_path, text))
    assert spec.input_table == "census.persons" and spec.input_path == ""
    assert spec.spark_conf.as_dict() == {
        "spark.hadoop.fs.s3a.endpoint": "y",
        "spark.sql.ansi.enabled": "true",
    }


@pytest.mark.parametrize(
    ("input_line", "engine", "conf", "expected"),
    [
        ('path = "x.parquet"\ntable = "db.t"', "spark", "", "give input.path or input.table"),
        ('table = "db.t"', "pandas", "", 'set engine = "spark"'),
        ('table = "db.t; drop"', "spark", "", "input.table = 'db.t; drop': must be a table"),
        ('table = "db.t"\nformat = "csv"', "spark", "", "a catalog table has its own format"),
        ('path = "x.parquet"', "spark", '"spark.master" = "yarn"', "run.master (or --master)"),
        ('path = "x.parquet"', "spark", '"spark.x" = 1.5', "must be a string, an integer"),
    ],
)
def test_bad_input_and_conf_fields_name_the_field_and_fix(
    tmp_path, input_line, engine, conf, expected
):
    text = spec_text(tmp_path, input_line, engine)
    if conf:
        text += f"\n[run.spark_conf]\n{conf}\n"
    with pytest.raises(SpecError) as caught:
        load_spec(write_spec(tmp_path, text))
    assert expected in str(caught.value)


def test_a_secret_settings_value_is_never_shown(tmp_path):
    text = spec_text(tmp_path, 'path = "x.parquet"')
    text += f'\n[run.spark_conf]\n"spark.hadoop.fs.s3a.secret.key" = "{SECRET}"\n'
    spec = load_spec(write_spec(tmp_path, text))
    assert SECRET not in repr(spec) and SECRET not in spec.spark_conf.described()
    # A secret's key with a bad value: the problem names the key, not the value.
    bad = text.replace(f'"{SECRET}"', f'["{SECRET}"]')
    with pytest.raises(SpecError) as caught:
        load_spec(write_spec(tmp_path, bad, "bad.toml"))
    assert "spark.hadoop.fs.s3a.secret.key" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_only_settings_that_change_numbers_enter_the_identity(tmp_path):
    spec = load_spec(write_spec(tmp_path, spec_text(tmp_path, 'path = "x.parquet"')))
    base = release_identity(spec, {}, "ab" * 32, "cd" * 32)
    settings = {
        "spark.sql.shuffle.partitions": "7",
        "spark.sql.adaptive.enabled": "false",
        "spark.hadoop.fs.viewfs.mounttable.c.link./d": "file:///x",
        "spark.executor.memory": "2g",
        "spark.sql.password.like": SECRET,
    }
    quiet = replace(spec, spark_conf=SparkConf(tuple(sorted(settings.items()))))
    assert release_identity(quiet, {}, "ab" * 32, "cd" * 32).digest == base.digest
    assert identity_settings(quiet.spark_conf) == {}
    ansi = replace(spec, spark_conf=SparkConf((("spark.sql.ansi.enabled", "false"),)))
    other = release_identity(ansi, {}, "ab" * 32, "cd" * 32)
    assert base.differences(other) == ["spark settings is new"]


def test_conf_arguments_merge_over_the_spec_and_bad_ones_are_named(tmp_path):
    text = spec_text(tmp_path, 'path = "x.parquet"')
    text += '\n[run.spark_conf]\n"spark.sql.session.timeZone" = "UTC"\n"spark.task.cpus" = "1"\n'
    spec = load_spec(write_spec(tmp_path, text))
    merged = apply_overrides(spec, spark_conf=["spark.task.cpus=2", "spark.b=x=y"])
    assert merged.spark_conf.as_dict() == {
        "spark.task.cpus": "2",
        "spark.b": "x=y",
        "spark.sql.session.timeZone": "UTC",
    }
    for bad, expected in (
        ("spark.master=yarn", "--conf 'spark.master': the master is set by run.master"),
        ("novalue", "--conf: takes KEY=VALUE"),
        ("bad key=1", "not a Spark setting's key"),
    ):
        with pytest.raises(SpecError) as caught:
            apply_overrides(spec, spark_conf=[bad])
        assert expected in str(caught.value)


def test_the_pandas_engine_reads_file_uris_and_names_the_fix_for_hdfs(tmp_path):
    _, parquet_path = write_inputs(tmp_path)
    spec = load_spec(write_spec(tmp_path, spec_text(tmp_path, 'path = "x"', engine="pandas")))
    by_uri = apply_overrides(spec, input_path=f"file://{parquet_path}", release_id="uri-1")
    result = run_release(by_uri, progress=Progress(quiet=True))
    by_path = apply_overrides(spec, input_path=str(parquet_path), release_id="path-1")
    again = run_release(by_path, progress=Progress(quiet=True))
    assert result.report["input_fingerprint"] == again.report["input_fingerprint"]
    hdfs = apply_overrides(spec, input_path="hdfs://user:pw123@namenode:8020/x", release_id="h-1")
    with pytest.raises(SpecError) as caught:
        run_release(hdfs, progress=Progress(quiet=True))
    # pyarrow opens hdfs:// only with libhdfs and a JVM: the fix names both ways.
    assert "read it with the spark engine" in str(caught.value), str(caught.value)
    assert "pw123" not in str(caught.value) and len(caught.value.problems) == 1


# ----------------------------------------------------------------- Spark sources


def _ledger_rows(path: Path) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(path) as connection:
        tables = [r[0] for r in connection.execute("select name from sqlite_master")]
        return sum(
            connection.execute(f"select count(*) from {t}").fetchone()[0]
            for t in tables
            if t == "releases"
        )


@pytest.mark.spark
def test_in_local_mode_the_driver_hashes_inputs_of_up_to_four_ranges(spark):
    # The executors of a local master are the driver's own cores: a job would only add
    # its round trip. A cluster master keeps one range (see `_driver_bytes`).
    from dp_pipeline.release.sources import spark_files

    assert spark.sparkContext.master.startswith("local")
    limit = spark_files._driver_bytes(spark)
    assert limit == spark_files.LOCAL_MODE_FACTOR * spark_files.DRIVER_BYTES == 256 * 2**20


@pytest.mark.spark
def test_executors_hash_local_ranges_to_the_drivers_digests(spark, tmp_path, monkeypatch):
    from dp_pipeline.release.sources import spark_files
    from dp_pipeline.release.sources.spark_files import executor_digests, file_sizes

    monkeypatch.setattr(fingerprint, "CHUNK_BYTES", 4096)  # ranges are planned on the driver
    monkeypatch.setattr(spark_files, "DRIVER_BYTES", 0)  # not the driver's path for small inputs
    files = []
    for index, size in enumerate((0, 100, 4096, 10_000)):
        path = tmp_path / f"part-{index}.bin"
        path.write_bytes(bytes((index * 7 + i) % 251 for i in range(size)))
        files.append(path)
    uris = tuple(f"file:{p}" for p in files)
    names = [p.name for p in files]
    on_executors = executor_digests(spark, uris, names, file_sizes(spark, uris, "t"), "t")
    assert on_executors == local_digests(files, names)


@pytest.mark.spark
@pytest.mark.parametrize("streamed", [True, False], ids=["driver-jvm", "binaryfile"])
def test_files_on_another_file_system_hash_in_the_jvm_to_the_drivers_digests(
    spark, tmp_path, monkeypatch, streamed
):
    from dp_pipeline.release.sources import spark_files
    from dp_pipeline.release.sources.spark_files import executor_digests, file_sizes

    monkeypatch.setattr(spark_files, "_streams_in_driver", lambda session: streamed)
    monkeypatch.setattr(fingerprint, "CHUNK_BYTES", 4096)  # several ranges, a partial last
    files = []
    # No empty file: binaryFile gives an empty file no row (it has no split).
    for index, size in enumerate((100, 4096, 10_000)):
        path = tmp_path / f"part-{index}.bin"
        path.write_bytes(bytes((index * 5 + i) % 253 for i in range(size)))
        files.append(path)
    cluster = f"dpfp{int(streamed)}"  # Hadoop caches a viewfs file system by its name
    key = f"fs.viewfs.mounttable.{cluster}.link./data"
    spark.conf.set(key, f"file://{tmp_path}")
    try:
        uris = tuple(f"viewfs://{cluster}/data/{p.name}" for p in files)
        names = [p.name for p in files]
        found = executor_digests(spark, uris, names, file_sizes(spark, uris, "t"), "t")
    finally:
        spark.conf.unset(key)
    assert found == local_digests(files, names)


@pytest.mark.spark
@pytest.mark.parametrize("streamed", [True, False], ids=["driver-jvm", "binaryfile"])
def test_files_on_another_file_system_are_sized_by_their_index_and_hashed_in_the_jvm(
    spark, tmp_path, monkeypatch, streamed
):
    # Sizes None: the sizes come from Spark's file index first (which refuses a file
    # the hashing heap cannot hold); an empty file (no row in binaryFile's scan) has the
    # empty digest.
    from dp_pipeline.release.sources import spark_files
    from dp_pipeline.release.sources.spark_files import executor_digests

    monkeypatch.setattr(spark_files, "_streams_in_driver", lambda session: streamed)
    monkeypatch.setattr(fingerprint, "CHUNK_BYTES", 4096)
    files = []
    for index, size in enumerate((0, 100, 4096, 10_000)):
        path = tmp_path / f"part-{index}.bin"
        path.write_bytes(bytes((index * 3 + i) % 249 for i in range(size)))
        files.append(path)
    cluster = f"dpsized{int(streamed)}"  # Hadoop caches a viewfs file system by its name
    key = f"fs.viewfs.mounttable.{cluster}.link./data"
    spark.conf.set(key, f"file://{tmp_path}")
    try:
        uris = tuple(f"viewfs://{cluster}/data/{p.name}" for p in files)
        names = [p.name for p in files]
        found = executor_digests(spark, uris, names, None, "t")
        assert found == local_digests(files, names)
        # One changed byte in the last range changes that file's digest, and only its.
        changed = bytearray(files[3].read_bytes())
        changed[9_000] ^= 1
        files[3].write_bytes(bytes(changed))
        again = executor_digests(spark, uris, names, None, "t")
    finally:
        spark.conf.unset(key)
    assert again[:3] == found[:3]
    assert again[3].size == found[3].size and again[3].sha256 != found[3].sha256


@pytest.mark.spark
def test_in_local_mode_the_driver_jvm_streams_files_off_the_local_disk_without_a_job(
    spark, tmp_path, monkeypatch
):
    # Local mode's executors are the driver JVM's threads: they stream each range through
    # the session's Hadoop file system (no Spark job, no whole file in the heap) to the
    # same digests; a file that shrank, grew or vanished since it was sized is refused.
    from dp_pipeline.release.sources import spark_files
    from dp_pipeline.release.sources.spark_files import executor_digests

    assert spark_files._streams_in_driver(spark)
    monkeypatch.setattr(fingerprint, "CHUNK_BYTES", 4096)
    files = []
    for index, size in enumerate((0, 4096, 8192, 10_000)):
        path = tmp_path / f"part-{index}.bin"
        path.write_bytes(bytes((index * 11 + i) % 241 for i in range(size)))
        files.append(path)
    key = "fs.viewfs.mounttable.dpstream.link./data"
    spark.conf.set(key, f"file://{tmp_path}")
    try:
        uris = tuple(f"viewfs://dpstream/data/{p.name}" for p in files)
        names = [p.name for p in files]
        sizes = {uri: p.stat().st_size for uri, p in zip(uris, files, strict=True)}
        last = _last_job(spark)
        found = executor_digests(spark, uris, names, sizes, "t")
        assert _jobs_after(spark, last) == []
        assert found == local_digests(files, names)
        for uri, size in ((uris[2], 8191), (uris[2], 8193), (uris[3], 20_000)):
            with pytest.raises(SpecError, match="could not be hashed"):
                executor_digests(spark, uris, names, {**sizes, uri: size}, "t")
        gone = (*uris, "viewfs://dpstream/data/gone.bin")
        with pytest.raises(SpecError, match="could not be hashed"):
            executor_digests(spark, gone, [*names, "gone.bin"], {**sizes, gone[-1]: 10}, "t")
    finally:
        spark.conf.unset(key)


def _jobs_after(spark, last: int) -> list[int]:
    """The ids of the Spark jobs started after job ``last`` (-1: all retained)."""
    return sorted(j for j in spark.sparkContext.statusTracker().getJobIdsForGroup(None) if j > last)


def _last_job(spark) -> int:
    return max(_jobs_after(spark, -1), default=-1)


@pytest.mark.spark
@pytest.mark.parametrize("streamed", [True, False], ids=["driver-jvm", "binaryfile"])
def test_the_listings_file_index_sizes_the_files_and_only_the_hashing_runs_a_job(
    spark, tmp_path, monkeypatch, streamed
):
    # The DataFrame that listed the files holds their sizes: no binaryFile metadata job
    # before the hashing one (none at all when the driver JVM streams the files), the
    # same sizes as that job's (an empty file: 0), and the digests still bind every byte.
    from dp_pipeline.release.sources import spark_files
    from dp_pipeline.release.sources.spark_files import executor_digests, file_sizes, index_sizes
    from dp_pipeline.release.sources.spark_listing import listed_frame

    monkeypatch.setattr(spark_files, "_streams_in_driver", lambda session: streamed)
    monkeypatch.setattr(fingerprint, "CHUNK_BYTES", 4096)
    data = tmp_path / "data"
    data.mkdir()
    files = []
    for index, size in enumerate((0, 100, 10_000)):
        path = data / f"part-{index}.bin"
        path.write_bytes(bytes((index * 7 + i) % 251 for i in range(size)))
        files.append(path)
    cluster = f"dpindex{int(streamed)}"  # Hadoop caches a viewfs file system by its name
    key = f"fs.viewfs.mounttable.{cluster}.link./data"
    spark.conf.set(key, f"file://{data}")
    try:
        uris, index = listed_frame(spark, f"viewfs://{cluster}/data", "parquet", None)
        assert uris == tuple(f"viewfs://{cluster}/data/{p.name}" for p in files)
        names = [p.name for p in files]
        last = _last_job(spark)
        sizes = index_sizes(spark, index, uris)
        assert _jobs_after(spark, last) == []
        assert (
            sizes
            == file_sizes(spark, uris, "t")
            == {uri: p.stat().st_size for uri, p in zip(uris, files, strict=True)}
        )
        # Not the files the index lists: the metadata job sizes them.
        assert index_sizes(spark, index, uris[1:]) is None
        last = _last_job(spark)
        found = executor_digests(spark, uris, names, None, "t", index)
        assert len(_jobs_after(spark, last)) == (0 if streamed else 1)
        assert found == local_digests(files, names)
        changed = bytearray(files[2].read_bytes())
        changed[9_000] ^= 1
        files[2].write_bytes(bytes(changed))
        again = executor_digests(spark, uris, names, None, "t", index)
    finally:
        spark.conf.unset(key)
    assert again[:2] == found[:2] and again[2].sha256 != found[2].sha256


@pytest.mark.spark
def test_a_file_named_like_hidden_that_the_index_lists_is_hashed_with_the_others(spark, tmp_path):
    # Spark's Parquet listing keeps '_x=1.parquet' (its tables read it); sized by that
    # listing's index, it is hashed by name like any other file, its bytes bound.
    from dp_pipeline.release.sources.spark_files import executor_digests
    from dp_pipeline.release.sources.spark_listing import listed_frame

    data = tmp_path / "data"
    data.mkdir()
    files = [data / "_x=1.parquet", data / "part-0.parquet"]
    for index, path in enumerate(files):
        path.write_bytes(bytes((index + i) % 247 for i in range(300)))
    key = "fs.viewfs.mounttable.dpskip.link./data"
    spark.conf.set(key, f"file://{data}")
    try:
        uris, index = listed_frame(spark, "viewfs://dpskip/data", "parquet", None)
        names = [p.name for p in files]
        assert uris == tuple(f"viewfs://dpskip/data/{name}" for name in names)
        found = executor_digests(spark, uris, names, None, "t", index)
    finally:
        spark.conf.unset(key)
    assert found == local_digests(files, names)


@pytest.mark.spark
def test_a_parquet_input_off_the_local_disk_is_read_once_as_it_was_listed(spark, tmp_path):
    # One read lists the files and infers the schema; the tables read that DataFrame,
    # whose file index is the list fingerprinted (no second listing or schema job).
    from dp_pipeline.release.tables.on_spark import open_spark_input, spark_input_frames

    _, parquet_path = write_inputs(tmp_path)
    data = tmp_path / "mounted"
    data.mkdir()
    (data / "part-0.parquet").write_bytes(parquet_path.read_bytes())
    mount = f'"spark.hadoop.fs.viewfs.mounttable.dponce.link./data" = "file://{data}"'
    text = spec_text(tmp_path, 'path = "viewfs://dponce/data"\nformat = "parquet"')
    spec = load_spec(write_spec(tmp_path, text + f"\n[run.spark_conf]\n{mount}\n"))
    opened = open_spark_input(spec, spec.input_path, "parquet", Progress(quiet=True), spark)
    try:
        assert opened.uris == ("viewfs://dponce/data/part-0.parquet",)
        assert tuple(sorted(opened.frame.inputFiles())) == opened.uris
        assert spark_input_frames(spec, opened) == (opened.frame, None)
        assert opened.total_bytes == 0  # known with the digests
        last = _last_job(spark)
        digests = opened.digests()
        # Sized by the read's file index; in local mode the driver JVM hashes, no job.
        assert len(_jobs_after(spark, last)) == 0
        assert opened.total_bytes == digests[0].size == (data / "part-0.parquet").stat().st_size
    finally:
        opened.close()


@pytest.mark.spark  # PySpark's cloudpickle and spark_files (no session is started)
def test_the_executors_range_hasher_imports_nothing_of_the_package(tmp_path):
    import subprocess
    import sys

    import pyarrow as pa
    from pyspark import cloudpickle

    from dp_pipeline.release.sources.spark_files import _local_range_hasher

    data = tmp_path / "blob.bin"
    data.write_bytes(bytes(range(256)) * 40)
    tasks = [(str(data), 0, 5000), (str(data), 5000, 5240), (str(data), 0, 99_999)]
    hasher = cloudpickle.dumps(_local_range_hasher(tasks, 2))
    batch = pa.RecordBatch.from_arrays([pa.array([0, 1], pa.int64())], ["id"])
    code = (
        "import pickle, sys, pyarrow as pa\n"
        "hasher, batch = pickle.loads(sys.stdin.buffer.read())\n"
        "out = pa.Table.from_batches(list(hasher([batch])))\n"
        "print(sorted(out.column('id').to_pylist()), out.column('sha256').null_count,\n"
        "      any(name.startswith('dp_pipeline') for name in sys.modules))\n"
    )
    # A fresh interpreter, as a Spark Python worker unpickles the function.
    payload = cloudpickle.dumps((cloudpickle.loads(hasher), batch))
    env = {"PATH": "", "PYTHONPATH": ""}
    shown = subprocess.run(
        [sys.executable, "-c", code], input=payload, capture_output=True, check=True, env=env
    ).stdout.decode()
    # Three ranges hashed, the one past the file's end null, no dp_pipeline module loaded.
    assert shown.split() == ["[0,", "1,", "2]", "1", "False"]


@pytest.mark.spark
def test_a_viewfs_input_set_up_by_the_specs_settings_is_released_as_its_local_files(
    spark, tmp_path
):
    _, parquet_path = write_inputs(tmp_path)
    data = tmp_path / "mounted"
    data.mkdir()
    (data / "part-0.parquet").write_bytes(parquet_path.read_bytes())
    mount = f'"spark.hadoop.fs.viewfs.mounttable.dpcluster.link./data" = "file://{data}"'
    text = spec_text(tmp_path, 'path = "viewfs://dpcluster/data"\nformat = "parquet"')
    text += f"\n[run.spark_conf]\n{mount}\n"
    spec = load_spec(write_spec(tmp_path, text))
    progress, lines = quiet_lines()
    viewfs = run_release(spec, progress=progress, spark=spark)
    local = run_release(
        apply_overrides(spec, input_path=str(data), release_id="people-local"),
        progress=Progress(quiet=True),
        spark=spark,
    )
    # The same bytes under the same names: the same fingerprint on both file systems.
    assert viewfs.report["input_fingerprint"] == local.report["input_fingerprint"]
    assert any("fingerprinted the input's 1 file(s)" in line for line in lines)
    # The mount was set for the run only.
    assert spark.conf.get("fs.viewfs.mounttable.dpcluster.link./data", None) is None
    # A changed byte behind the mount: the committed id is refused, nothing published.
    frame = pq.read_table(data / "part-0.parquet")
    pq.write_table(frame.slice(1), data / "part-0.parquet")
    with pytest.raises(Exception, match="input data changed"):
        run_release(spec, progress=Progress(quiet=True), spark=spark)


@pytest.mark.spark
def test_a_catalog_table_is_released_and_bound_to_its_files(spark, tmp_path):
    _, parquet_path = write_inputs(tmp_path)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS dp_sources LOCATION '{tmp_path / 'warehouse'}'")
    frame = spark.read.parquet(str(parquet_path))
    frame.write.mode("overwrite").option("path", str(tmp_path / "people_t")).saveAsTable(
        "dp_sources.people"
    )
    try:
        spec = load_spec(write_spec(tmp_path, spec_text(tmp_path, 'table = "dp_sources.people"')))
        result = run_release(spec, progress=Progress(quiet=True), spark=spark)
        tables = json.loads((result.output / "privacy_report.json").read_text())
        assert tables["input_fingerprint"] == result.report["input_fingerprint"]
        # Overwritten with other rows: the same id is refused (other files, other bytes).
        frame.limit(50).write.mode("overwrite").option(
            "path", str(tmp_path / "people_t")
        ).saveAsTable("dp_sources.people")
        with pytest.raises(Exception, match="input data changed"):
            run_release(spec, progress=Progress(quiet=True), spark=spark)
    finally:
        spark.sql("DROP TABLE IF EXISTS dp_sources.people")
        spark.sql("DROP DATABASE IF EXISTS dp_sources CASCADE")


@pytest.mark.spark
@pytest.mark.parametrize(
    ("input_line", "expected"),
    [
        ('path = "file:///nonexistent-dp-input/x"', "no such file or folder"),
        ('path = "nosuchfs://host/x"', "no file system is configured for the scheme 'nosuchfs'"),
        ('path = "hdfs://dpuser:S3cr3tPw@127.0.0.1:1/x"', "cannot be reached"),
        ('table = "dp_nosuch_db.people"', "no such table in the session's catalog"),
    ],
)
def test_bad_sources_are_one_line_errors_before_the_reservation(
    spark, tmp_path, input_line, expected
):
    if input_line.startswith("path"):
        input_line += '\nformat = "parquet"'
    spec = load_spec(write_spec(tmp_path, spec_text(tmp_path, input_line)))
    with pytest.raises(SpecError) as caught:
        run_release(spec, progress=Progress(quiet=True), spark=spark)
    message = str(caught.value)
    assert expected in message, message
    assert len(caught.value.problems) == 1 and "\n" not in caught.value.problems[0]
    assert "S3cr3tPw" not in message and "Exception" not in message
    assert _ledger_rows(tmp_path / "ledger.sqlite") == 0
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_settings_on_a_running_session_are_undone_and_secrets_never_printed(
    spark, tmp_path, capsys
):
    _, parquet_path = write_inputs(tmp_path)
    text = spec_text(tmp_path, f'path = "{parquet_path}"\nformat = "parquet"')
    text += f'\n[run.spark_conf]\n"spark.hadoop.fs.s3a.secret.key" = "{SECRET}"\n'
    spec = load_spec(write_spec(tmp_path, text))
    progress, lines = quiet_lines()
    result = run_release(spec, progress=progress, spark=spark)
    assert spark.conf.get("fs.s3a.secret.key", None) is None
    written = "".join(p.read_text(errors="replace") for p in result.output.iterdir())
    assert SECRET not in written and SECRET not in "\n".join(lines)
    assert SECRET not in json.dumps(result.report)
    assert SECRET not in capsys.readouterr().err
    assert (
        cli
    )  # the command line takes --conf (tests/unit/release/sources/test_release_inputs.py runs it)


def test_the_command_line_refuses_a_bad_conf_before_anything_runs(tmp_path, capsys):
    spec = write_spec(tmp_path, spec_text(tmp_path, 'path = "x.parquet"'))
    status = cli.main(["run", str(spec), "--conf", "spark.master=yarn", "--quiet"])
    error = capsys.readouterr().err
    assert status == 2 and "--conf 'spark.master'" in error and "--master" in error
    assert not (tmp_path / "ledger.sqlite").exists()


@pytest.mark.parametrize(
    ("java_text", "expected"),
    [
        (
            f"java.nio.file.AccessDeniedException: s3a://bucket/x: getFileStatus: 403 "
            f"Forbidden (key {SECRET})",
            "access was refused (missing or failing credentials",
        ),
        (
            f"java.net.UnknownHostException: store.internal.example ({SECRET})",
            "cannot be reached",
        ),
        (f"java.lang.IllegalStateException: something else {SECRET}", "the JVM's log"),
    ],
)
def test_a_listing_failure_is_classified_and_its_text_never_shown(java_text, expected):
    pytest.importorskip("pyspark")
    from pyspark.errors import PySparkException

    from dp_pipeline.release.sources.spark_listing import listing_errors

    with pytest.raises(SpecError) as caught, listing_errors("input 's3a://bucket/x'", "s3a"):
        raise PySparkException(message=java_text)
    message = str(caught.value)
    assert expected in message and SECRET not in message and caught.value.__cause__ is None


@pytest.mark.spark
def test_a_csv_folder_on_viewfs_is_read_by_its_header_checked_before_the_reservation(
    spark, tmp_path, monkeypatch
):
    csv_path, _ = write_inputs(tmp_path)
    data = tmp_path / "csv_mounted"
    data.mkdir()
    (data / "part-0.csv").write_bytes(csv_path.read_bytes())
    mount = f'"spark.hadoop.fs.viewfs.mounttable.dpcsv.link./people" = "file://{data}"'
    text = spec_text(tmp_path, 'path = "viewfs://dpcsv/people"\nformat = "csv"')
    text += f"\n[run.spark_conf]\n{mount}\n"
    spec = load_spec(write_spec(tmp_path, text))
    published = run_release(spec, progress=Progress(quiet=True), spark=spark)
    assert (published.output / "manifest.json").exists()
    # A header without a column the spec uses: refused, nothing reserved.
    (data / "part-0.csv").write_text("pid,year,sex,note\n1,2001,F,x\n")
    other = apply_overrides(spec, release_id="people-2", ledger_path=str(tmp_path / "l2.sqlite"))
    # Another operator (a user of its own: the key binds per user) with the same key: a new
    # one beside the first home (with a release) is refused. The key file's first line is
    # the key; the lines after it record its ledger.
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "l2-home"))
    monkeypatch.setenv("HOME", str(tmp_path / "l2-home" / "user"))
    key_line = (tmp_path / "master.key").read_text().splitlines()[0]
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", key_line.strip())
    with pytest.raises(SpecError) as caught:
        run_release(other, progress=Progress(quiet=True), spark=spark)
    assert "its CSV header has 4 field(s) and lacks the declared column 'spend'" in str(
        caught.value
    )
    assert _ledger_rows(tmp_path / "l2.sqlite") == 0


@pytest.mark.spark
def test_every_file_of_a_csv_folder_on_viewfs_has_its_header_checked(spark, tmp_path, monkeypatch):
    """Only the first remote file's header was read: a later file was read by position."""
    csv_path, _ = write_inputs(tmp_path)
    header, *rows = csv_path.read_text().splitlines()
    data = tmp_path / "csv_parts"
    data.mkdir()
    (data / "part-0.csv").write_text("\n".join([header, *rows[:40]]) + "\n")
    (data / "part-1.csv").write_text("")  # an empty part: no header, nothing read
    mount = f'"spark.hadoop.fs.viewfs.mounttable.dpparts.link./people" = "file://{data}"'
    text = spec_text(tmp_path, 'path = "viewfs://dpparts/people"\nformat = "csv"')
    text += f"\n[run.spark_conf]\n{mount}\n"
    spec = load_spec(write_spec(tmp_path, text))
    # The same columns in another order, pid and spend swapped: never read by position.
    swapped = "spend,year,sex,pid,note"
    moved = [",".join([r.split(",")[3], *r.split(",")[1:3], r.split(",")[0], "x"]) for r in rows]
    cases = {
        "swapped": ("\n".join([swapped, *moved[40:]]), "header differs from the first file's"),
        "twice": ("pid,year,sex,spend,pid\n1,2001,F,3,1", "column(s) 'pid' more than once"),
        "missing": ("pid,year,sex,note\n1,2001,F,x", "lacks the declared column 'spend'"),
    }
    home = os.environ["DP_PIPELINE_HOME"]
    for index, (content, expected) in enumerate(cases.values()):
        (data / "part-2.csv").write_text(content + "\n")
        ledger = tmp_path / f"refused-{index}.sqlite"
        monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / f"home-{index}"))  # one per ledger
        other = apply_overrides(spec, release_id=f"people-{index}", ledger_path=str(ledger))
        with pytest.raises(SpecError) as caught:
            run_release(other, progress=Progress(quiet=True), spark=spark)
        message = str(caught.value)
        assert expected in message and "viewfs://dpparts/people/part-2.csv" in message
        assert "2001" not in message and "spend,year" not in message
        assert _ledger_rows(ledger) == 0
    # One header in every file, with a ragged row: read by name, published.
    monkeypatch.setenv("DP_PIPELINE_HOME", home)
    (data / "part-2.csv").write_text("\n".join([header, *rows[40:], "7,2001,F"]) + "\n")
    published = run_release(spec, progress=Progress(quiet=True), spark=spark)
    assert (published.output / "manifest.json").exists()


@pytest.mark.spark
def test_a_view_is_refused_before_the_reservation_not_fingerprinted_as_its_files(spark, tmp_path):
    """A view's files were its identity: another WHERE clause kept the same fingerprint."""
    _, parquet_path = write_inputs(tmp_path)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS dp_views LOCATION '{tmp_path / 'warehouse'}'")
    frame = spark.read.parquet(str(parquet_path))
    frame.write.option("path", str(tmp_path / "people_t")).saveAsTable("dp_views.people")
    spark.sql("CREATE VIEW dp_views.adults AS SELECT * FROM dp_views.people WHERE year > 2001")
    frame.where("year > 2002").createOrReplaceGlobalTempView("dp_recent")
    spark.createDataFrame(frame.limit(5).toPandas()).createOrReplaceGlobalTempView("dp_memory")
    try:
        for table, expected in (
            ("dp_views.adults", "it is of type VIEW, not a table stored in files"),
            ("global_temp.dp_recent", "it is a temporary view, not a table stored in files"),
            ("global_temp.dp_memory", "it is a temporary view, not a table stored in files"),
        ):
            text = spec_text(tmp_path, f'table = "{table}"')
            spec = load_spec(write_spec(tmp_path, text))
            with pytest.raises(SpecError) as caught:
                run_release(spec, progress=Progress(quiet=True), spark=spark)
            message = str(caught.value)
            assert expected in message and f"input.table {table!r}" in message
            assert "CREATE TABLE ... AS SELECT" in message
            assert _ledger_rows(tmp_path / "ledger.sqlite") == 0
    finally:
        spark.sql("DROP VIEW IF EXISTS dp_views.adults")
        spark.catalog.dropGlobalTempView("dp_recent")
        spark.catalog.dropGlobalTempView("dp_memory")
        spark.sql("DROP TABLE IF EXISTS dp_views.people")
        spark.sql("DROP DATABASE IF EXISTS dp_views CASCADE")
