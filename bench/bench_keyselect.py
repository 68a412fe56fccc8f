"""Private key selection: keys kept by each policy at equal (ε, δ), and by PipelineDP.

Run: PYTHONPATH=. python bench/bench_keyselect.py [--units N] [--seed S] \
         [--pipelinedp-python PDP/bin/python]   (repository root)

Data (numpy, test data only): N units; unit u holds k_u distinct keys with
P[k_u = k] ∝ k^-2 (k = 1..200, most units hold one or two keys, a few hold many), each
key drawn from a Zipf(1.3) law over the integers (a long tail of rare keys).

For each noise, max_cells m and ε (δ = 1e-6, add/remove), every policy bounds the data
the same way (each unit keeps m of its keys, keyed rule) and the tables give the
EXPECTED number of keys kept, Σ_k π(c_k) over the data's keys, with π the exact release
probability of each plan (`dp_pipeline.keyselect.decisions.release_probability`, the
midpoint of its bracket: no sampling noise in the comparison):

- Laplace: the threshold policy (untruncated, scale m/ε), the truncated geometric per
  key (scale m/ε, 1 - (1 - P(K))^m <= δ), the default (`plan_selection`'s choice: the
  smaller threshold), the weighted policy, and PipelineDP 0.3's own π (PyDP's
  ``probability_of_keep`` for ``select_partitions`` at (ε, δ) with
  ``max_partitions_contributed = m``: a truncated geometric per key at (ε/m, δ/m)),
  from its virtualenv via `bench/pipelinedp_select.py` when ``--pipelinedp-python`` is
  given; the last column is default/PipelineDP;
- Gaussian: the threshold and the weighted policy.

The last line times one real selection (pandas, per-key streams) for each policy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.keyselect.counts import bounded_pairs
from dp_pipeline.keyselect.decisions import release_probability
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.mechanism import select_keys
from dp_pipeline.keyselect.plan import plan_selection
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
    """Σ_k π(total_k) over the candidate keys (midpoints of exact brackets)."""
    kept = 0.0
    for total, how_many in Counter(totals[totals > 0].tolist()).items():
        low, high = release_probability(plan, total, 64)
        kept += how_many * float((low + high) / 2)
    return kept


def pipelinedp_kept(python: str, epsilon: Fraction, m: int, counts: np.ndarray) -> float:
    """Σ_k π(c_k) with PipelineDP's own π (its virtualenv, `bench/pipelinedp_select.py`)."""
    largest = int(counts.max())
    out = subprocess.run(
        [
            python,
            str(Path(__file__).with_name("pipelinedp_select.py")),
            "--probabilities",
            repr(float(epsilon)),
            repr(float(DELTA)),
            str(m),
            str(largest),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    keep = np.array(json.loads(out.stdout.strip().splitlines()[-1]))
    present = counts[counts > 0]
    return float(keep[present].sum())


def laplace_table(df, salt, selection, pipelinedp: str | None) -> None:
    print(
        "| max_cells | epsilon | threshold tau | kept | truncated tau | kept | default "
        "| weighted kept | PipelineDP kept | default/PipelineDP |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in (1, 2, 4, 8, 32):
        pairs = bounded_pairs(
            df, key="key", privacy_unit="unit", max_cells=m, salt=salt, selection_key=selection
        )
        counts = np.bincount(pairs.key, minlength=len(pairs.uniques))
        for epsilon in (Fraction(1, 2), Fraction(1), Fraction(2)):
            common = dict(noise="laplace", epsilon=epsilon, delta=DELTA, max_cells=m)
            threshold = plan_selection(**common, policy="threshold")
            truncated = plan_selection(**common, policy="truncated_geometric")
            chosen = plan_selection(**common)
            weighted = plan_weighted_selection(**common)
            totals = weighted_totals(pairs.unit, pairs.key, len(pairs.uniques), weighted.weights)
            kept_chosen = expected_kept(chosen, counts)
            theirs = pipelinedp_kept(pipelinedp, epsilon, m, counts) if pipelinedp else None
            ratio = f"{kept_chosen / theirs:.3f}" if theirs else "-"
            print(
                f"| {m} | {epsilon} | {threshold.threshold} | "
                f"{expected_kept(threshold, counts):.1f} | {truncated.threshold} | "
                f"{expected_kept(truncated, counts):.1f} | {chosen.policy} | "
                f"{expected_kept(weighted, totals):.1f} | "
                f"{'-' if theirs is None else f'{theirs:.1f}'} | {ratio} |"
            )


def gaussian_table(df, salt, selection) -> None:
    print(
        "| max_cells | epsilon | uniform tau | uniform kept | weighted tau "
        "| weighted kept | weighted/uniform |"
    )
    print("|---|---|---|---|---|---|---|")
    for m in (2, 8, 32):
        pairs = bounded_pairs(
            df, key="key", privacy_unit="unit", max_cells=m, salt=salt, selection_key=selection
        )
        counts = np.bincount(pairs.key, minlength=len(pairs.uniques))
        for epsilon in (Fraction(1, 2), Fraction(1), Fraction(2)):
            uniform = plan_selection(noise="gaussian", epsilon=epsilon, delta=DELTA, max_cells=m)
            weighted = plan_weighted_selection(
                noise="gaussian", epsilon=epsilon, delta=DELTA, max_cells=m
            )
            totals = weighted_totals(pairs.unit, pairs.key, len(pairs.uniques), weighted.weights)
            kept_u = expected_kept(uniform, counts)
            kept_w = expected_kept(weighted, totals)
            print(
                f"| {m} | {epsilon} | {uniform.threshold} | {kept_u:.1f} | "
                f"{weighted.threshold} | {kept_w:.1f} | {kept_w / kept_u:.2f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pipelinedp-python", help="python of a venv with pipeline-dp 0.3")
    args = parser.parse_args()
    df = dataset(args.units, args.seed)
    master = MasterKey(bytes(range(100, 132)))
    selection = SelectionKey.derive(master, "bench", "keys")
    salt = BoundingSalt.derive(master, "bench", "keys")
    print(
        f"{args.units} units, {len(df)} rows, {df['key'].nunique()} distinct keys "
        f"(delta = 1e-6, add/remove)\n"
    )
    laplace_table(df, salt, selection, args.pipelinedp_python)
    print()
    gaussian_table(df, salt, selection)
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
