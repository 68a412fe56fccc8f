"""Shared test data for the post-processing tests: the demo's tables on synthetic persons."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dp_pipeline.datasets.synthetic import COUNTIES, STATES, census_chunk
from dp_pipeline.postprocess import Hierarchy, NoisyCounts
from dp_pipeline.postprocess.plan import plan
from dp_pipeline.postprocess.topdown import Problem
from dp_pipeline.postprocess.wls import solve_wls

# The synthetic generator's county -> state map, as 0-based positions.
COUNTY_PARENT = (np.arange(COUNTIES, dtype=np.int64) * STATES) // COUNTIES
DEMO_HIERARCHY = Hierarchy(("state", "county"), (STATES, COUNTIES), (COUNTY_PARENT,))

DEMO_TABLES = {
    # name: keys, variance (sigma^2 in the demo's proportions: share 1/2, 1/8, 1/8, 1/8, 1/16)
    "county_age_sex": (("county", "age", "sex"), Fraction(37, 2)),
    "state_age_sex": (("state", "age", "sex"), Fraction(74)),
    "state_race_hispanic": (("state", "race", "hispanic"), Fraction(74)),
    "county_household_size": (("county", "household_size"), Fraction(74)),
    "state_tenure": (("state", "tenure"), Fraction(148)),
}


def demo_truth(persons: int, seed: int = 2026) -> dict[str, tuple[tuple[int, ...], np.ndarray]]:
    """True counts of the demo's count tables: name -> (sizes, int64 counts in C order)."""
    t = census_chunk(seed, 0, persons)
    codes = {
        "county": t["county"].to_numpy() - 1,
        "state": t["state"].to_numpy() - 1,
        "age": t["age"].to_numpy(),
        "household_size": t["household_size"].to_numpy() - 1,
    }
    for col, labels in (
        ("sex", ("F", "M")),
        ("race", ("white", "black", "aian", "asian", "nhpi", "other", "multiple")),
        ("hispanic", ("no", "yes")),
        ("tenure", ("owned", "rented", "group_quarters")),
    ):
        codes[col] = pc.index_in(t[col], value_set=pa.array(labels)).to_numpy()
    sizes = {"county": COUNTIES, "state": STATES, "age": 116, "sex": 2, "race": 7}
    sizes |= {"hispanic": 2, "household_size": 7, "tenure": 3}
    out = {}
    for name, (keys, _) in DEMO_TABLES.items():
        dims = tuple(sizes[k] for k in keys)
        cell = np.ravel_multi_index(tuple(codes[k] for k in keys), dims)
        out[name] = (dims, np.bincount(cell, minlength=int(np.prod(dims))).astype(np.int64))
    return out


def noisy_demo(truth, seed: int) -> list[NoisyCounts]:
    """Noisy copies of the true tables (test data: numpy normal noise, rounded)."""
    rng = np.random.default_rng(seed)
    tables = []
    for name, (keys, variance) in DEMO_TABLES.items():
        dims, counts = truth[name]
        noise = np.rint(rng.normal(0.0, float(variance) ** 0.5, counts.size)).astype(np.int64)
        tables.append(NoisyCounts(name, keys, dims, counts + noise, variance))
    return tables


def global_problem(tables, hierarchy):
    """The plan and the top-down problem over the global least squares (the reference solve)."""
    p = plan(tables, hierarchy)
    wls = solve_wls(
        p.structures,
        [t.values for t in tables],
        [t.variance for t in tables],
        p.constraints,
        hierarchy,
    )
    return p, wls, Problem(p.structures, p.order, hierarchy, wls.estimates)
