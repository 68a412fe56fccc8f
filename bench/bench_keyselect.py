"""Private key selection: keys kept by the uniform and the weighted policy at equal (ε, δ).

Run: PYTHONPATH=. python bench/bench_keyselect.py [--units N] [--seed S]   (repository root)

Data (numpy, test data only): N units; unit u holds k_u distinct keys with
P[k_u = k] ∝ k^-2 (k = 1..200, most units hold one or two keys, a few hold many), each
key drawn from a Zipf(1.3) law over the integers (a long tail of rare keys).

For each noise (Laplace, Gaussian), max_cells m and ε (δ = 1e-6, add/remove), both
policies bound the data the same way (each unit keeps m of its keys, keyed rule) and the
table gives the EXPECTED number of keys kept, Σ_k P[c_k + Z >= τ] over the data's keys
(exact tail brackets of `dp_pipeline.keyselect.tails`, their midpoint: no sampling
noise in the comparison), the threshold of each, and the ratio weighted/uniform.
The last line times one real selection (pandas, per-key streams) for each policy.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.keyselect.counts import bounded_pairs
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.mechanism import select_keys
from dp_pipeline.keyselect.plan import plan_selection
from dp_pipeline.keyselect.tails import GaussianTails, laplace_tail
from dp_pipeline.keyselect.weighted import (
    plan_weighted_selection,
    select_weighted_keys,
    weighted_totals,
)
from dp_pipeline.randomness import MasterKey

DELTA = Fraction(1, 10**6)


def dataset(units: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sizes = np.arange(1, 201)
    law = 1.0 / sizes.astype(float) ** 2
    per_unit = rng.choice(sizes, size=units, p=law / law.sum())
    unit = np.repeat(np.arange(units), per_unit)
    key = rng.zipf(1.3, unit.size)
    return pd.DataFrame({"unit": unit, "key": key})


def expected_kept(plan, totals: np.ndarray) -> float:
    """Σ_k P[total_k + Z >= τ] over the candidate keys (midpoints of exact brackets)."""
    tails = GaussianTails(plan.sigma2) if plan.noise == "gaussian" else None
    kept = 0.0
    for total, how_many in Counter(totals[totals > 0].tolist()).items():
        k = plan.threshold - total
        low, high = tails.tail(k) if tails else laplace_tail(plan.scale, k)
        kept += how_many * float((low + high) / 2)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    df = dataset(args.units, args.seed)
    master = MasterKey(bytes(range(100, 132)))
    selection = SelectionKey.derive(master, "bench", "keys")
    salt = BoundingSalt.derive(master, "bench", "keys")
    print(
        f"{args.units} units, {len(df)} rows, {df['key'].nunique()} distinct keys "
        f"(delta = 1e-6, add/remove)\n"
    )
    print(
        "| noise | max_cells | epsilon | uniform tau | uniform kept | weighted tau "
        "| weighted kept | weighted/uniform |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for noise in ("laplace", "gaussian"):
        for m in (2, 8, 32):
            pairs = bounded_pairs(
                df,
                key="key",
                privacy_unit="unit",
                max_cells=m,
                salt=salt,
                selection_key=selection,
            )
            counts = np.bincount(pairs.key, minlength=len(pairs.uniques))
            for epsilon in (Fraction(1, 2), Fraction(1), Fraction(2)):
                uniform = plan_selection(noise=noise, epsilon=epsilon, delta=DELTA, max_cells=m)
                weighted = plan_weighted_selection(
                    noise=noise, epsilon=epsilon, delta=DELTA, max_cells=m
                )
                totals = weighted_totals(
                    pairs.unit, pairs.key, len(pairs.uniques), weighted.weights
                )
                kept_u = expected_kept(uniform, counts)
                kept_w = expected_kept(weighted, totals)
                print(
                    f"| {noise} | {m} | {epsilon} | {uniform.threshold} | {kept_u:.1f} | "
                    f"{weighted.threshold} | {kept_w:.1f} | {kept_w / kept_u:.2f} |"
                )
    m = 8
    uniform = plan_selection(noise="gaussian", epsilon=1, delta=DELTA, max_cells=m)
    weighted = plan_weighted_selection(noise="gaussian", epsilon=1, delta=DELTA, max_cells=m)
    start = time.perf_counter()
    kept_u = select_keys(
        df, key="key", privacy_unit="unit", plan=uniform, selection_key=selection, salt=salt
    )
    middle = time.perf_counter()
    kept_w = select_weighted_keys(
        df, key="key", privacy_unit="unit", plan=weighted, selection_key=selection, salt=salt
    )
    end = time.perf_counter()
    print(
        f"\none real selection (gaussian, max_cells={m}, epsilon=1): uniform kept "
        f"{kept_u.keys.size} keys in {middle - start:.1f} s, weighted kept {kept_w.keys.size} "
        f"in {end - middle:.1f} s"
    )


if __name__ == "__main__":
    main()
