"""Import time of ``import dp_pipeline`` (what registering ``df.dp`` costs) and ``import pandas``.

Run: PYTHONPATH=. python bench/bench_import.py   (from the repository root)
Prints one Markdown row: the median over ``--runs`` fresh interpreters (default 7) of the
wall-clock seconds of ``import pandas`` and of ``import dp_pipeline`` (pandas included),
their ratio, and how many dp_pipeline modules the import loaded. Each import runs in its
own interpreter, so nothing is cached in memory; the ratio is what machine load moves least.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

_TIMED = """
import sys, time
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
print(elapsed, sum(name.startswith("dp_pipeline") for name in sys.modules))
"""


def timed_import(module: str) -> tuple[float, int]:
    """Seconds to import ``module`` in a fresh interpreter, and the dp_pipeline modules loaded."""
    output = subprocess.run(
        [sys.executable, "-c", _TIMED.format(module=module)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    ).stdout.split()
    return float(output[0]), int(output[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    pandas = statistics.median(timed_import("pandas")[0] for _ in range(runs))
    ours = [timed_import("dp_pipeline") for _ in range(runs)]
    seconds = statistics.median(elapsed for elapsed, _ in ours)
    print("| import pandas (s) | import dp_pipeline (s) | ratio | dp_pipeline modules |")
    print("|---|---|---|---|")
    print(f"| {pandas:.3f} | {seconds:.3f} | {seconds / pandas:.2f} | {ours[0][1]} |")


if __name__ == "__main__":
    main()
