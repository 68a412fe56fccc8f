"""A user's type checker sees the verbs: mypy, run on small user scripts as a new user would.

A correct script passes; a wrong argument name, a string where an integer goes, a missing
``privacy_unit`` and a verb that does not exist are each flagged, for `Session` (and
``Session.cost``), `dp_pipeline.spark` and ``dp_pipeline.dp(df)`` (``df.dp`` under a
spelling checkers follow: pandas-stubs read ``df.dp`` as a column). mypy finds the package
as installed (an editable install is a path entry, which mypy follows); a tree that is not
installed that way (a second work tree beside an installed one) is given as MYPYPATH.
"""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

import dp_pipeline

pytest.importorskip("mypy")

ROOT = Path(dp_pipeline.__file__).resolve().parent.parent

_SETUP = """
import pandas as pd

import dp_pipeline
from dp_pipeline import Budget, MasterKey, Session
from dp_pipeline.spark import dp_count, dp_std, dp_sum, dp_top_k, dp_var

key = MasterKey()
people = pd.DataFrame({"person_id": [1, 2, 3], "age": [34, 51, 27], "sex": ["F", "M", "F"]})
ages = {"age": range(0, 100)}
labels = {"key": key, "release_id": "r", "table": "t"}
"""

CORRECT = (
    _SETUP
    + """
session = Session(
    key=key, population="people", privacy_unit="person_id", budget=Budget(epsilon=1)
)
total = session.sum(people, "age", bounds=(0, 100), by="sex", domains={"sex": ["F", "M"]},
                    epsilon="1/2")
cost = session.cost.count(by="age", domains=ages, epsilon=1, max_cells=2)
fits: bool = cost.fits
query = dp_sum("age", bounds=(0, 100), by="age", domains=ages, epsilon=1,
               key=key, release_id="r", table="t", privacy_unit=None)
spent = query.info.epsilon
top = dp_top_k("sex", 1, candidates=["F", "M"], epsilon=1, key=key, release_id="r",
               table="t", privacy_unit="person_id")
counts: pd.DataFrame = dp_pipeline.dp(people).count(
    by="sex", domains={"sex": ["F", "M"]}, epsilon=1, key=key, release_id="r", table="t",
    privacy_unit="person_id",
)
median = dp_pipeline.dp(people).median("age", bounds=(0, 100), granularity=1, epsilon=1,
                                       key=key, release_id="r", table="m", privacy_unit=None)
spread: pd.DataFrame = dp_pipeline.dp(people).std(
    "age", bounds=(0, 100), by="sex", domains={"sex": ["F", "M"]}, epsilon=1, key=key,
    release_id="r", table="s", privacy_unit=None,
)
variance_cost = session.cost.var("age", bounds=(0, 100), by="sex", domains={"sex": ["F"]}, rho=1)
variance_query = dp_var("age", bounds=(0, 100), by="age", domains=ages, epsilon=1,
                        key=key, release_id="r", table="v", privacy_unit=None)
split = variance_query.info.budget_split
deviation = dp_std("age", bounds=(0, 100), by="age", domains=ages, epsilon=1,
                   key=key, release_id="r", table="d", privacy_unit=None)
old_spelling = people.dp  # still there (a column to pandas-stubs, the accessor at run time)
from_data = {"sex": dp_pipeline.FROM_DATA}
selected: pd.DataFrame = dp_pipeline.dp(people).count(
    by="sex", domains=from_data, epsilon=1, selection_epsilon=1, selection_delta=1e-6,
    key=key, release_id="r", table="k", privacy_unit="person_id",
)
selected_query = dp_count(by="sex", domains={"sex": dp_pipeline.FROM_DATA}, epsilon=1,
                          selection_epsilon=1, selection_delta=1e-6, selection_noise="gaussian",
                          key=key, release_id="r", table="k", privacy_unit="person_id")
threshold = session.cost.count(by="sex", domains=from_data, epsilon=1, selection_epsilon=1,
                               selection_delta=1e-6).threshold
"""
)

# Each mistake, one a line: (what, the call); each must be flagged on its own line.
MISTAKES = {
    "Session: missing privacy_unit": (
        'Session(key=key, population="people", budget=Budget(epsilon=1))'
    ),
    "Session: wrong argument name": (
        'session.sum(people, "age", bounds=(0, 9), by="age", domains=ages, epsilom=1)'
    ),
    "Session: a string for an integer": (
        'session.count(people, by="age", domains=ages, epsilon=1, max_cells="3")'
    ),
    "Session: no such verb": 'session.average(people, "age")',
    "Session.cost: no such verb": "session.cost.variance(by='age', domains=ages)",
    "spark: missing privacy_unit": 'dp_count(by="age", domains=ages, epsilon=1, **labels)',
    "spark: wrong argument name": (
        'dp_count(by="age", domains=ages, epsilon=1, key=key, release_id="r", table="t", '
        "privacy_unit=None, max_cels=2)"
    ),
    "spark: a string for an integer": (
        'dp_top_k("sex", "3", candidates=["F"], epsilon=1, key=key, release_id="r", '
        'table="t", privacy_unit=None)'
    ),
    "spark: no such verb": "dp_pipeline.spark.dp_average()",
    "spark: var without bounds": (
        'dp_var("age", by="age", domains=ages, epsilon=1, privacy_unit=None, key=key, '
        'release_id="r", table="t")'
    ),
    "dp(df): missing privacy_unit": (
        'dp_pipeline.dp(people).count(by="age", domains=ages, epsilon=1, key=key, '
        'release_id="r", table="t")'
    ),
    "dp(df): wrong argument name": (
        'dp_pipeline.dp(people).count(by="age", domain=ages, epsilon=1, key=key, '
        'release_id="r", table="t", privacy_unit=None)'
    ),
    "dp(df): a string for an integer": (
        'dp_pipeline.dp(people).count(by="age", domains=ages, epsilon=1, key=key, '
        'release_id="r", table="t", privacy_unit=None, cell_limit="9")'
    ),
    "dp(df): no such verb": 'dp_pipeline.dp(people).variance("age")',
    "dp(df): a number for selection_noise": (
        'dp_pipeline.dp(people).count(by="age", domains=ages, epsilon=1, key=key, '
        'release_id="r", table="t", privacy_unit=None, selection_noise=2)'
    ),
}


def installed_as_path() -> bool:
    """Whether this package is installed as a path entry mypy follows (a ``.pth`` line)."""
    for folder in site.getsitepackages():
        for pth in Path(folder).glob("*.pth"):
            lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
            if any(Path(line.strip()).resolve() == ROOT for line in lines if line.strip()):
                return True
    return False


def run_mypy(tmp_path: Path, scripts: dict[str, str]) -> list[str]:
    """mypy's error lines for ``scripts`` (file name -> source), run as a user would."""
    for name, source in scripts.items():
        (tmp_path / name).write_text(textwrap.dedent(source), encoding="utf-8")
    config = "[mypy]\n"
    env = None
    if not installed_as_path():
        # Found through MYPYPATH, the package's own modules would be checked as the user's:
        # as installed, only what the user's script uses of it is.
        config += "\n[mypy-dp_pipeline.*]\nfollow_imports = silent\n"
        env = {**os.environ, "MYPYPATH": str(ROOT)}
    (tmp_path / "mypy.ini").write_text(config, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--no-error-summary", *scripts],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if ": error:" in line]


def test_mypy_passes_a_correct_script_and_flags_each_mistake(tmp_path):
    try:
        metadata.version("pandas-stubs")
    except metadata.PackageNotFoundError:
        pytest.fail("pandas-stubs is not installed: it is in the test extra of pyproject.toml")
    session = 'session = Session(key=key, population="p", privacy_unit=None, budget=Budget(rho=1))'
    wrong = "\n".join([_SETUP, session, *(call for call in MISTAKES.values())])
    first = len((_SETUP + "\n" + session).splitlines()) + 1
    errors = run_mypy(tmp_path, {"correct.py": CORRECT, "wrong.py": wrong})
    assert [line for line in errors if line.startswith("correct.py")] == []
    flagged = {int(m.group(1)) for line in errors if (m := re.match(r"wrong\.py:(\d+):", line))}
    missed = [what for line, what in enumerate(MISTAKES, first) if line not in flagged]
    assert missed == [], "\n".join(errors)
    assert len(flagged) == len(MISTAKES)
