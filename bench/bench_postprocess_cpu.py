"""CPU seconds of the demo release's post-processing on the driver, for A/B runs of two trees.

Usage (from the repo root; run it with each tree's PYTHONPATH in turn, alternating):
    PYTHONPATH=. python bench/bench_postprocess_cpu.py --rounds 6

The demo's five count tables (`bench_postprocess.demo_tables`, 3,143 counties,
763,876 cells) through ``make_consistent`` with the demo's options (non-negative
integers) and, where the tree has it, ``value_margin`` of each table: what the
release's post-processing phase computes on the driver. Process CPU time
(``time.process_time``: less sensitive to a loaded machine than wall time), the
first round a warm-up; prints the fastest and the median of the others. Imports
``dp_pipeline`` from PYTHONPATH only, so the same script times any tree.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

import numpy as np

from dp_pipeline.postprocess import make_consistent

try:  # a tree before the margin of error of ``value`` has none
    from dp_pipeline.release.tables.consistency import value_margin
except ImportError:
    value_margin = None


def _demo_tables():
    # bench_postprocess.py beside this file: its synthetic tables, whatever the tree.
    path = Path(__file__).resolve().with_name("bench_postprocess.py")
    spec = importlib.util.spec_from_file_location("bench_postprocess", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.demo_tables(3143, 2026)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds, the first a warm-up")
    args = parser.parse_args()
    hierarchy, tables, _ = _demo_tables()
    seconds = []
    for _ in range(args.rounds):
        started = time.process_time()
        solved = make_consistent(tables, hierarchy)
        if value_margin is not None and getattr(solved, "least_squares", None):
            for name, values in solved.values.items():
                value_margin(10.0, values, solved.least_squares[name], True, True)
        seconds.append(time.process_time() - started)
    import dp_pipeline

    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print(
        f"{Path(dp_pipeline.__file__).parents[1]}: CPU s fastest {min(seconds[1:]):.3f}, "
        f"median {float(np.median(seconds[1:])):.3f} ({args.rounds - 1} rounds; load {load})"
    )


if __name__ == "__main__":
    main()
