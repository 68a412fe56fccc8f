"""Report accuracy benchmark: the exact, batched `TableAccuracy` against whole-table numpy.

Usage (from the repo root):
    PYTHONPATH=. python bench/bench_report.py --cells 1000000,10000000 --rounds 2

For each size, a post-processed county x sex x age x part table (the demo's 3143
counties rolled up to 51 states; ``part`` scales the cells) with made-up truth and
noise (test data from numpy) is summarized three ways, in alternating rounds:

* baseline: the whole table's numpy formulas (float64 errors, means, RMSE, the
  geography margins by reshape and roll-up, the two error histograms), which need
  the whole table in memory;
* ``TableAccuracy`` given the table as one batch (the driver path);
* ``TableAccuracy`` given it in batches of ``--batch`` rows (a streamed table).

Prints the fastest round of each, the ratios against the baseline, that the three
agree (summary figures and histogram counts), and the bytes the accumulator keeps
after the last batch (tracemalloc) against the table's own size. The load average
is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.report.accuracy import TableAccuracy
from dp_pipeline.release.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
AGES = 116

SPEC = """
[release]
id = "bench-report"
[population]
name = "bench"
cap = {{ epsilon = 8, delta = 1e-8 }}
[privacy_unit]
column = "person_id"
[budget]
epsilon = 2
delta = 1e-9
[output]
dir = "{tmp}/out"
[run]
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"
[domains]
county = {{ start = 1, stop = 3143 }}
state = {{ start = 1, stop = 51 }}
sex = ["F", "M"]
age = {{ start = 0, stop = 115 }}
part = {{ start = 1, stop = {parts} }}
[hierarchy]
levels = ["state", "county"]
mapping = "counties.csv"
[postprocess]
consistent = true
[[tables]]
name = "county_sex_age"
keys = ["county", "sex", "age", "part"]
share = "1"
"""


def make_plan(folder: Path, parts: int):
    shutil.copy(ROOT / "conf" / "census_demo_counties.csv", folder / "counties.csv")
    (folder / "bench.toml").write_text(SPEC.format(tmp=folder, parts=parts))
    plan = plan_release(load_spec(folder / "bench.toml"))
    return plan, plan.tables[0]


def make_table(plan, cells: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    domains = plan.spec.domains
    keys = ["county", "sex", "age", "part"]
    sizes = [len(domains[k]) for k in keys]
    index = np.indices(sizes).reshape(len(keys), -1)
    frame = pd.DataFrame({k: np.asarray(domains[k])[index[i]] for i, k in enumerate(keys)}).iloc[
        :cells
    ]
    truth = rng.poisson(1.3, len(frame)).astype(np.int64)
    raw = truth + np.rint(rng.normal(0, 4.3, len(frame))).astype(np.int64)
    frame["value"] = np.maximum(raw + rng.integers(-2, 3, len(frame)), 0)
    frame["raw_value"] = raw
    frame["true_value"] = truth
    return frame


def whole_table(plan, table_plan, frame: pd.DataFrame) -> dict:
    """The numpy formulas over the whole table at once (needs every cell in memory)."""
    truth = frame["true_value"].to_numpy(np.int64)
    parents = np.asarray(plan.spec.hierarchy.parents[0])
    shape = [len(plan.spec.domains[k]) for k in table_plan.table.keys]
    result, errors = {}, {}
    for label, column in (("consistent", "value"), ("raw", "raw_value")):
        error = frame[column].to_numpy(np.float64) - truth
        errors[label] = error
        by_county = error.reshape(shape).sum(axis=(1, 2, 3))
        by_state = np.zeros(parents.max() + 1)
        np.add.at(by_state, parents, by_county)
        result[label] = {
            "mean_abs_error": float(np.abs(error).mean()),
            "rmse": float(np.sqrt((error**2).mean())),
            "max_abs_error": float(np.abs(error).max()),
            "within_margin": float((np.abs(error) <= table_plan.margin_of_error).mean()),
            "national_abs_error": float(abs(error.sum())),
            "state_rmse": float(np.sqrt((by_state**2).mean())),
        }
    edges = np.histogram_bin_edges(np.concatenate(list(errors.values())), bins=60)
    for label, error in errors.items():
        result[label]["histogram"] = np.histogram(error, bins=edges)[0]
    return result


def streamed(plan, table_plan, frame: pd.DataFrame, batch: int) -> dict:
    accuracy = TableAccuracy(plan, table_plan)
    for start in range(0, len(frame), batch):
        accuracy.add(frame.iloc[start : start + batch])
    return figures_of(accuracy)


def figures_of(accuracy: TableAccuracy) -> dict:
    row, histogram = accuracy.summary(), accuracy.histogram()
    result = {}
    for label in ("consistent", "raw"):
        figures = dict(row if label == "consistent" else row["raw"])
        figures = {k: figures[k] for k in ("mean_abs_error", "rmse", "within_margin")}
        figures["max_abs_error"] = float(
            row["max_abs_error"] if label == "consistent" else row["raw"]["max_abs_error"]
        )
        figures.update(row["margins"][label])
        figures["histogram"] = histogram[label]
        result[label] = figures
    return result


def same(one: dict, other: dict) -> bool:
    for label in one:
        for key, value in one[label].items():
            if not np.array_equal(np.asarray(value), np.asarray(other[label][key])):
                return False
    return True


def retained_bytes(plan, table_plan, frame: pd.DataFrame, batch: int) -> int:
    """Bytes the accumulator holds after its last batch (the batches themselves freed)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    accuracy = TableAccuracy(plan, table_plan)
    for start in range(0, len(frame), batch):
        accuracy.add(frame.iloc[start : start + batch])
    accuracy._tallies["consistent"].distribution()  # compact what is pending
    accuracy._tallies["raw"].distribution()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del accuracy
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="1000000,10000000")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=65536)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    print(
        "| cells | whole-table numpy (s) | TableAccuracy, 1 batch | "
        f"TableAccuracy, {args.batch:,}-row batches | same figures | kept bytes / table bytes |"
    )
    print("|---:|---:|---:|---:|:---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for cells in (int(c) for c in args.cells.split(",")):
            parts = -(-cells // (3143 * 2 * AGES))
            plan, table_plan = make_plan(Path(tmp), parts)
            frame = make_table(plan, 3143 * 2 * AGES * parts)
            cells = len(frame)
            best = {"whole": np.inf, "one": np.inf, "batches": np.inf}
            results = {}
            for _ in range(args.rounds):
                for name, batch in (("whole", 0), ("one", len(frame)), ("batches", args.batch)):
                    started = time.perf_counter()
                    results[name] = (
                        streamed(plan, table_plan, frame, batch)
                        if batch
                        else whole_table(plan, table_plan, frame)
                    )
                    best[name] = min(best[name], time.perf_counter() - started)
            agree = same(results["whole"], results["one"]) and same(
                results["whole"], results["batches"]
            )
            kept = retained_bytes(plan, table_plan, frame, args.batch)
            table_bytes = int(frame.memory_usage(index=False, deep=True).sum())
            print(
                f"| {cells:,} | {best['whole']:.2f} | {best['one'] / best['whole']:.2f}× | "
                f"{best['batches'] / best['whole']:.2f}× | {'yes' if agree else 'NO'} | "
                f"{kept:,} / {table_bytes:,} |"
            )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
