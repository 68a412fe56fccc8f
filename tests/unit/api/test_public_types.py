"""The public surface is typed: every parameter annotated, none as `object` or `Any`.

mypy (run by CI over the modules of ``[tool.mypy]`` in pyproject.toml) checks the bodies;
it cannot refuse an ``object`` parameter, which accepts anything and checks nothing, so
this test does, on the signatures users call: every verb of the table on every surface
(``df.dp``, ``dp_pipeline.spark``, ``Session``, ``Session.cost``: their stubs equal these
signatures, tests/unit/api/test_stubs.py), the accountant and the functions of
``dp_pipeline.accounting`` and ``dp_pipeline``.
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
from dp_pipeline.accessor import SURFACE as DF_DP
from dp_pipeline.session.records import COST_SURFACE, QUERY_SURFACE
from dp_pipeline.surface.verbs import VERBS, signature_of

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


def verb_problems(surface_name: str, surface: object) -> list[str]:
    found = []
    for name, verb in VERBS.items():
        function = lambda: None  # noqa: E731  (a carrier for the generated signature)
        function.__signature__ = signature_of(verb, surface)  # type: ignore[attr-defined]
        found += problems(f"{surface_name}.{name}", function)
    return found


def test_every_verb_has_typed_parameters_on_every_surface():
    found = verb_problems("df.dp", DF_DP)
    found += verb_problems("session", QUERY_SURFACE) + verb_problems("session.cost", COST_SURFACE)
    assert found == []
    assert problems("dp_pipeline.dp", dp_pipeline.dp) == []


def test_the_runtime_verbs_are_the_table_s():
    for name, verb in VERBS.items():
        assert inspect.signature(getattr(pd.DataFrame.dp, name)) == signature_of(verb, DF_DP)
        assert inspect.signature(getattr(dp_pipeline.Session, name)) == signature_of(
            verb, QUERY_SURFACE
        )


def test_spark_functions_have_typed_parameters():
    pytest.importorskip("pyspark")
    from dp_pipeline import spark

    assert verb_problems("dp_pipeline.spark", spark.SURFACE) == []


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


def test_dp_of_a_frame_is_its_df_dp_accessor():
    people = pd.DataFrame({"person_id": [1, 2, 3], "sex": ["F", "M", "F"]})
    arguments = dict(
        by="sex",
        domains={"sex": ["F", "M"]},
        epsilon=1,
        key=dp_pipeline.MasterKey(),
        release_id="r",
        table="t",
        privacy_unit="person_id",
    )
    assert dp_pipeline.dp(people).count(**arguments).equals(people.dp.count(**arguments))
    with pytest.raises(dp_pipeline.DPTypeError) as refused:
        dp_pipeline.dp([1, 2])  # type: ignore[arg-type]
    assert str(refused.value) == (
        "dp_pipeline.dp(df) takes a pandas DataFrame, got list; for a Spark DataFrame use "
        "df.transform(dp_pipeline.spark.dp_count(...)) (or dp_sum, ...), or "
        "session.count(df, ...)"
    )
