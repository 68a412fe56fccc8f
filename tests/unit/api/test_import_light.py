"""``import dp_pipeline`` (what registering ``df.dp`` needs) loads no Spark, PostgreSQL or report
module: the release entry points, the session and the exceptions defined beside the release
steps are exported lazily (PEP 562). Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import dp_pipeline

# Loaded by nothing a df.dp call needs: the optional engines' and the server ledger's
# libraries, the PostgreSQL ledger backend and the release report (matplotlib).
HEAVY = (
    "pyspark",
    "psycopg",
    "dp_pipeline.release.ledger.postgres_backend",
    "dp_pipeline.release.report",
    "dp_pipeline.release.run",
    "dp_pipeline.engines.spark",
    "matplotlib",
)

_PROBE = """
import json, sys
{code}
print(json.dumps(sorted(sys.modules)))
"""

_COUNT = """
import pandas as pd
import dp_pipeline
df = pd.DataFrame({"person_id": [1, 2, 3], "sex": ["F", "M", "F"]})
df.dp
counts = dp_pipeline.dp(df).count(
    by="sex", domains={"sex": ["F", "M"]}, epsilon=1, key=dp_pipeline.MasterKey(),
    release_id="r", table="t", privacy_unit="person_id",
)
df.dp.count(
    by="sex", domains={"sex": ["F", "M"]}, epsilon=1, key=dp_pipeline.MasterKey(),
    release_id="r", table="t2", privacy_unit=None,
)
"""


def loaded(code: str) -> list[str]:
    """The modules loaded after ``code`` in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(code=code)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(result.stdout.splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize("code", ["import dp_pipeline", _COUNT], ids=["import", "df.dp count"])
def test_importing_the_package_and_a_df_dp_call_load_no_heavy_module(code):
    modules = loaded(code)
    assert "dp_pipeline.accessor" in modules  # df.dp is registered
    assert heavy(modules) == []


def test_the_lazy_names_resolve_and_a_misspelt_one_is_refused():
    modules = loaded(
        "import dp_pipeline\n"
        "assert dp_pipeline.run_release.__module__ == 'dp_pipeline.release.run'\n"
        "assert issubclass(dp_pipeline.SpecError, dp_pipeline.DPError)\n"
        "assert dp_pipeline.Session.__name__ == 'Session'"
    )
    assert "dp_pipeline.release.run" in modules  # loaded on first use, not before
    for name in dp_pipeline.__all__:
        assert getattr(dp_pipeline, name) is not None, name
    assert set(dp_pipeline.__all__) <= set(dir(dp_pipeline))
    with pytest.raises(AttributeError, match="no attribute 'Sesion'"):
        dp_pipeline.Sesion  # noqa: B018
