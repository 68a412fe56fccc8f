"""A release's mean, var and std tables are the engines' own queries, draw for draw.

With an explicit σ² (every aggregate's noise), the released values equal what the
engines' mean query and variance (``df.dp.mean`` / ``df.dp.var`` / ``df.dp.std``) give
for the same data, bounds,
granularity, key and stream labels (release id, table name, the release's
digest, noise partitions): the spec path adds nothing to the noise.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from release_specs import operator_home

from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.engines.variance import run_variance
from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.query.variance import VarianceSpec
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.read import read_release
from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.spec.load import load_spec

KEY_HEX = "4eeed306ec329808f26c52a6ecb3fbe77ee252db213f9394ea6bc9b315e332ee"
SPEC = """
[release]
id = "stats-1"
noise_partitions = 3
noise = "{noise}"

[population]
name = "stat-people"
cap = {{ epsilon = 50, delta = 1e-6 }}

[privacy_unit]
column = "pid"
max_cells_per_table = 1
max_per_cell = 2

{budget}

[input]
path = "{tmp}/people.csv"

[output]
dir = "{tmp}/out"

[run]
engine = "pandas"
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"

[domains]
sex = ["F", "M"]

[[tables]]
name = "mean_spend"
keys = ["sex"]
statistic = "mean"
value = "spend"
lower = -10
upper = 90
granularity = "1/4"
{noise_field}

[[tables]]
name = "var_spend"
keys = ["sex"]
statistic = "var"
value = "spend"
lower = 0
upper = 80
granularity = 2
{noise_field}

[[tables]]
name = "std_spend"
keys = ["sex"]
statistic = "std"
value = "spend"
lower = 0
upper = 80
{noise_field}
"""


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def people(tmp_path) -> pd.DataFrame:
    rng = np.random.Generator(np.random.PCG64(5))  # test data only
    frame = pd.DataFrame(
        {
            "pid": np.repeat(np.arange(400), 2),
            "sex": rng.choice(["F", "M"], 800),
            "spend": np.round(rng.normal(40, 20, 800), 2),
        }
    )
    frame.loc[3, "spend"] = np.nan  # an invalid value: dropped by both
    frame.to_csv(tmp_path / "people.csv", index=False)
    return pd.read_csv(tmp_path / "people.csv", dtype={"sex": str})


def release(tmp_path, noise: str, budget: str, noise_field: str):
    operator_home(tmp_path)
    path = tmp_path / "spec.toml"
    text = SPEC.format(tmp=tmp_path, noise=noise, budget=budget, noise_field=noise_field)
    path.write_text(text)
    result = run_release(load_spec(path), progress=Progress(quiet=True))
    report = json.loads((result.output / "privacy_report.json").read_text())
    return read_release(result.output), report


def test_spec_tables_equal_the_engines_queries(tmp_path):
    frame = people(tmp_path)
    released, report = release(tmp_path, "discrete_gaussian", "", "sigma2 = 100000000")
    common = dict(
        by=["sex"],
        domains={"sex": ["F", "M"]},
        privacy_unit="pid",
        max_cells=1,
        max_per_cell=2,
        key=MasterKey.from_hex(KEY_HEX),
        release_id="stats-1",
        noise_partitions=3,
        release_digest=report["release_digest"],
        noise=DiscreteGaussian(10**8),
    )
    mean = QuerySpec.build(
        "mean",
        column="spend",
        bounds=(-10, 90),
        granularity=Fraction(1, 4),
        table="mean_spend",
        **common,
    )
    expected = {
        "mean_spend": run_pandas(frame, mean)[0]["mean"],
        "var_spend": run_variance(
            frame,
            VarianceSpec.build(
                "var", "spend", bounds=(0, 80), granularity=2, table="var_spend", **common
            ),
        )["var"],
        "std_spend": run_variance(
            frame, VarianceSpec.build("std", "spend", bounds=(0, 80), table="std_spend", **common)
        )["std"],
    }
    for name, values in expected.items():
        assert list(released[name]["sex"]) == ["F", "M"]
        np.testing.assert_array_equal(released[name]["value"].to_numpy(), values.to_numpy())
    assert released["var_spend"]["value"].between(0, 40**2).all()


def test_discrete_laplace_tables_spend_pure_epsilon(tmp_path):
    people(tmp_path)
    budget = "[budget]\nepsilon = 3\ndelta = 0"
    shares = 'share = "1/3"'
    released, report = release(tmp_path, "discrete_laplace", budget, shares)
    tables = {t["name"]: t for t in report["tables"]}
    mechanisms = {m["mechanism"] for t in tables.values() for m in t["measures"]}
    assert mechanisms == {"discrete_laplace"}
    assert report["guarantee"]["delta_tight"]["upper"] == 0
    assert report["guarantee"]["epsilon_tight"]["upper"] <= 3
    assert released["std_spend"]["value"].between(0, 40).all()
