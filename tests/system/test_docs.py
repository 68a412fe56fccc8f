"""The docs run as a reader runs them: each document's blocks in order, in one folder.

Each document starts where a reader starts: a fresh user (its own ``$HOME``, so its
own default dp_pipeline home ``~/.dp_pipeline``; no ``$DP_PIPELINE_HOME``, no
``$DP_PIPELINE_MASTER_KEY``) who has run README's job (`readers_job`: as ``.ci/run``
runs it, on a small sample, and on the pandas engine so that the fast tier can run it;
it leaves the same key, ledger and release a Spark run leaves). A document's ```python
blocks (each in its own interpreter) and ```bash blocks (every line a ``dp-release``
command) then run one after another in that folder, sharing its files, the job's key
and ledger, so that a block that only works in a fresh folder, or with a test key,
fails here. Fences that are not run:
```console (a command the test does not run, or its output), ```text, and any block
with a marker comment on the line just before its fence:

- ``<!-- docs-test: excerpt of conf/x.toml -->``: an excerpt of a project file, not
  run; the prose just before it says so (``excerpt of `conf/x.toml` ``) and the test
  checks that the file holds it (TOML: every key of the excerpt has the file's value).
- ``<!-- docs-test: not run, REASON -->``: a block a reader runs elsewhere (the set-up
  commands of README.md, run by ``.ci/run``).

A ``dp-release`` line must exit 0, unless it ends with ``# exit N`` (a documented exit
code, e.g. 3 for a release id already committed): then it must exit N.

Tiers: a document with a block that starts Spark is one ``spark`` test; the fast tier
(``-m "not spark"``) runs the same document's other blocks in order instead.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from dp_pipeline.release.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(
    r"^(?:<!-- docs-test: (?P<marker>[^\n]*?) -->\n)?```(?P<language>\w+)\n(?P<code>.*?)^```$",
    re.DOTALL | re.MULTILINE,
)
MARKER = re.compile(r"^<!-- docs-test:", re.MULTILINE)
RUN = ("python", "bash")
# A bash line a reader sees end with another documented exit code: `dp-release ...  # exit 3`.
EXPECTED_EXIT = re.compile(r"\s+#\s*exit (?P<code>\d+)\b.*$")
NOT_RUN = ("console", "text")
# README's job, as .ci/run runs it (a small sample); pandas, so the fast tier runs it too.
READERS_JOB = ["run", "conf/census_demo.toml", "--persons", "20000", "--engine", "pandas"]
# What a reader's shell does not have: a home or key chosen for the tests.
NOT_A_READERS = ("DP_PIPELINE_HOME", "DP_PIPELINE_MASTER_KEY", "DP_PIPELINE_LEDGER")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    marker: str | None
    before: str  # the document's text before the block (its caption is at the end)

    @property
    def runs(self) -> bool:
        return self.language in RUN and self.marker is None

    @property
    def name(self) -> str:
        return f"{self.document.name}:{self.line}"

    @property
    def spark(self) -> bool:
        if self.language == "python":
            return (
                "dp_pipeline.spark" in self.code
                or re.search(r'"--engine",\s*"spark"', self.code) is not None
            )
        return any(_command_starts_spark(line) for line in _commands(self))


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        start = match.start("language") - 3
        found.append(
            Block(
                document=path,
                line=text.count("\n", 0, start) + 1,
                language=match["language"],
                code=match["code"],
                marker=match["marker"],
                before=text[: match.start()],
            )
        )
    return found


def _commands(block: Block) -> list[str]:
    return [line for line in block.code.splitlines() if line.strip() and not line.startswith("#")]


def _command_starts_spark(line: str) -> bool:
    words = shlex.split(line)[1:]
    if "--engine" in words:
        return words[words.index("--engine") + 1] == "spark"
    if words[:1] != ["run"] or len(words) < 2:
        return False  # plan and ledger read no data
    spec = tomllib.loads((ROOT / words[1]).read_text())
    return spec.get("run", {}).get("engine", "spark") == "spark"


def _sequences() -> list:
    """One test per document with runnable blocks (and its non-Spark blocks, fast tier)."""
    cases = []
    for path in DOCUMENTS:
        runnable = [block for block in blocks(path) if block.runs]
        if not runnable:
            continue
        if any(block.spark for block in runnable):
            cases.append(pytest.param(path, True, id=path.name, marks=[pytest.mark.spark]))
            if not all(block.spark for block in runnable):
                cases.append(pytest.param(path, False, id=f"{path.name}-without-spark"))
        else:
            cases.append(pytest.param(path, True, id=path.name))
    return cases


def _excerpts() -> list:
    return [
        pytest.param(block, id=block.name)
        for path in DOCUMENTS
        for block in blocks(path)
        if block.marker is not None and block.marker.startswith("excerpt of ")
    ]


def _scratch(folder: Path) -> dict[str, str]:
    """``folder`` with conf/ copied in; the environment of a fresh user whose ``$HOME`` is
    ``folder/reader`` (so the default home is ``folder/reader/.dp_pipeline``), with no
    test key and no home or ledger variable (never the home of whoever runs the tests)."""
    shutil.copytree(ROOT / "conf", folder / "conf")
    (folder / "reader").mkdir()
    environment = {k: v for k, v in os.environ.items() if k not in NOT_A_READERS}
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    # XDG_CACHE_HOME: the class-archive cache stays shared, as a reader's persists.
    return dict(
        environment, PYTHONPATH=str(ROOT), HOME=str(folder / "reader"), XDG_CACHE_HOME=cache
    )


@contextmanager
def _as_reader(folder: Path, environment: dict[str, str]):
    """This process as the reader's shell in ``folder`` (for in-process ``dp-release``)."""
    names = (*NOT_A_READERS, "HOME", "XDG_CACHE_HOME")
    previous = Path.cwd(), {name: os.environ.get(name) for name in names}
    os.chdir(folder)
    for name in names:
        os.environ.pop(name, None)
        if name in environment:
            os.environ[name] = environment[name]
    try:
        yield
    finally:
        os.chdir(previous[0])
        for name, value in previous[1].items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def readers_job(folder: Path, environment: dict[str, str]) -> None:
    """README's job, run in ``folder`` by the reader: creates the key and the ledger in the
    reader's default home and publishes ``out/census-demo-2026``."""
    with _as_reader(folder, environment):
        status = main([*READERS_JOB, "--quiet"])
    assert status == 0, f"README's job failed in {folder}: dp-release {' '.join(READERS_JOB)}"
    assert (folder / "reader" / ".dp_pipeline" / "master.key").is_file()


def run_in_order(
    path: Path, folder: Path, *, with_spark: bool = True, after_job: bool = False
) -> int:
    """Run ``path``'s blocks in document order in ``folder`` (``after_job``: after README's
    job, `readers_job`); returns how many ran.

    A failing block fails the test naming the document, the block's line and what the
    blocks before it left behind in the folder.
    """
    environment = _scratch(folder)
    if after_job:
        readers_job(folder, environment)
    ran = 0
    for block in blocks(path):
        if not block.runs or (block.spark and not with_spark):
            continue
        ran += 1
        left = sorted(entry.name for entry in folder.iterdir())
        context = (
            f"{block.name} failed after the blocks before it ran in the same folder "
            f"(which holds {left})"
        )
        if block.language == "python":
            # Each block runs in its own interpreter, as a reader would paste it: a block
            # that starts and stops a Spark session cannot stop the one this run shares.
            done = subprocess.run(
                [sys.executable, "-c", block.code],
                cwd=folder,
                env=environment,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert done.returncode == 0, f"{context}:\n{block.code}\n{done.stderr}"
            continue
        lines = _commands(block)
        assert lines, f"{block.name}: an empty bash block"
        for line in lines:
            assert line.startswith("dp-release "), (
                f"{block.name}: {line!r} is in a bash block but is not a dp-release command; "
                "fence commands that are not run by the docs test as console"
            )
            expected = EXPECTED_EXIT.search(line)
            command = line[: expected.start()] if expected else line
            with _as_reader(folder, environment):
                status = main(shlex.split(command)[1:])
            wanted = int(expected["code"]) if expected else 0
            assert status == wanted, f"{context}: {line} (exit {status}, not {wanted})"
    return ran


def test_docs_have_executable_examples():
    languages = {block.language for block in blocks(ROOT / "docs" / "quickstart.md") if block.runs}
    assert languages == {"python", "bash"}
    assert [block for block in blocks(ROOT / "docs" / "tutorial.md") if block.runs]


@pytest.mark.parametrize(("path", "with_spark"), _sequences())
def test_document_runs_in_order(path, with_spark, tmp_path, monkeypatch, capsys, request):
    if not with_spark:
        whole = request.node.nodeid.replace("-without-spark]", "]")
        if any(item.nodeid == whole for item in request.session.items):
            pytest.skip(f"{path.name}: its whole sequence runs in this session")
    assert run_in_order(path, tmp_path, with_spark=with_spark, after_job=True) > 0


def test_each_page_starts_with_no_test_key_after_readers_job(tmp_path, monkeypatch):
    # A block that reads the test's own key or home instead of the job's fails here: the
    # reader's Session uses the key README's job created in the default home.
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", "0" * 64)  # would be refused as weak
    document = tmp_path / "doc.md"
    document.write_text(
        "```python\nimport os\nfrom pathlib import Path\n"
        "from dp_pipeline import default_key_file\n"
        "assert 'DP_PIPELINE_MASTER_KEY' not in os.environ\n"
        "assert Path(default_key_file()) == Path.home() / '.dp_pipeline' / 'master.key'\n"
        "assert Path(default_key_file()).is_file()\n```\n\n"
        "```bash\ndp-release ledger --population demo-census-persons\n```\n"
    )
    assert run_in_order(document, tmp_path / "folder", after_job=True) == 2


def test_readme_links_every_page_in_docs():
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\((docs/[^)#\s]+\.md)\)", readme))
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    assert not pages - linked, f"README.md links no {sorted(pages - linked)}: add them to Docs:"


def test_blocks_share_the_folder(tmp_path):
    # A block that depends on what an earlier one wrote runs only in order, and the
    # runner must not give each block a fresh folder: that hides two blocks that use one
    # release id on different inputs (the second is refused in a reader's folder).
    document = tmp_path / "doc.md"
    document.write_text(
        "```python\nopen('first.txt', 'w').write('1')\n```\n\n"
        "```python\nassert open('first.txt').read() == '1'\n```\n"
    )
    assert run_in_order(document, tmp_path / "folder") == 2
    reversed_document = tmp_path / "reversed.md"
    reversed_document.write_text(
        "```python\nassert open('first.txt').read() == '1'\n```\n\n"
        "```python\nopen('first.txt', 'w').write('1')\n```\n"
    )
    with pytest.raises(AssertionError, match=r"reversed\.md:1 failed after the blocks before"):
        run_in_order(reversed_document, tmp_path / "reversed")


def test_markers_are_well_formed():
    for path in DOCUMENTS:
        text = path.read_text()
        marked = {block.marker for block in blocks(path) if block.marker is not None}
        assert len(MARKER.findall(text)) == sum(
            block.marker is not None for block in blocks(path)
        ), f"{path.name}: a docs-test marker must be on the line just before a fence"
        for marker in marked:
            assert marker.startswith("excerpt of ") or re.fullmatch(r"not run, \S.*", marker), (
                f"{path.name}: unknown marker {marker!r}; write "
                "'<!-- docs-test: excerpt of conf/x.toml -->' or "
                "'<!-- docs-test: not run, REASON -->'"
            )
        for block in blocks(path):
            assert block.language in RUN + NOT_RUN or block.marker is not None, (
                f"{block.name}: a ```{block.language} block is neither run nor marked; "
                "mark an excerpt with '<!-- docs-test: excerpt of FILE -->'"
            )


def _contained(excerpt, whole, where: str) -> None:
    if isinstance(excerpt, dict):
        assert isinstance(whole, dict), where
        for key, value in excerpt.items():
            assert key in whole, f"{where}.{key} is not in the file"
            _contained(value, whole[key], f"{where}.{key}")
    elif isinstance(excerpt, list) and excerpt and isinstance(excerpt[0], dict):
        assert isinstance(whole, list) and len(whole) == len(excerpt), where
        for index, (part, full) in enumerate(zip(excerpt, whole, strict=True)):
            _contained(part, full, f"{where}[{index}]")
    else:
        assert excerpt == whole, f"{where}: {excerpt!r} in the excerpt, {whole!r} in the file"


@pytest.mark.parametrize("block", _excerpts())
def test_excerpts_are_in_their_files(block):
    source = block.marker.removeprefix("excerpt of ").strip()
    caption = block.before.rsplit("\n\n", 2)[-2:]
    assert f"excerpt of `{source.lower()}`" in " ".join(caption).replace("\n", " ").lower(), (
        f"{block.name}: the text before the block must say it is an excerpt of `{source}`"
    )
    file = ROOT / source
    assert file.is_file(), f"{block.name}: {source} does not exist"
    if block.language == "toml":
        _contained(tomllib.loads(block.code), tomllib.loads(file.read_text()), source)
        return
    lines = iter(line.strip() for line in file.read_text().splitlines())
    for line in block.code.splitlines():
        assert not line.strip() or line.strip() in lines, f"{block.name}: {line!r}"
