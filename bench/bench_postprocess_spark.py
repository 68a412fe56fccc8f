"""Post-processing on Spark, one task per state, against the driver.

Usage (from the repo root; one size at a time on a shared machine):
    PYTHONPATH=. python bench/bench_postprocess_spark.py --cells 1000000 --rounds 2
    PYTHONPATH=. python bench/bench_postprocess_spark.py --cells 10000000 --rounds 2
    PYTHONPATH=. python bench/bench_postprocess_spark.py --cells 1000000 --rounds 2 --national

The demo's five count tables at the given size (bench_postprocess.demo_tables:
county count scaled, synthetic persons and rounded normal noise, test data
only). In alternating rounds (fastest of ``--rounds``): the global least
squares then top-down (the solve before it was split by state, the baseline),
`make_consistent` (per state, on the driver) and the Spark path (the cells as a
DataFrame, both grouped passes, every table read back one at a time) on a
local session of ``--cores`` cores. Checks the Spark integers equal the
driver's bit for bit, and prints the RMSE against the truth of the global and
per-state solutions. ``--national`` adds a national age x sex table (232 cells,
σ² 74; bench_postprocess_national.with_national): the states and the national block
are then combined over its margin (postprocess/coupled.py) on both paths.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from bench_postprocess import counties_for, demo_tables
from bench_postprocess_national import with_national

from dp_pipeline.postprocess import make_consistent
from dp_pipeline.postprocess.group_solver import group_solver
from dp_pipeline.postprocess.plan import plan
from dp_pipeline.postprocess.topdown import (
    FitOptions,
    Problem,
    group_level,
    run_topdown,
)
from dp_pipeline.postprocess.wls import solve_wls


def global_solve(tables, hierarchy):
    p = plan(tables, hierarchy)
    wls = solve_wls(
        p.structures,
        [t.values for t in tables],
        [t.variance for t in tables],
        p.constraints,
        hierarchy,
    )
    problem = Problem(p.structures, p.order, hierarchy, wls.estimates)
    run_topdown(problem, FitOptions(), group_level(p))
    return {t.name: problem.fixed[i] for i, t in enumerate(tables)}


def spark_solve(spark, tables, hierarchy):
    from dp_pipeline.engines.spark.postprocess import consistent_tables

    solver = group_solver(tables, hierarchy)
    values = dict(consistent_tables(spark, solver, [t.values for t in tables]))
    return {t.name: values[i] for i, t in enumerate(tables)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--driver-memory", default="2g", help="the Spark JVM's heap")
    parser.add_argument("--national", action="store_true", help="add a national age x sex table")
    parser.add_argument(
        "--skip-global",
        action="store_true",
        help="no global solve (less driver memory); the per-state driver run is the baseline",
    )
    args = parser.parse_args()
    from dp_pipeline.spark import local_session

    spark = local_session(args.cores, driver_memory=args.driver_memory)
    counties = counties_for(args.cells)
    hierarchy, tables, truth = demo_tables(counties, args.seed)
    if args.national:
        tables, truth = with_national(tables, truth, args.seed)
    cells = sum(t.values.size for t in tables)
    runs = {
        "global least squares + top-down (driver, baseline)": lambda: global_solve(
            tables, hierarchy
        ),
        "per state (driver, make_consistent)": lambda: make_consistent(tables, hierarchy).values,
        f"per state (Spark local[{args.cores}], one task per state)": lambda: spark_solve(
            spark, tables, hierarchy
        ),
    }
    if args.skip_global:
        del runs[next(iter(runs))]
    best = {name: (float("inf"), None) for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            out = run()
            elapsed = time.perf_counter() - t0
            if elapsed < best[name][0]:
                best[name] = (elapsed, out)
    load = os.getloadavg()
    base = next(iter(best.values()))[0]
    print(f"{cells:,} cells, {counties:,} counties, 51 states; load {load[0]:.2f} {load[1]:.2f}")
    print(f"| path | s (fastest of {args.rounds}) | / baseline |")
    print("|---|---:|---:|")
    for name, (seconds, _) in best.items():
        print(f"| {name} | {seconds:.2f} | {seconds / base:.2f} |")
    *_, (_, driver), (_, on_spark) = best.values()
    reference = next(iter(best.values()))[1]
    same = all(np.array_equal(driver[t.name], on_spark[t.name]) for t in tables)
    print(f"\nSpark integers equal the driver's bit for bit: {same}")
    print("\n| table | RMSE noisy | RMSE baseline | RMSE per state | per state / baseline |")
    print("|---|---:|---:|---:|---:|")
    for t in tables:
        true = truth[t.name]

        def rmse(x, true=true):
            return float(np.sqrt(np.mean((x - true) ** 2)))

        g, s = rmse(reference[t.name]), rmse(driver[t.name])
        print(f"| {t.name} | {rmse(t.values):.3f} | {g:.3f} | {s:.3f} | {s / g:.4f} |")
    spark.stop()
    if not same:
        raise SystemExit("the Spark path differs from the driver")


if __name__ == "__main__":
    main()
