"""The driver JVM's opt-in class-data-sharing archive: off unless switched on; then where
it lives, when it is written, used or left alone, and real driver JVMs that write it
and start from it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from driver_process import run_driver

pytest.importorskip("pyspark")

from dp_pipeline.platform.class_archive import (
    KEPT,
    OPTION,
    SWITCH,
    WRITING_SECONDS,
    driver_java_options,
)
from dp_pipeline.platform.java import ensure_java

HEADER = (0xF00BABA8).to_bytes(4, "little")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "spark-conf"))
    monkeypatch.setenv(SWITCH, "1")
    return tmp_path / "cache" / "dp_pipeline"


@pytest.mark.parametrize("value", [None, "", "0", "off", "no", "2"])
def test_the_archive_is_off_unless_switched_on(cache, monkeypatch, value):
    if value is None:
        monkeypatch.delenv(SWITCH)
    else:
        monkeypatch.setenv(SWITCH, value)
    assert driver_java_options({}, ensure_java()) is None
    assert not cache.exists() or not list(cache.iterdir())  # nothing written to the cache


def _archive(options: str) -> Path:
    return Path(options.split("=", 1)[1].split()[0])


def test_the_first_jvm_writes_the_archive_later_ones_start_from_it(cache):
    java = ensure_java()
    options = driver_java_options({}, java)
    assert options.startswith("-XX:ArchiveClassesAtExit=") and "-Xlog:cds*=off" in options
    archive = _archive(options)
    assert archive.parent == cache
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    archive.write_bytes(HEADER + bytes(60))
    assert (
        driver_java_options({}, java)
        == f"-XX:SharedArchiveFile={archive} -XX:+VerifySharedSpaces -Xlog:cds*=off"
    )
    # The caller's options are kept, the archive's after them.
    kept = driver_java_options({OPTION: "-Dx=1"}, java)
    assert kept == f"-Dx=1 -XX:SharedArchiveFile={archive} -XX:+VerifySharedSpaces -Xlog:cds*=off"


def test_an_archive_being_written_is_left_alone_and_a_killed_writers_file_replaced(cache):
    java = ensure_java()
    archive = _archive(driver_java_options({}, java))
    archive.write_bytes(bytes(64))  # the header comes last: still being written
    assert driver_java_options({}, java) is None
    assert archive.exists()
    old = time.time() - WRITING_SECONDS - 5
    os.utime(archive, (old, old))
    assert driver_java_options({}, java).startswith("-XX:ArchiveClassesAtExit=")
    assert not archive.exists()


def test_a_new_archive_replaces_the_oldest_beyond_the_kept_few(cache):
    java = ensure_java()
    cache.mkdir(parents=True, mode=0o700)
    others = [cache / f"spark-driver-{index:016x}.jsa" for index in range(KEPT + 2)]
    for age, path in enumerate(others):
        path.write_bytes(HEADER)
        os.utime(path, (1000.0 - age, 1000.0 - age))  # others[0] the newest
    unrelated = cache / "notes.txt"
    unrelated.write_text("kept")
    archive = _archive(driver_java_options({}, java))
    assert sorted(cache.glob("spark-driver-*.jsa")) == sorted(others[: KEPT - 1])
    assert unrelated.exists() and not archive.exists()
    archive.write_bytes(HEADER)
    driver_java_options({}, java)  # a ready archive: nothing is removed
    assert len(list(cache.glob("spark-driver-*.jsa"))) == KEPT


def test_another_class_path_is_another_archive(cache):
    java = ensure_java()
    plain = _archive(driver_java_options({}, java))
    with_jars = _archive(driver_java_options({"spark.jars": "/opt/extra.jar"}, java))
    assert plain.parent == with_jars.parent and plain != with_jars


@pytest.mark.parametrize(
    "case",
    ["the caller's class sharing", "a defaults file", "a shared folder", "link"],
)
def test_the_archive_is_not_used(cache, tmp_path, monkeypatch, case):
    java = ensure_java()
    settings: dict[str, str] = {}
    if case == "the caller's class sharing":
        settings = {OPTION: "-Xshare:off"}
    elif case == "a defaults file":
        folder = tmp_path / "spark-conf"
        folder.mkdir()
        (folder / "spark-defaults.conf").write_text(f"{OPTION}  -Dsite=1\n")
    elif case == "a shared folder":
        cache.mkdir(parents=True)
        cache.chmod(0o777)
    else:
        archive = _archive(driver_java_options({}, java))
        target = tmp_path / "elsewhere.jsa"
        target.write_bytes(HEADER + bytes(60))
        archive.symlink_to(target)
    assert driver_java_options(settings, java) is None
    if case == "a defaults file":  # the caller's own options replace the file's anyway
        assert driver_java_options({OPTION: "-Dx=1"}, java) is not None


_DRIVER = """
from dp_pipeline.spark import local_session
spark = local_session(1, driver_memory="1g")
jvm = spark.sparkContext._jvm
arguments = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
print([a for a in arguments if "Archive" in a], spark.range(1000).count())
"""


def _driver(environment) -> str:
    return run_driver(_DRIVER, environment)


@pytest.mark.spark
def test_real_driver_jvms_switched_on_write_the_archive_then_start_from_it(tmp_path):
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), SWITCH: "1"}
    first = _driver(environment)
    assert "-XX:ArchiveClassesAtExit=" in first and first.endswith(" 1000")
    archive = Path(first.split("=", 1)[1].split("'")[0])
    deadline = time.monotonic() + 240  # written by the JVM as it exits, after the driver
    while time.monotonic() < deadline:
        if archive.exists() and archive.read_bytes()[:4] == HEADER:
            break
        time.sleep(1)
    assert archive.read_bytes()[:4] == HEADER
    assert archive.stat().st_size > 10_000_000
    second = _driver(environment)
    assert f"-XX:SharedArchiveFile={archive}" in second and second.endswith(" 1000")
