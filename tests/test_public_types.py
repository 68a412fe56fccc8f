"""The public surface is typed: every parameter annotated, none as `object` or `Any`.

mypy (run by CI over the modules of ``[tool.mypy]`` in pyproject.toml) checks the bodies;
it cannot refuse an ``object`` parameter, which accepts anything and checks nothing, so
this test does, on the signatures users call: ``df.dp.*``, ``dp_pipeline.spark``, the
accountant and the functions of ``dp_pipeline.accounting`` and ``dp_pipeline``.
"""

from __future__ import annotations

import inspect
import types
import typing
from pathlib import Path

import pandas as pd
import pytest

import dp_pipeline
import dp_pipeline.accounting as accounting

VERBS = ("count", "sum", "mean", "quantile", "median", "top_k")
# Still untyped in release/, whose modules are being moved: each gets its annotations there.
# A run's Spark session: PySpark is an optional dependency of the release job, so the
# annotation cannot name its type on an install without it.
RELEASE_UNTYPED = {"dp_pipeline.run_release(spark): no annotation"}


def untyped(annotation: object) -> str | None:
    """Why ``annotation`` does not type a parameter, or None when it does."""
    if annotation is inspect.Parameter.empty:
        return "no annotation"
    members = (
        typing.get_args(annotation)
        if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
        else (annotation,)
    )
    for member in members:
        if member is object or member is typing.Any:
            return f"annotated {member!r}"
    return None


def problems(name: str, function: typing.Callable) -> list[str]:
    found = []
    for parameter in inspect.signature(function, eval_str=True).parameters.values():
        if parameter.name in ("self", "cls") or parameter.kind in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
        ):
            continue
        reason = untyped(parameter.annotation)
        if reason is not None:
            found.append(f"{name}({parameter.name}): {reason}")
    return found


def module_functions(module: types.ModuleType) -> dict[str, typing.Callable]:
    return {
        f"{module.__name__}.{name}": getattr(module, name)
        for name in module.__all__
        if inspect.isfunction(getattr(module, name))
    }


def test_the_check_finds_untyped_and_object_parameters():
    def loose(a, b: object, c: int | typing.Any, d: int | None) -> None: ...

    assert problems("loose", loose) == [
        "loose(a): no annotation",
        "loose(b): annotated <class 'object'>",
        "loose(c): annotated typing.Any",
    ]


def test_df_dp_verbs_have_typed_parameters():
    found = [p for verb in VERBS for p in problems(f"df.dp.{verb}", getattr(pd.DataFrame.dp, verb))]
    assert found == []


def test_spark_functions_have_typed_parameters():
    pytest.importorskip("pyspark")
    from dp_pipeline import spark

    found = [p for verb in VERBS for p in problems(f"dp_{verb}", getattr(spark, f"dp_{verb}"))]
    assert found == []


def test_accounting_functions_and_the_accountant_have_typed_parameters():
    targets = module_functions(accounting) | module_functions(dp_pipeline)
    for name, member in vars(accounting.PrivacyAccountant).items():
        if not name.startswith("_") and inspect.isfunction(member):
            targets[f"PrivacyAccountant.{name}"] = member
    assert len(targets) > 30  # the walk found the functions
    found = [p for name, function in targets.items() for p in problems(name, function)]
    assert set(found) - RELEASE_UNTYPED == set()


def test_the_package_says_it_is_typed():
    assert (Path(dp_pipeline.__file__).parent / "py.typed").is_file()
