"""dp_pipeline's sub-packages import one another without a cycle: the graph whose nodes are the
sub-packages and top-level modules of dp_pipeline, with an edge for every import between two
of them (imports inside functions included; ``if TYPE_CHECKING:`` blocks excluded), is
acyclic, so docs/architecture.md's layers are a true order."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "dp_pipeline"


def _unit(module: str) -> str | None:
    """The sub-package or top-level module of dp_pipeline that ``module`` belongs to."""
    parts = module.split(".")
    if parts[0] != "dp_pipeline":
        return None
    return ".".join(parts[:2])


def _checked_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (no import at run time)."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            hidden |= {id(inner) for inner in ast.walk(node)}
    return hidden


def package_graph() -> dict[str, set[str]]:
    """Each unit's set of other units it imports."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        source = _unit(module.removesuffix(".__init__"))
        if source is None or source == "dp_pipeline":
            continue  # the root package re-exports every layer: it sits on top
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hidden = _checked_only(tree)
        targets = graph.setdefault(source, set())
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
                if node.module == "dp_pipeline":
                    names = [f"dp_pipeline.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = _unit(name)
                if target not in (None, source, "dp_pipeline"):
                    targets.add(target)
    return graph


def test_no_cycle_between_the_sub_packages():
    try:
        order = list(TopologicalSorter(package_graph()).static_order())
    except CycleError as error:
        raise AssertionError(f"an import cycle between sub-packages: {error.args[1]}") from None
    assert "dp_pipeline.query" in order and "dp_pipeline.surface" in order


def test_the_verb_table_sits_above_the_statistics_and_the_selections():
    graph = package_graph()
    assert {"dp_pipeline.query", "dp_pipeline.selection"} <= graph["dp_pipeline.surface"]
    assert "dp_pipeline.surface" not in graph["dp_pipeline.query"]
    assert "dp_pipeline.surface" not in graph["dp_pipeline.selection"]


def test_a_cycle_is_found():
    """The check itself: an edge back from query to selection closes a cycle."""
    graph = package_graph()
    graph["dp_pipeline.query"].add("dp_pipeline.selection")
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError:
        return
    raise AssertionError("a cycle query -> selection -> query was not found")
