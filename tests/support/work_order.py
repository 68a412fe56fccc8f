"""The order in which pytest-xdist hands out the tests (conftest's scheduler), slowest first.

Under ``-n``, a worker that draws a long test near the end of the run runs it alone
while the other cores idle. The modules below were measured as the costliest of the
CI tiers (process-tree CPU per test: each starts JVMs, servers or ``dp-release``
processes); their tests are handed out first, costliest module first, then every
other test that starts a process (``system``), then the rest, each in collection
order. The order changes when a test runs, never what it checks: a module missing
from the list only starts later.

A module whose tests share a module- or class-scoped fixture runs on one worker
(the fixture is built once), except the modules in ``SPLIT``: their tests are long
and many, so each worker takes its share and builds the fixture once for it (the
module's tests are handed out together, so a worker runs its share in one stretch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# Costliest first (measured: process-tree CPU seconds of the module's tests).
SLOWEST = (
    "tests/system/stores/test_release_publish_fs.py",  # 9 killed Spark CLIs (viewfs)
    "tests/system/test_ledger_server.py",  # 16 racing processes on two ledgers, killed runs
    "tests/system/stores/test_release_publish_s3.py",  # 10 killed CLIs, an S3 server each
    "tests/system/test_docs.py",  # every document's blocks, Spark ones in their own JVM
    "tests/system/test_spark_cluster.py",  # a standalone master, two workers, spark-submit
    "tests/system/crash/test_release_spark_failures.py",  # a Spark CLI whose JVM is killed
    "tests/system/test_spark_connect.py",  # a Spark Connect server
    "tests/system/test_spark_connect_lost.py",
    "tests/system/crash/test_release_run.py",
    "tests/system/attacks/test_attacks.py",
    "tests/system/jvm/test_class_archive.py",
    "tests/system/jvm/test_java_launcher.py",
    "tests/unit/accounting/test_accounting_edges.py",  # a thousand-table composition
)
# Modules sharing a fixture whose tests are worth spreading over the workers.
SPLIT = frozenset(
    {
        "tests/system/stores/test_release_publish_fs.py",
        "tests/system/stores/test_release_publish_s3.py",
    }
)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def work_unit(nodeid: str, shares_fixtures: Callable[[str], bool]) -> str:
    """The scheduling unit of a test: its module if the module shares a fixture (and is
    not in ``SPLIT``), else the test itself."""
    module = module_of(nodeid)
    return module if shares_fixtures(module) and module not in SPLIT else nodeid


def start_rank(nodeid: str, system: bool) -> int:
    """0, 1, ... for the modules of ``SLOWEST``; then the other ``system`` tests; then the rest."""
    module = module_of(nodeid)
    if module in SLOWEST:
        return SLOWEST.index(module)
    return len(SLOWEST) + (0 if system else 1)


def in_start_order(nodeids: Sequence[str], system: Sequence[bool]) -> list[int]:
    """The positions of ``nodeids`` in the order they should start (stable within a rank,
    so a module's tests stay together and in their own order)."""
    ranks = [start_rank(nodeid, flag) for nodeid, flag in zip(nodeids, system, strict=True)]
    return sorted(range(len(nodeids)), key=ranks.__getitem__)
