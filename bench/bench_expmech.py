"""Benchmark: exact base-2 exponential mechanism vs a naive float implementation.

Ilvento (2020, Section 4) outcome-size test: O = {0, ..., n-1}, u(o) = o,
utilities clamped to the full range [0, n-1] (so the exact weights need
about y·z·n bits), ε = 1 (Δu = 1, not monotone). For each n we time one
complete sample (utility conversion, exact weight tree, >= k = 20 passes)
of the default mechanism, of the optimized batch variant, and of the naive
floating-point mechanism (numpy exp, cumulative sum, one float draw) in the
same run, and print a Markdown table with the ratios.

Run: PYTHONPATH=. python bench/bench_expmech.py [--sizes 1000,75000] [--reps 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from dp_pipeline import BaseTwoExponential, MasterKey
from dp_pipeline.randomness import derive_stream


def naive_float_sample(utilities: np.ndarray, eta: float, rng: np.random.Generator) -> int:
    """The textbook float mechanism (vulnerable to floating-point attacks; baseline only)."""
    weights = np.exp(-eta * math.log(2) * utilities)
    cumulative = np.cumsum(weights)
    return int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))


def timed(function, reps: int) -> tuple[float, float]:
    """(median wall seconds, minimum CPU seconds) of ``reps`` calls."""
    walls, cpus = [], []
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), min(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000,25000,50000,75000")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epsilon", default="1")
    args = parser.parse_args()
    stream = derive_stream(MasterKey(bytes(32)), "bench_expmech")
    rng = np.random.default_rng(0)  # baseline only
    print(f"ε = {args.epsilon}, Δu = 1, not monotone, k = 20; reps = {args.reps}")
    print()
    print(
        "| n | bits/weight | exact wall s | exact CPU s | optimized wall s | naive float s "
        "| exact / naive (wall) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        utilities = np.arange(n, dtype=np.int64)
        exact = BaseTwoExponential(args.epsilon, utility_bounds=(0, n - 1))
        fast = BaseTwoExponential(args.epsilon, utility_bounds=(0, n - 1), optimized=True)
        eta = -math.log2(float(exact.base))
        bits = exact.base_denominator_bits * exact.base_power * n
        exact_wall, exact_cpu = timed(lambda e=exact, u=utilities: e.sample(u, stream), args.reps)
        fast_wall, _ = timed(lambda f=fast, u=utilities: f.sample(u, stream), args.reps)
        float_utilities = utilities.astype(float)
        naive_wall, _ = timed(
            lambda u=float_utilities, h=eta: naive_float_sample(u, h, rng),
            max(args.reps, 10),
        )
        print(
            f"| {n} | {bits} | {exact_wall:.3f} | {exact_cpu:.3f} | {fast_wall:.3f} "
            f"| {naive_wall:.5f} | {exact_wall / naive_wall:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
