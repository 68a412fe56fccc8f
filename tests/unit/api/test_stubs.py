"""The ``.pyi`` stubs type checkers read equal the runtime signatures of every verb.

``df.dp``, `dp_pipeline.spark`, `Session` and ``Session.cost`` are generated at import
time from the verb table; checkers read the committed stubs instead. Two checks: each
stub is what ``python -m dp_pipeline.surface.stubs`` writes now, and, read back as source,
each verb in it has the runtime's parameters (names, kinds, which are required and their
annotations), so a stub edited by hand or a verb changed without rewriting the stubs fails.
"""

from __future__ import annotations

import ast
import inspect

import pandas as pd
import pytest

import dp_pipeline.session.session as session_module
from dp_pipeline.query.signatures import Required
from dp_pipeline.surface import stubs
from dp_pipeline.surface.verbs import VERBS

CORE = ("dp_pipeline.accessor", "dp_pipeline.session.session")


def stub_functions(module_name: str) -> dict[str, ast.FunctionDef]:
    """``name`` / ``Class.name`` -> its definition in the committed stub."""
    tree = ast.parse(stubs.stub_path(module_name).read_text(encoding="utf-8"))
    found: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef):
                    found[f"{node.name}.{member.name}"] = member
    return found


def shape_of_stub(function: ast.FunctionDef) -> list[tuple[str, str, bool, str]]:
    """(name, kind, required, annotation) of each parameter of a stub's function."""
    arguments = function.args
    shape = []
    positional = arguments.args
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    for argument, default in zip(positional, defaults, strict=True):
        shape.append((argument.arg, "positional", default is None, _annotation(argument)))
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        shape.append((argument.arg, "keyword", default is None, _annotation(argument)))
    return shape


def _annotation(argument: ast.arg) -> str:
    return "" if argument.annotation is None else ast.unparse(argument.annotation)


def shape_of_runtime(function: object, module_name: str) -> list[tuple[str, str, bool, str]]:
    """The same for a runtime function, its annotations written as the stub writes them."""
    imports = stubs.Imports(module_name)  # the stub's own renderer
    shape = []
    for parameter in inspect.signature(function, eval_str=True).parameters.values():
        kind = "keyword" if parameter.kind is parameter.KEYWORD_ONLY else "positional"
        required = parameter.default is parameter.empty or isinstance(parameter.default, Required)
        annotation = (
            ""
            if parameter.annotation is parameter.empty
            else stubs.render(parameter.annotation, imports)
        )
        shape.append((parameter.name, kind, required, annotation))
    return shape


def runtime_verbs(module_name: str) -> dict[str, object]:
    """Every verb ``module_name`` gives users, by its name in the stub."""
    if module_name == "dp_pipeline.accessor":
        return {f"DPAccessor.{name}": getattr(pd.DataFrame.dp, name) for name in VERBS}
    if module_name == "dp_pipeline.session.session":
        return {
            **{f"Session.{name}": getattr(session_module.Session, name) for name in VERBS},
            **{f"QueryCosts.{name}": getattr(session_module.QueryCosts, name) for name in VERBS},
            "Session.__init__": session_module.Session.__init__,
        }
    import dp_pipeline.spark as spark

    return {f"dp_{name}": getattr(spark, f"dp_{name}") for name in VERBS}


def drift(module_name: str) -> list[str]:
    """The verbs whose stub differs from the runtime, each with both shapes."""
    written = stub_functions(module_name)
    found = []
    for name, function in runtime_verbs(module_name).items():
        runtime = shape_of_runtime(function, module_name)
        stub = shape_of_stub(written[name]) if name in written else None
        if stub != runtime:
            found.append(f"{name}: stub {stub} != runtime {runtime}")
    return found


def _modules() -> list[object]:
    return [*CORE, pytest.param("dp_pipeline.spark", marks=pytest.mark.spark)]


@pytest.mark.parametrize("module_name", _modules())
def test_each_stub_is_what_the_generator_writes_now(module_name):
    if module_name == "dp_pipeline.spark":
        pytest.importorskip("pyspark")
    assert stubs.stub_path(module_name).read_text(encoding="utf-8") == stubs.stub_text(
        module_name
    ), f"rewrite the stubs: python -m dp_pipeline.surface.stubs ({module_name})"


@pytest.mark.parametrize("module_name", _modules())
def test_every_verb_in_a_stub_has_the_runtime_parameters(module_name):
    if module_name == "dp_pipeline.spark":
        pytest.importorskip("pyspark")
    assert drift(module_name) == []


def test_a_verb_that_drifts_from_its_stub_is_found(monkeypatch):
    count = pd.DataFrame.dp.count
    signature = inspect.signature(count)
    fewer = [p for p in signature.parameters.values() if p.name != "max_cells"]
    monkeypatch.setattr(count, "__signature__", signature.replace(parameters=fewer))
    (found,) = drift("dp_pipeline.accessor")
    assert found.startswith("DPAccessor.count: stub [")
    assert stubs.stub_path("dp_pipeline.accessor").read_text(encoding="utf-8") != stubs.stub_text(
        "dp_pipeline.accessor"
    )


def test_the_check_command_names_a_stale_stub(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "accessor.pyi"
    stale.write_text("# an old stub\n", encoding="utf-8")
    monkeypatch.setattr(stubs, "STUBS", {"dp_pipeline.accessor": ()})
    monkeypatch.setattr(stubs, "stub_path", lambda module_name: stale)
    assert stubs.main(["--check"]) == 1
    assert capsys.readouterr().err == (
        f"{stale}: differs from the runtime signatures; rewrite it with "
        f"python -m dp_pipeline.surface.stubs\n"
    )
    assert stubs.main([]) == 0 and stubs.main(["--check"]) == 0
