"""Benchmark: the share of a release's time spent before reading (key, listing, fingerprint,
identity, ledger reservation).

    PYTHONPATH=. python bench/bench_setup_phase.py --persons 100000000 \
        --cache /dev/shm/dp_setup --master 'local[2]'

Generates the synthetic census sample once into ``--cache`` (not timed), then runs
the demo release of conf/census_demo.toml on it as a real input (``--input``), with
a fresh ledger and key under the cache folder, and prints the run's phase timings
and ``setup / total``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dp_pipeline.datasets.synthetic import cached_census_sample
from dp_pipeline.release.run import Progress, apply_overrides, run_release
from dp_pipeline.release.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--persons", type=int, default=100_000_000)
    parser.add_argument("--cache", default=str(ROOT / ".bench_cache"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--spec", default=str(ROOT / "conf" / "census_demo.toml"))
    arguments = parser.parse_args()
    progress = Progress()
    input_path = cached_census_sample(arguments.cache, arguments.persons, 2026, progress)
    size = sum(p.stat().st_size for p in Path(input_path).rglob("*") if p.is_file())
    if Path(input_path).is_file():
        size = Path(input_path).stat().st_size
    progress(f"input {input_path}: {size / 2**30:.2f} GiB")
    with tempfile.TemporaryDirectory(dir=arguments.cache) as scratch:
        spec = apply_overrides(
            load_spec(arguments.spec),
            input_path=str(input_path),
            output_dir=f"{scratch}/out",
            ledger_path=f"{scratch}/ledger.sqlite",
            key_file=f"{scratch}/master.key",
            master=arguments.master,
            engine="spark",
            release_id=f"setup-bench-{int(time.time())}",
        )
        result = run_release(spec, progress=progress)
    timings = result.timings
    print({name: round(seconds, 2) for name, seconds in timings.items()})
    print(
        f"setup {timings['setup']:.2f} s of {timings['total']:.2f} s "
        f"({100 * timings['setup'] / timings['total']:.1f}%); fingerprint "
        f"{timings.get('fingerprint', 0):.2f} s"
    )


if __name__ == "__main__":
    main()
