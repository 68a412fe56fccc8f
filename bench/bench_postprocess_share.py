"""Post-processing's share of a whole release's wall time, on three hierarchy shapes.

Usage (from the repo root):
    PYTHONPATH=. python bench/bench_postprocess_share.py --rounds 2

Whole releases on the pandas engine (``run_release``, each round in a fresh home,
ledger, key and output folder), fastest of ``--rounds`` by total time:

- demo: ``conf/census_demo.toml`` at ``--persons`` synthetic persons (200,000);
- national: the demo plus a national age x sex table (share 1/16 taken from
  county_age_sex; ``bench_postprocess_classes.national_spec``);
- skewed: the skewed geography of ``tests/support/postprocess_cases.py`` (1,500
  counties in 40 states, 3 of them empty, one county holding 40% of its state)
  written as a Parquet input and a county -> state mapping, with its four tables at
  their explicit σ² (county x age x sex 37/2, state x age x sex 74, a near-exact
  county x sex 1/4 and a very noisy state x sex 2000).

Prints per shape the post-processing phase, the total and their ratio (goal: at most
0.10 on every shape), with the load average before and after: the figures are wall
times, noisy on a loaded machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import pandas as pd
from bench_postprocess_classes import national_spec

from dp_pipeline.release.run import apply_overrides, run_release
from dp_pipeline.release.spec.load import load_spec
from tests.support.postprocess_cases import SKEWED_AGES, SKEWED_TABLES, skewed_geography

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return "load average " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def skewed_spec(scratch: Path) -> Path:
    """The skewed geography as a release: persons (Parquet), mapping (CSV) and spec."""
    hierarchy, cells = skewed_geography()
    counties, ages, sexes = cells.shape
    flat = cells.reshape(-1)
    county, age, sex = np.unravel_index(np.repeat(np.arange(flat.size), flat), cells.shape)
    persons = pd.DataFrame(
        {
            "person_id": np.arange(county.size, dtype=np.int64),
            "county": county.astype(np.int64),
            "state": hierarchy.parents[0][county].astype(np.int64),
            "age": age.astype(np.int64),
            "sex": sex.astype(np.int64),
        }
    )
    persons.to_parquet(scratch / "skewed_persons.parquet", index=False)
    pd.DataFrame({"county": np.arange(counties), "state": hierarchy.parents[0]}).to_csv(
        scratch / "skewed_counties.csv", index=False
    )
    tables = "".join(
        f'\n[[tables]]\nname = "{name}"\nkeys = {list(keys)!r}\nstatistic = "count"\n'
        f'sigma2 = "{sigma2}"\n'.replace("'", '"')
        for name, (keys, sigma2) in SKEWED_TABLES.items()
    )
    text = f"""
[release]
id = "skewed-geography"
noise = "discrete_gaussian"
neighbouring = "add_remove"

[population]
name = "skewed-persons"
cap = {{ epsilon = 100, delta = 1e-9 }}

[privacy_unit]
column = "person_id"
max_cells_per_table = 1
max_per_cell = 1

[input]
path = "{scratch / "skewed_persons.parquet"}"

[output]
dir = "out"

[run]
engine = "pandas"

[domains]
county = {{ start = 0, stop = {counties - 1} }}
state = {{ start = 0, stop = {hierarchy.sizes[0] - 1} }}
age = {{ start = 0, stop = {SKEWED_AGES - 1} }}
sex = {{ start = 0, stop = {sexes - 1} }}

[hierarchy]
levels = ["state", "county"]
mapping = "skewed_counties.csv"

[postprocess]
consistent = true
nonnegative = true
integer = true
{tables}"""
    path = scratch / "skewed.toml"
    path.write_text(text)
    assert ages == SKEWED_AGES
    return path


def one_release(spec, scratch: Path, label: str, round_: int) -> dict[str, float]:
    """One release in a fresh home and folders; its phase timings (seconds)."""
    folder = scratch / f"{label}-{round_}"
    home = folder / "home"
    home.mkdir(parents=True)
    os.environ["HOME"] = str(home)  # the key and ledger defaults live under it
    spec = apply_overrides(
        spec,
        release_id=f"{spec.release_id}-share-{round_}",
        output_dir=str(folder / "out"),
        ledger_path=str(folder / "ledger.sqlite"),
        key_file=str(folder / "key"),
        engine="pandas",
    )
    return run_release(spec).timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(load())
    with tempfile.TemporaryDirectory() as name:
        scratch = Path(name)
        demo = ROOT / "conf" / "census_demo.toml"
        specs = {
            "demo": apply_overrides(load_spec(str(demo)), synthetic_persons=args.persons),
            "demo + national age x sex": apply_overrides(
                load_spec(str(national_spec(demo, scratch))), synthetic_persons=args.persons
            ),
            "skewed geography": load_spec(str(skewed_spec(scratch))),
        }
        best: dict[str, dict[str, float]] = {}
        for round_ in range(args.rounds):  # shapes alternate: load lands on each alike
            for shape, (label, spec) in enumerate(specs.items()):
                timings = one_release(spec, scratch, f"shape{shape}", round_)
                if label not in best or timings["total"] < best[label]["total"]:
                    best[label] = timings
    print(load())
    print(f"fastest of {args.rounds} round(s), pandas engine, {args.persons:,} demo persons")
    print(f"{'shape':<28}{'post-processing s':>18}{'total s':>10}{'share':>8}")
    for label, timings in best.items():
        share = timings["postprocess"] / timings["total"]
        print(
            f"{label:<28}{timings['postprocess']:>18.2f}{timings['total']:>10.2f}{share:>8.1%}"
            f"{'' if share <= 0.10 else '  (goal 10%: not met)'}"
        )


if __name__ == "__main__":
    main()
