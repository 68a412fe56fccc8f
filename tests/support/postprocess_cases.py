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


# A skewed geography's tables: name -> (keys, σ² of the discrete Gaussian noise). The
# demo's shape (a county table by age and sex, state tables) with a near-exact
# county x sex table and a very noisy state x sex table.
SKEWED_TABLES = {
    "county_age_sex": (("county", "age", "sex"), Fraction(37, 2)),
    "state_age_sex": (("state", "age", "sex"), Fraction(74)),
    "county_sex": (("county", "sex"), Fraction(1, 4)),
    "state_sex": (("state", "sex"), Fraction(2000)),
}
SKEWED_AGES = 6


def skewed_geography(
    states: int = 40, empty: int = 3, counties: int = 1500, seed: int = 0
) -> tuple[Hierarchy, np.ndarray]:
    """A geography nobody tuned to, and its true persons per county and (age, sex) cell.

    ``empty`` states have no person; three states have a single county; county sizes
    are heavy-tailed, about half of the counties under 20 persons; in the most
    populous state one county holds 40% of the state. Returns the hierarchy and the
    true counts (counties x SKEWED_AGES x 2, int64). Test data (numpy's generator).
    """
    rng = np.random.default_rng(seed)
    weights = rng.pareto(1.1, states) + 0.05
    per_state = np.maximum(1, np.floor(weights / weights.sum() * (counties - states)).astype(int))
    per_state[empty : empty + 3] = 1  # single-county states
    per_state[np.argmax(per_state)] += counties - per_state.sum()
    parent = np.repeat(np.arange(states), per_state)
    persons = np.maximum(1, np.rint(rng.lognormal(np.log(20.0), 1.7, counties))).astype(np.int64)
    persons[parent < empty] = 0
    big = int(np.argmax(np.bincount(parent, persons, states)))
    members = np.flatnonzero(parent == big)
    others = persons[members[1:]].sum()
    persons[members[0]] = round(others * 2 / 3)  # 40% of its state
    shares = rng.dirichlet(np.full(SKEWED_AGES * 2, 4.0))
    cells = np.stack([rng.multinomial(n, shares) for n in persons])
    hierarchy = Hierarchy(("state", "county"), (states, counties), (parent,))
    return hierarchy, cells.reshape(counties, SKEWED_AGES, 2).astype(np.int64)


def skewed_truth(hierarchy: Hierarchy, cells: np.ndarray) -> dict[str, np.ndarray]:
    """The true tables of `SKEWED_TABLES` (C order) from the county x age x sex counts."""
    states = hierarchy.sizes[0]
    parent = hierarchy.parents[0]
    by_state = np.zeros((states, *cells.shape[1:]), dtype=np.int64)
    np.add.at(by_state, parent, cells)
    return {
        "county_age_sex": cells.reshape(-1),
        "state_age_sex": by_state.reshape(-1),
        "county_sex": cells.sum(axis=1).reshape(-1),
        "state_sex": by_state.sum(axis=1).reshape(-1),
    }


def discrete_gaussian_sample(rng: np.random.Generator, sigma2: Fraction, size: int) -> np.ndarray:
    """Test data: N_Z(0, σ²) by inverse transform on its pmf (numpy's generator, not a
    noise path)."""
    sigma = float(sigma2) ** 0.5
    support = np.arange(-int(14 * sigma) - 3, int(14 * sigma) + 4)
    pmf = np.exp(-(support.astype(np.float64) ** 2) / (2 * float(sigma2)))
    cdf = np.cumsum(pmf / pmf.sum())
    return support[np.minimum(np.searchsorted(cdf, rng.random(size)), support.size - 1)]
