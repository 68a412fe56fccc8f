"""First-query and later-query CPU time of the accountant on fixed plans.

Run: PYTHONPATH=. python bench/bench_accounting_queries.py   (from the repository root)

For every named plan of the tests (tests/support/accounting_plans.py: single mechanisms,
selections beside other families, the audited plans, reference mixtures, seeded release
plans) and the release plans of seeds 0-15: the CPU seconds of the first query, ε(1e-6),
on a fresh accountant (it builds the composition's paths), and the slowest of the later
queries on the same accountant (δ(1), ε(1e-10), δ(2), ε(1e-30)). CPU time, not wall
clock, so that load from other processes moves the figures less. Prints a Markdown table,
then the slowest first and later query and the totals.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from accounting_plans import named_plans, random_release_plan

from dp_pipeline.errors import DPError

LATER = (("delta", 1.0), ("epsilon", 1e-10), ("delta", 2.0), ("epsilon", 1e-30))


def _cpu(function) -> float:
    """CPU seconds of ``function()``; a query that raises (a `DPError`) is timed too: its
    time until the error is what it cost."""
    start = time.process_time()
    try:
        function()
    except DPError as error:
        print(f"  ({type(error).__name__}: {error})", flush=True)
    return time.process_time() - start


def main() -> None:
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores)\n")
    plans = dict(named_plans())
    for seed in range(6, 16):
        plans[f"release-{seed}"] = lambda seed=seed: random_release_plan(seed)
    print("| plan | first query s | slowest later query s |")
    print("|---|---|---|")
    first_total = later_total = 0.0
    worst_first = worst_later = (0.0, "")
    for name, build in sorted(plans.items()):
        accountant = build()
        first = _cpu(lambda accountant=accountant: accountant.epsilon(1e-6))
        later = max(
            _cpu(lambda kind=kind, x=x, a=accountant: getattr(a, kind)(x)) for kind, x in LATER
        )
        print(f"| {name} | {first:.3f} | {later:.3f} |", flush=True)
        first_total, later_total = first_total + first, later_total + later
        worst_first = max(worst_first, (first, name))
        worst_later = max(worst_later, (later, name))
    print(f"\nslowest first query: {worst_first[1]} {worst_first[0]:.3f} s CPU")
    print(f"slowest later query: {worst_later[1]} {worst_later[0]:.3f} s CPU")
    print(f"totals: first {first_total:.3f} s, later (slowest each) {later_total:.3f} s")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
