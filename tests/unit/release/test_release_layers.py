"""`dp_pipeline.release` imports in one direction: its sub-packages and top-level modules are
layers, each importing only its own layer or those below, and `release` is in no import
cycle with another package of dp_pipeline (the session layer, the root package)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "dp_pipeline"
RELEASE = PACKAGE / "release"

# Lowest first. A unit is a sub-package of release/ or one of its top-level modules.
LAYERS: list[set[str]] = [
    # leaves: no other part of release/
    {
        "protocol",
        "progress",
        "locations",
        "input_kinds",
        "uris",
        "ledger_location",
        "publication_rules",
        "private_folders",
        "process_exit",
        "key_records",
    },
    {"spec", "release_ids", "home_registry", "keys"},
    {"ledger", "ledger_sites", "key_binding", "key_command", "run_lease", "ledger_report"},
    {"plan"},
    {"sources"},
    {"tables"},
    {"report"},
    {"publish", "read", "reemit", "early_reemit", "run_steps"},
    {"outcome", "plan_verdict"},
    {"run"},
    {"cli", "__main__", "ledger_command"},
]
RANK = {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}


def _units() -> set[str]:
    found = {p.name for p in RELEASE.iterdir() if (p / "__init__.py").is_file()}
    found |= {p.stem for p in RELEASE.glob("*.py") if p.stem != "__init__"}
    return found


def _imported(tree: ast.AST, package: str, names_of: set[str]) -> list[str]:
    """The first segment under ``package`` of every absolute import in ``tree``
    (``from package import x`` counts as importing ``x`` when ``x`` is one of ``names_of``,
    else as importing ``package`` itself, the empty string)."""
    prefix = package + "."
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == package:
                found += [a.name if a.name in names_of else "" for a in node.names]
                continue
            modules = [node.module]
        else:
            continue
        found += [m.removeprefix(prefix).split(".")[0] for m in modules if m.startswith(prefix)]
        found += ["" for m in modules if m == package]
    return found


def release_edges() -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> the files of release/ with that import."""
    units = _units()
    edges: dict[tuple[str, str], list[str]] = {}
    for path in RELEASE.rglob("*.py"):
        relative = path.relative_to(RELEASE)
        if relative.as_posix() == "__init__.py":
            continue  # the package's face re-exports from its parts
        source = relative.parts[0].removesuffix(".py")
        for target in _imported(ast.parse(path.read_text()), "dp_pipeline.release", units):
            if target and target != source:
                edges.setdefault((source, target), []).append(relative.as_posix())
    return edges


def package_edges() -> dict[str, set[str]]:
    """dp_pipeline's top-level packages and modules ("" for the root package's
    ``__init__``) -> those they import."""
    names = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    names |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        source = "" if parts == ("__init__.py",) else parts[0].removesuffix(".py")
        for target in _imported(ast.parse(path.read_text()), "dp_pipeline", names):
            if target != source:
                edges.setdefault(source, set()).add(target)
    return edges


def _reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_every_part_of_release_has_a_layer():
    assert sorted(_units() - set(RANK)) == [], "place each new part of release/ in LAYERS"


def test_no_part_of_release_imports_a_higher_layer():
    upward = [
        f"{source} -> {target} ({', '.join(files)})"
        for (source, target), files in sorted(release_edges().items())
        if RANK[target] > RANK[source]
    ]
    assert upward == []


def test_the_parts_of_one_layer_import_each_other_without_a_cycle():
    graph: dict[str, set[str]] = {}
    for source, target in release_edges():
        graph.setdefault(source, set()).add(target)
    assert sorted(unit for unit in graph if unit in _reachable(graph, unit)) == []


def test_release_is_in_no_package_cycle():
    edges = package_edges()
    assert "release" in _reachable(edges, "session")  # the session layer uses the ledger
    back = sorted(
        name for name in _reachable(edges, "release") if "release" in _reachable(edges, name)
    )
    assert back == [], "release reaches a package that imports release again"
    assert "session" not in _reachable(edges, "release")
