"""The examples in docs/ run: every ```python block, and every ```bash ``dp-release`` line."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from dp_pipeline.release.cli import main

# TEMPORARY: these tests need the engines (dp_pipeline.pandas_accessor, dp_pipeline.spark),
# which were not yet merged when they were written; remove this guard after the merge.
pytest.importorskip("dp_pipeline.pandas_accessor", reason="engines not merged yet")
pytest.importorskip("dp_pipeline.spark", reason="engines not merged yet")

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.DOTALL)


def blocks(path: Path, language: str) -> list[str]:
    return [code for kind, code in BLOCK.findall(path.read_text()) if kind == language]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A scratch working folder with conf/ and a fixed test key (never a real one)."""
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", "1e" * 32)
    return tmp_path


def test_docs_have_executable_examples():
    assert blocks(ROOT / "docs" / "quickstart.md", "python")
    assert blocks(ROOT / "docs" / "quickstart.md", "bash")


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_bash_examples(path, scratch, capsys):
    for code in blocks(path, "bash"):
        for line in code.splitlines():
            if line.startswith("dp-release "):
                assert main(shlex.split(line)[1:]) == 0, line


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_python_examples(path, scratch):
    for code in blocks(path, "python"):
        namespace: dict = {"__name__": "__docs__"}
        exec(compile(code, f"{path.name}", "exec"), namespace)
