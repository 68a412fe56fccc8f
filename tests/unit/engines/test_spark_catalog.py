"""docs/spark.md's catalog example, run as a reader runs it, on a local Hive warehouse.

Its Python block makes a table in a warehouse and an embedded metastore in the working
folder; its spec names the table; its command line gives `dp-release run` the same
catalog settings (the operator's, never a spec's). Each runs in a process of its own
(the embedded metastore admits one JVM at a time), and the release is published.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "spark.md"
MARKER = (
    "<!-- docs-test: not run, tests/unit/engines/test_spark_catalog.py runs this page's "
    "catalog example"
)
KEY_HEX = "b59163f6516e8ee81ecc2cfc05e6ebbc7d81b82a9ae660ea6820b535d9e12845"
CLI = (
    f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
    "from dp_pipeline.release.cli import main; sys.exit(main())"
)


def catalog_blocks() -> dict[str, str]:
    """The page's catalog example: its python, toml and console blocks, by language."""
    found = re.findall(
        re.escape(MARKER) + r"[^\n]*-->\n```(\w+)\n(.*?)^```$", PAGE.read_text(), re.S | re.M
    )
    return dict(found)


def test_the_page_has_the_catalog_example():
    blocks = catalog_blocks()
    assert sorted(blocks) == ["console", "python", "toml"]
    assert blocks["console"].startswith("dp-release run catalog.toml")
    assert "spark.sql.catalogImplementation=hive" in blocks["console"]
    assert "spark.sql.warehouse.dir=warehouse" in blocks["console"]


@pytest.mark.spark
def test_the_documented_catalog_commands_publish_the_table(tmp_path):
    blocks = catalog_blocks()
    environment = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        DP_PIPELINE_MASTER_KEY=KEY_HEX,
        DP_PIPELINE_HOME=str(tmp_path / "home"),
    )
    made = subprocess.run(
        [sys.executable, "-c", blocks["python"]],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    (tmp_path / "catalog.toml").write_text(blocks["toml"])
    (command,) = [line for line in blocks["console"].splitlines() if line.strip()]
    words = shlex.split(command)
    assert words[0] == "dp-release"
    run = subprocess.run(
        [sys.executable, "-c", CLI, *words[1:], "--json"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["status"] == "published"
    assert (tmp_path / "out" / "catalog-1" / "manifest.json").is_file()
    assert (tmp_path / "warehouse" / "census.db" / "people").is_dir()
