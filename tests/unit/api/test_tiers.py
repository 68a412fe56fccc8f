"""The test tiers: which tests conftest marks ``system`` and ``spark_extra``, and the
guards that keep a missed mark from hiding a test (tests/support/tiers.py, tests/conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import ftp_server
import postgres_cluster
import tiers
import work_order
from tiers import is_system, needs_spark_extra

# The top conftest.py of tests/, and the helpers wherever their folder is.
CONFTEST = next(p for p in Path(__file__).resolve().parents if p.name == "tests") / "conftest.py"
HELPERS = [Path(module.__file__) for module in (tiers, work_order, ftp_server, postgres_cluster)]

HELPER = """
import subprocess

def run_cli(*args):
    return subprocess.run(["true", *args], check=True)
"""

MODULE = """
import pytest
from helper import run_cli

@pytest.fixture
def server():
    yield run_cli("serve")

def wrapper():
    return run_cli()

def test_plain():
    assert 1 + 1 == 2

def test_direct():
    subprocess.run(["true"])

def test_through_a_helper_module():
    run_cli()

def test_through_a_module_function():
    wrapper()

def test_through_a_fixture(server):
    pass

def test_needs_pyspark():
    pytest.importorskip("pyspark")

class TestGroup:
    def test_method(self):
        wrapper()
"""


def _module(tmp_path: Path, source: str = MODULE, name: str = "test_sample.py") -> Path:
    (tmp_path / "helper.py").write_text(HELPER)
    path = tmp_path / name
    path.write_text(source)
    return path


def test_a_test_that_spawns_a_process_directly_or_through_a_helper_is_system(tmp_path):
    path = _module(tmp_path)

    def system(name, fixtures=(), marks=(), owner=None):
        return is_system(path, name, owner, set(marks), set(fixtures))

    assert not system("test_plain")
    assert system("test_direct")
    assert system("test_through_a_helper_module")
    assert system("test_through_a_module_function")
    assert system("test_through_a_fixture", fixtures={"server"})
    assert system("test_method", owner="TestGroup")
    # A JVM, a PostgreSQL cluster, an FTP server: the marks and conftest's fixtures.
    assert system("test_plain", marks={"spark"})
    assert system("test_plain", marks={"postgresql"})
    assert system("test_plain", fixtures={"ftp_store"})


def test_a_test_that_needs_pyspark_or_its_connect_client_needs_the_spark_extra(tmp_path):
    path = _module(tmp_path)
    assert needs_spark_extra(path, "test_needs_pyspark", None, set(), False)
    assert not needs_spark_extra(path, "test_plain", None, set(), False)
    assert needs_spark_extra(path, "test_plain", None, {"spark"}, False)
    assert needs_spark_extra(path, "test_plain", None, set(), True)  # a Spark-only module
    connect = 'import pytest\ngrpc = pytest.importorskip("grpc")\n' + MODULE
    whole = _module(tmp_path, connect, "test_connect.py")
    assert needs_spark_extra(whole, "test_plain", None, set(), False)


# A test whose spawning no source reading sees, and a test skipped for a missing PySpark
# without the mark: the guards must fail both, naming the mark to add.
HIDDEN = """
import importlib

import pytest

def test_hidden_spawn():
    importlib.import_module("sub" + "process").run(["true"], check=True)

def test_skipped_for_pyspark():
    pytest.skip("could not import 'pyspark': No module named 'pyspark'")
"""


def _run_pytest(tmp_path: Path, *args: str) -> str:
    folder = tmp_path / "tests"
    folder.mkdir()
    for helper in (CONFTEST, *HELPERS):
        shutil.copy(helper, folder / helper.name)
    (folder / "test_hidden.py").write_text(HIDDEN)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-rf", *args, "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.stdout + done.stderr


def test_the_fast_tier_fails_a_test_that_spawns_a_process_naming_the_mark(tmp_path):
    output = _run_pytest(tmp_path, "-m", "not system", "-k", "hidden_spawn")
    assert "starts a process but is not marked 'system'" in output
    assert "@pytest.mark.system" in output
    assert "1 failed" in output


def test_a_test_skipped_for_a_missing_pyspark_without_the_mark_fails(tmp_path):
    output = _run_pytest(tmp_path, "-k", "skipped_for_pyspark")
    assert "needs the spark extra but is not marked 'spark_extra'" in output
    assert "@pytest.mark.spark_extra" in output
    assert "1 failed" in output
