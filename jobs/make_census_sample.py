"""Write deterministic synthetic census microdata (any size) to Parquet.

    python jobs/make_census_sample.py --persons 10000000 --out data/census_10m.parquet

Test data only (numpy Generator): the same (persons, seed) always gives the
same file, and a larger sample starts with the rows of a smaller one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dp_pipeline.datasets.synthetic import write_census_sample


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=1_000_000, help="rows (persons)")
    parser.add_argument("--seed", type=int, default=2026, help="generator seed")
    parser.add_argument("--out", required=True, help="output Parquet file")
    arguments = parser.parse_args(argv)
    if arguments.persons < 1:
        parser.error(f"--persons must be >= 1, got {arguments.persons}")
    path = write_census_sample(
        arguments.out, arguments.persons, arguments.seed, progress=lambda m: print(m, flush=True)
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
