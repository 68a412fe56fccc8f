"""The controlled rounding's solver, chosen by measurement: HiGHS against minimum-cost flows.

Usage (from the repo root):
    PYTHONPATH=. python bench/bench_postprocess_rounding.py --rounds 3

Collects the two-way rounding problems the demo's tables give the top-down step
(``bench_postprocess.demo_tables``: 3,143 counties, 51 states, one county x age-sex
table per state), then solves them, in alternating rounds (process CPU time, fastest
of ``--rounds``), with:

- HiGHS: ``rounding.controlled_round_many``, the release's solver (one dual simplex
  program per table, ``scipy.optimize.linprog``);
- primal-dual flow: ``bench_postprocess_flow.round_in_boxes``, a minimum-cost flow on
  numpy and scipy's compiled graph routines (Dijkstra, Dinic's maximum flow), every
  table in one network;
- OR-Tools' ``SimpleMinCostFlow`` on costs scaled to integers (2**20 per count), when
  ``ortools`` is importable (it is not a dependency).

Checks each solver's total |n - x| per table against HiGHS's (the same optimum within
1e-6) and prints the CPU seconds and the ratio to HiGHS.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from bench_postprocess import DEMO_COUNTIES, demo_tables
from bench_postprocess_flow import BoxRounding, round_in_boxes

import dp_pipeline.postprocess.topdown as topdown
from dp_pipeline.postprocess import make_consistent
from dp_pipeline.postprocess.rounding import SNAP, controlled_round_many

ORTOOLS_SCALE = 2.0**20  # integer cost units per count of |n - x|


def collect(seed: int):
    """The demo's two-way rounding problems, as the top-down step hands them over."""
    hierarchy, tables, _ = demo_tables(DEMO_COUNTIES, seed)
    seen = []
    solver = topdown.controlled_round_widened

    def recording(problems, *, nonnegative):
        seen.extend(problems)
        return solver(problems, nonnegative=nonnegative)

    topdown.controlled_round_widened = recording  # the bench's own hook, restored below
    try:
        make_consistent(tables, hierarchy)
    finally:
        topdown.controlled_round_widened = solver
    return seen


def strict_box(t):
    """The clipped estimates and their floor/ceil box (estimates near integers fixed)."""
    x = np.maximum(np.asarray(t.values, np.float64), 0.0)
    nearest = np.rint(x)
    snapped = np.abs(x - nearest) <= SNAP
    low = np.where(snapped, nearest, np.floor(x)).astype(np.int64)
    high = np.where(snapped, nearest, np.ceil(x)).astype(np.int64)
    return x, low, high


def flows(problems):
    asks = []
    for t in problems:
        x, low, high = strict_box(t)
        asks.append(
            BoxRounding(
                x,
                np.asarray(t.row, np.int64),
                np.asarray(t.col, np.int64),
                np.asarray(t.row_targets, np.int64),
                np.asarray(t.col_targets, np.int64),
                low,
                high,
            )
        )
    return round_in_boxes(asks)


def ortools_flows(problems):
    from ortools.graph.python import min_cost_flow

    out = []
    for t in problems:
        x, low, high = strict_box(t)
        row, col = np.asarray(t.row, np.int64), np.asarray(t.col, np.int64)
        rows = t.row_targets.size
        base = np.clip(np.rint(x).astype(np.int64), low, high)
        supply = np.concatenate(
            [
                t.row_targets - np.bincount(row, base, rows).astype(np.int64),
                np.bincount(col, base, t.col_targets.size).astype(np.int64) - t.col_targets,
            ]
        )
        up, down = np.flatnonzero(base < high), np.flatnonzero(base > low)
        cost_up = np.abs(base + 1 - x) - np.abs(base - x)
        cost_down = np.abs(base - 1 - x) - np.abs(base - x)
        solver = min_cost_flow.SimpleMinCostFlow()
        arcs = solver.add_arcs_with_capacity_and_unit_cost(
            np.concatenate([row[up], rows + col[down]]),
            np.concatenate([rows + col[up], row[down]]),
            np.ones(up.size + down.size, np.int64),
            np.rint(np.concatenate([cost_up[up], cost_down[down]]) * ORTOOLS_SCALE).astype(
                np.int64
            ),
        )
        solver.set_nodes_supplies(np.arange(supply.size), supply)
        if solver.solve() != solver.OPTIMAL:
            raise SystemExit("OR-Tools found no rounding")
        moved = solver.flows(arcs)
        n = base.copy()
        n[up] += moved[: up.size]
        n[down] -= moved[up.size :]
        out.append(n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    print("load average " + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    problems = collect(args.seed)
    cells = sum(t.values.size for t in problems)
    solvers = {
        "HiGHS (release)": lambda: controlled_round_many(problems, nonnegative=True),
        "primal-dual flow (numpy, scipy)": lambda: flows(problems),
    }
    try:
        import ortools  # noqa: F401

        solvers["OR-Tools SimpleMinCostFlow"] = lambda: ortools_flows(problems)
    except ImportError:
        print("OR-Tools: not installed (not a dependency), not measured")
    best = {name: (float("inf"), None) for name in solvers}
    for _ in range(args.rounds):
        for name, solve in solvers.items():
            started = time.process_time()
            result = solve()
            seconds = time.process_time() - started
            if seconds < best[name][0]:
                best[name] = (seconds, result)
    reference = best["HiGHS (release)"]
    print(f"{len(problems)} rounding problems, {cells:,} cells; CPU s, fastest of {args.rounds}")
    for name, (seconds, result) in best.items():
        gap = max(
            abs(float(np.abs(n - strict_box(t)[0]).sum() - np.abs(r - strict_box(t)[0]).sum()))
            for t, n, r in zip(problems, result, reference[1], strict=True)
        )
        print(
            f"{name:<34}{seconds:>8.3f} s {seconds / reference[0]:>6.2f}x HiGHS;"
            f" largest total |n - x| difference {gap:.1e}"
        )
        if gap > 1e-6:
            raise SystemExit(f"{name}: not the same optimum as HiGHS")


if __name__ == "__main__":
    main()
