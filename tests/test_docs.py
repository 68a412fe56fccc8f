"""The examples in docs/ run: every ```python block, and every ```bash ``dp-release`` line."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dp_pipeline.release.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.DOTALL)


def blocks(path: Path, language: str) -> list[str]:
    return [code for kind, code in BLOCK.findall(path.read_text()) if kind == language]


def _examples(language: str) -> list:
    """One test case per ``language`` block of docs/ (Spark blocks marked ``spark``)."""
    cases = []
    for path in DOCS:
        for index, code in enumerate(blocks(path, language), 1):
            spark = (
                "dp_pipeline.spark" in code
                or "conf/census_demo.toml" in code
                or re.search(r'"--engine",\s*"spark"', code) is not None
            )
            marks = [pytest.mark.spark] if spark else []
            cases.append(pytest.param(path, code, id=f"{path.name}-{index}", marks=marks))
    return cases


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A scratch working folder with conf/ and a fixed test key (never a real one)."""
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(
        "DP_PIPELINE_MASTER_KEY", "8b5905d57f3fcf974a71f588b383af19508d3f079d225acc8f962ed6fcb7ae32"
    )
    return tmp_path


def test_docs_have_executable_examples():
    assert blocks(ROOT / "docs" / "quickstart.md", "python")
    assert blocks(ROOT / "docs" / "quickstart.md", "bash")


@pytest.mark.parametrize(("path", "code"), _examples("bash"))
def test_bash_examples(path, code, scratch, capsys):
    # A ```bash block in docs/ is a command to run; what is not run is fenced ```console.
    lines = [line for line in code.splitlines() if line.strip() and not line.startswith("#")]
    assert lines, f"{path.name}: an empty bash block"
    for line in lines:
        assert line.startswith("dp-release "), (
            f"{path.name}: {line!r} is in a bash block but is not a dp-release command; "
            "fence commands that are not run by the docs test as console"
        )
        assert main(shlex.split(line)[1:]) == 0, line


@pytest.mark.parametrize(("path", "code"), _examples("python"))
def test_python_examples(path, code, scratch):
    # Each block runs in its own interpreter, as a reader would run it: a block that
    # starts and stops a Spark session cannot stop the one this test run shares.
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=scratch,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{path.name} block failed:\n{code}\n{done.stderr}"
