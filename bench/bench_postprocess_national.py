"""Post-processing benchmark: the demo's count tables plus a national age x sex table.

Usage (from the repo root):
    PYTHONPATH=. python bench/bench_postprocess_national.py --rounds 3

The demo's five count tables at the demo's size (3143 counties, 763,876 cells;
synthetic persons and rounded normal noise as in bench_postprocess.py, test data
from numpy) and a national ``age_sex`` table (232 cells, σ² 74) are made
consistent three ways, in alternating rounds (fastest of ``--rounds``):

- per block: ``make_consistent`` as released, the states and the national block
  solved apart and combined over the 232 coupling cells (``postprocess.coupled``);
- global: one least squares over all cells (conjugate gradients), the top-down
  step and the check of every margin, what ``make_consistent`` did before
  national tables went per block;
- the demo without the national table (per state, conjugate gradients): the
  cost of the same release with no coupling.

Also timed in the same rounds: the least squares alone both ways, and the
blocks' first pass without the shape cache (each state factorizes its own
system and computes its 232 x 232 covariance, as a Spark task does). Then, for
the largest state, its covariance by the factorization against 232 conjugate
gradient runs (one per coupling cell). Then the least squares' largest
difference from the global solve, the states' sum against the national table,
and the RMSE against the truth per table of both. The load average is printed
before and after.
"""

from __future__ import annotations

import argparse
import os
from fractions import Fraction
from functools import partial

import numpy as np
from bench_postprocess import DEMO_COUNTIES, demo_tables, interleaved

from dp_pipeline.postprocess import NoisyCounts, make_consistent
from dp_pipeline.postprocess.consistent import _verify as verify
from dp_pipeline.postprocess.coupled import block_system, coupling_of
from dp_pipeline.postprocess.group_solver import group_solver
from dp_pipeline.postprocess.groups import group_hierarchy, group_structures
from dp_pipeline.postprocess.plan import Constraint, plan
from dp_pipeline.postprocess.topdown import FitOptions, Problem, group_level, run_topdown
from dp_pipeline.postprocess.wls import solve_wls


def load() -> str:
    return "load average " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def with_national(tables, truth, seed: int):
    rng = np.random.default_rng(seed + 1)  # test data only
    true = truth["state_age_sex"].reshape(-1, 232).sum(axis=0)
    noise = np.rint(rng.normal(0.0, 74**0.5, true.size)).astype(np.int64)
    national = NoisyCounts("age_sex", ("age", "sex"), (116, 2), true + noise, Fraction(74))
    return [*tables, national], {**truth, "age_sex": true}


def global_solve(tables, hierarchy, integer=True):
    p = plan(tables, hierarchy)
    wls = solve_wls(
        p.structures,
        [t.values for t in tables],
        [t.variance for t in tables],
        p.constraints,
        hierarchy,
    )
    if not integer:
        return wls.estimates
    problem = Problem(p.structures, p.order, hierarchy, list(wls.estimates))
    run_topdown(problem, FitOptions(), group_level(p))
    out = [problem.fixed[t] for t in range(len(p.structures))]
    verify(p, out, hierarchy, True)  # make_consistent's final check of every margin
    return out


def first_pass_uncached(tables, hierarchy):
    solver = group_solver(tables, hierarchy)
    columns = solver.cells([t.values for t in tables])
    order = np.argsort(columns["top"], kind="stable")
    columns = {k: v[order] for k, v in columns.items()}
    starts = np.searchsorted(columns["top"], np.arange(solver.blocks + 1))
    for b in range(solver.blocks):
        rows = [columns[k][starts[b] : starts[b + 1]] for k in ("table", "cell", "value")]
        solver.part(b, *rows)


def largest_state_covariance(tables, hierarchy):
    """The largest state's C_g: by its factorization, and by one CG run per coupling cell."""
    p = plan(tables, hierarchy)
    coupling = coupling_of(p, hierarchy)
    counties = np.bincount(hierarchy.parents[0], minlength=hierarchy.sizes[0])
    group = int(np.argmax(counties))
    sub_h, positions = group_hierarchy(hierarchy, group)
    sub_s = group_structures(p.structures, positions)
    grouped = [t for t, s in enumerate(p.structures) if s.geo_axis is not None]
    structures = [sub_s[t] for t in grouped]
    variances = [t.variance for t in tables]

    def factorized():
        return block_system(structures, grouped, variances, p, coupling, sub_h).covariance

    system = block_system(structures, grouped, variances, p, coupling, sub_h)
    own = [c for c in p.constraints if c.a in grouped and c.b in grouped]
    local = {t: k for k, t in enumerate(grouped)}
    own = [Constraint(local[c.a], local[c.b], c.margin) for c in own]
    offsets = np.cumsum([0, *(s.cells for s in structures)])
    block_variances = [variances[t] for t in grouped]

    def by_cg():
        columns = []
        for k in range(coupling.size):
            y = system.v * system.MT[:, [k]].toarray().ravel()  # V_b M_b^T e_k
            parts = [y[offsets[i] : offsets[i + 1]] for i in range(len(structures))]
            est = solve_wls(structures, parts, block_variances, own, sub_h).estimates
            columns.append(system.M @ np.concatenate(est))
        return np.stack(columns, axis=1)

    (f_s, f_c), (cg_s, cg_c) = interleaved([factorized, by_cg], 1)
    gap = float(np.max(np.abs(f_c - cg_c)))
    return int(counties[group]), sum(s.cells for s in structures), f_s, cg_s, gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each (fastest)")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    print(load())
    hierarchy, demo, truth = demo_tables(DEMO_COUNTIES, args.seed)
    tables, truth = with_national(demo, truth, args.seed)
    cells = sum(t.values.size for t in tables)
    timed = interleaved(
        [
            partial(make_consistent, tables, hierarchy),
            partial(global_solve, tables, hierarchy),
            partial(make_consistent, demo, hierarchy),
            partial(make_consistent, tables, hierarchy, nonnegative=False, integer=False),
            partial(global_solve, tables, hierarchy, integer=False),
            partial(first_pass_uncached, tables, hierarchy),
        ],
        args.rounds,
    )
    (block_s, blocks), (global_s, reference), (demo_s, _) = timed[:3]
    (cached_s, _), (global_wls_s, _), (uncached_s, _) = timed[3:]
    print(f"{cells:,} cells (the demo's 763,876 and a national age x sex table of 232)")
    print()
    print("| post-processing | s | / global |")
    print("|---|---:|---:|")
    print(f"| per block (states + national, exact) | {block_s:.3f} | {block_s / global_s:.2f} |")
    print(f"| global least squares + top-down | {global_s:.3f} | 1.00 |")
    print(
        f"| demo without the national table, per state | {demo_s:.3f} | {demo_s / global_s:.2f} |"
    )
    print(
        f"| per block, least squares only (shape cache) | {cached_s:.3f} | "
        f"{cached_s / global_s:.2f} |"
    )
    print(f"| global, least squares only | {global_wls_s:.3f} | {global_wls_s / global_s:.2f} |")
    print(
        f"| first pass, every state its own system (as on Spark) | {uncached_s:.3f} | "
        f"{uncached_s / global_s:.2f} |"
    )
    counties, state_cells, f_s, cg_s, gap = largest_state_covariance(tables, hierarchy)
    print()
    print(
        f"largest state ({counties} counties, {state_cells:,} cells): its 232 x 232 covariance "
        f"by factorization {f_s:.3f} s, by 232 CG runs {cg_s:.3f} s ({cg_s / f_s:.0f}x); "
        f"largest difference {gap:.2g}"
    )
    real = make_consistent(tables, hierarchy, nonnegative=False, integer=False)
    reals = global_solve(tables, hierarchy, integer=False)
    gap = max(
        float(np.max(np.abs(real.values[t.name] - r))) for t, r in zip(tables, reals, strict=True)
    )
    states = blocks.values["state_age_sex"].reshape(-1, 232).sum(axis=0)
    exact = np.array_equal(states, blocks.values["age_sex"])
    print(
        f"least squares vs the global solve: largest difference {gap:.2g} counts; "
        f"states sum exactly to the national table: {'yes' if exact else 'NO'}"
    )
    print()
    print("| table | RMSE noisy | RMSE global | RMSE per block | per block / global |")
    print("|---|---:|---:|---:|---:|")
    for t, ref in zip(tables, reference, strict=True):
        true = truth[t.name]
        noisy = float(np.sqrt(np.mean((t.values - true) ** 2)))
        glob = float(np.sqrt(np.mean((ref - true) ** 2)))
        mine = float(np.sqrt(np.mean((blocks.values[t.name] - true) ** 2)))
        print(f"| {t.name} | {noisy:.2f} | {glob:.2f} | {mine:.2f} | {mine / glob:.3f} |")
    print(load())


if __name__ == "__main__":
    main()
