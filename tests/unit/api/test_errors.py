"""One exception root: every error dp_pipeline raises on purpose is a `DPError`.

User errors keep their builtin base (``except ValueError`` still works); broken
invariants are `InternalError`, whose message says it is a bug, and never ``assert``.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pickle
import pkgutil
from pathlib import Path

import pandas as pd
import pytest
from release_specs import SMALL_SPEC

import dp_pipeline
from dp_pipeline import (
    BudgetExceededError,
    DPError,
    DPKeyError,
    InternalError,
    KeyFileError,
    LedgerError,
    SpecError,
    load_spec,
    run_release,
)
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.run import Progress

QUIET = Progress(quiet=True)
PACKAGE = Path(dp_pipeline.__file__).resolve().parent


def package_modules():
    """Every module of dp_pipeline but ``__main__``, imported (PySpark-only ones need PySpark)."""
    modules = []
    for info in pkgutil.walk_packages(dp_pipeline.__path__, prefix="dp_pipeline."):
        if info.name.endswith(".__main__"):  # runs the CLI when imported; defines nothing
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as error:
            if error.name is None or not error.name.startswith(("pyspark", "py4j")):
                raise
    return modules


def test_every_exception_class_of_the_package_is_a_dp_error():
    modules = package_modules()
    assert len(modules) > 100  # the walk found the package, not an empty path
    defined = {
        f"{module.__name__}.{name}": value
        for module in modules
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    }
    # The walk sees the classes that live beside their checks, private ones included.
    for name in (
        "dp_pipeline.release.ledger.records.InputReuseError",
        "dp_pipeline.release.publish.filesystems.OutputLocationError",
        "dp_pipeline.accounting.support_merge.TooLargeError",
        "dp_pipeline.errors.InternalError",
    ):
        assert name in defined
    outside = sorted(name for name, value in defined.items() if not issubclass(value, DPError))
    assert outside == [], f"exception classes that are not DPError: {outside}"


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("SpecError", ValueError),
        ("InputReadError", ValueError),
        ("InvalidRowsRefusedError", ValueError),
        ("PlanError", ValueError),
        ("LedgerError", ValueError),
        ("BudgetExceededError", ValueError),
        ("ReleaseIdReuseError", ValueError),
        ("LeaseHeldError", ValueError),
        ("PublicationError", ValueError),
        ("KeyFileError", ValueError),
        ("GridTooLargeError", ValueError),
        ("PostprocessError", ValueError),
        ("InputChangedError", RuntimeError),
        ("InternalError", RuntimeError),
        ("DPValueError", ValueError),
        ("DPTypeError", TypeError),
        ("DPKeyError", KeyError),
        ("DPRuntimeError", RuntimeError),
        ("DPFileNotFoundError", FileNotFoundError),
    ],
)
def test_user_errors_keep_their_builtin_base(name, builtin):
    error_type = getattr(dp_pipeline, name)
    assert issubclass(error_type, DPError) and issubclass(error_type, builtin)


def test_every_exported_exception_is_defined_in_errors():
    exported = [getattr(dp_pipeline, name) for name in dp_pipeline.__all__]
    exceptions = [e for e in exported if inspect.isclass(e) and issubclass(e, BaseException)]
    assert len(exceptions) >= 20
    assert sorted(e.__name__ for e in exceptions if e.__module__ != "dp_pipeline.errors") == []


@pytest.mark.parametrize("name", ["InputReadError", "InvalidRowsRefusedError"])
def test_refusals_after_the_spend_are_charged_run_errors_not_spec_errors(name):
    from dp_pipeline.errors import ChargedRunError
    from dp_pipeline.release.outcome import ExitCode, error_code, error_line

    error_type = getattr(dp_pipeline, name)
    assert issubclass(error_type, ChargedRunError) and not issubclass(error_type, SpecError)
    # Still a ValueError, and still one line naming the input and the rule.
    error = dp_pipeline.InputReadError("data/people.csv", "a row has 3 fields, the header 4")
    assert isinstance(error, ValueError)
    assert error_line(error) == (
        "input 'data/people.csv': a row has 3 fields, the header 4; the reader's own message "
        "is not shown because it can quote the data; check the file with a tool the data's "
        "owner may use"
    )
    assert error_code(error) == ExitCode.REFUSED_INPUT
    assert error_code(dp_pipeline.InvalidRowsRefusedError(["too many"], "table t")) == (
        ExitCode.REFUSED_INPUT
    )


def test_no_assert_statement_in_the_package():
    # Asserts vanish under python -O; invariants raise InternalError instead.
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [
            f"{path.relative_to(PACKAGE)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Assert)
        ]
    assert found == []


BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if inspect.isclass(value) and issubclass(value, BaseException)
)
# Raises of a builtin exception that are meant: Python's attribute protocol (a module's
# __getattr__, a proxy's).
MEANT_BUILTIN_RAISES = {
    ("__init__.py", "AttributeError"),  # the package's lazy __getattr__ (PEP 562)
    ("query/result_info.py", "AttributeError"),
    ("selection/spark.py", "AttributeError"),
}
# Still bare in release/, whose modules are being moved: each becomes a DPError subclass.
RELEASE_BUILTIN_RAISES: set[tuple[str, str]] = set()


def builtin_raises(path: Path) -> list[tuple[str, str]]:
    """(module path, exception name) of every ``raise X`` / ``raise X(...)`` of a builtin."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id in BUILTIN_EXCEPTIONS:
                found.append((path.relative_to(PACKAGE).as_posix(), raised.id))
    return found


def test_no_builtin_exception_is_raised_bare():
    # A bare ValueError is not a DPError: `except DPError` would miss it.
    found = {raise_ for path in sorted(PACKAGE.rglob("*.py")) for raise_ in builtin_raises(path)}
    assert found - MEANT_BUILTIN_RAISES - RELEASE_BUILTIN_RAISES == set()


def test_the_bare_raise_check_finds_a_bare_raise():
    module = PACKAGE / "query" / "result_info.py"
    assert builtin_raises(module) == [("query/result_info.py", "AttributeError")]


LABELS = {"privacy_unit": None, "key": MasterKey(), "release_id": "r", "table": "t"}


def test_an_engine_argument_error_is_a_dp_error():
    frame = pd.DataFrame({"age": [30, 40]})
    with pytest.raises(DPError) as info:
        frame.dp.count(by="county", domains={"county": ["a"]}, epsilon=1, **LABELS)
    assert isinstance(info.value, ValueError)
    assert "key column 'county' is not in the DataFrame" in str(info.value)
    with pytest.raises(DPError) as info:
        frame.dp.count(by="age", domains={"age": ["a"]}, epsilon=1, **LABELS)
    assert isinstance(info.value, TypeError)
    assert "key column 'age' has dtype int64 but its domain holds strings" in str(info.value)


def test_a_call_the_signature_refuses_is_a_dp_type_error():
    frame = pd.DataFrame({"age": [30, 40]})
    with pytest.raises(DPError) as info:
        frame.dp.count(by="age", domains={"age": [30]}, epsilon=1, privacy_unit=None)
    assert isinstance(info.value, TypeError)
    assert str(info.value) == "count(): missing a required argument: 'key'"


def test_an_internal_error_says_it_is_a_bug_and_where_to_report_it():
    error = InternalError("cells came back twice.")
    message = str(error)
    assert message.startswith("internal error: cells came back twice. This is a bug in dp_pipeline")
    assert "not in your spec or data" in message
    assert "report it to the dp_pipeline maintainers" in message
    assert "never the master key" in message
    # A pickled copy (an error from a Spark worker) carries the hint once.
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is InternalError and str(copy) == message


def spec_file(tmp_path, text=SMALL_SPEC):
    path = tmp_path / "spec.toml"
    path.write_text(text.format(tmp=tmp_path))
    return path


def test_except_dp_error_catches_a_bad_spec(tmp_path):
    bad = SMALL_SPEC.replace("\nepsilon = 2\n", "\nepsilon = -2\n")
    with pytest.raises(DPError) as info:
        load_spec(spec_file(tmp_path, bad))
    assert isinstance(info.value, SpecError) and isinstance(info.value, ValueError)
    assert "budget.epsilon" in str(info.value)


def test_except_dp_error_catches_a_ledger_refusal(tmp_path, monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    over_cap = SMALL_SPEC.replace("cap = {{ epsilon = 8", "cap = {{ epsilon = 1")
    spec = load_spec(spec_file(tmp_path, over_cap))
    with pytest.raises(DPError) as info:
        run_release(spec, progress=QUIET)
    assert isinstance(info.value, BudgetExceededError) and isinstance(info.value, LedgerError)
    assert "release 'small-1' refused" in str(info.value)
    assert "Nothing was read or written" in str(info.value)


def test_except_dp_error_catches_a_key_file_others_can_read(tmp_path, monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    spec = load_spec(spec_file(tmp_path))
    key_file = tmp_path / "master.key"
    key_file.write_text("00" * 32 + "\n")
    key_file.chmod(0o644)
    with pytest.raises(DPError) as info:
        run_release(spec, progress=QUIET)
    assert isinstance(info.value, KeyFileError)
    assert f"chmod 600 {key_file}" in str(info.value)
    assert "00" * 32 not in str(info.value)


def test_except_dp_error_catches_a_missing_key_variable(monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_TEST_ABSENT_KEY", raising=False)
    with pytest.raises(DPError) as info:
        MasterKey.from_env("DP_PIPELINE_TEST_ABSENT_KEY")
    assert isinstance(info.value, DPKeyError) and isinstance(info.value, KeyError)
    assert "'DP_PIPELINE_TEST_ABSENT_KEY' with the master key is not set" in str(info.value)
