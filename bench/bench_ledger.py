"""The ledger's reservation latency, alone and with 16 concurrent runs, on SQLite and PostgreSQL.

- **Alone**: one process reserves ``--reservations`` releases of one population in turn
  (each a new release id: the cap is composed against every earlier one), then moves
  each through reading, noised, publishing and committed, as a run does. Reported:
  the median and 95th percentile of a reservation and of the four moves together.
- **16 runs**: ``--processes`` processes, started together, each reserve and commit
  ``--each`` releases of the same population (a cap of rho that admits them all, so
  none is refused): the whole race's wall time, each reservation's latency (median,
  95th percentile, worst), the serialization failures retried and the writes that gave
  up after `postgres_backend.RETRIES` retries. On PostgreSQL the
  race runs twice: with the population's advisory lock (the default: reservations of
  one population queue on it) and with SERIALIZABLE alone (``lock_populations`` off:
  conflicting reservations fail and retry).

The cap is in rho, so a reservation's accounting is a sum of fractions: the figures
are the ledger's own cost (an (epsilon, delta) cap adds the accountant's composition,
the same on both backends). PostgreSQL: a throw-away cluster on 127.0.0.1 with fsync
on (tests/support/postgres_cluster.py), or ``--url postgresql://...`` for an existing database
(its ledger tables are created there). Usage:

    PYTHONPATH=. python bench/bench_ledger.py [--reservations 200] [--processes 16] [--each 10]
        [--only postgresql:alone,postgresql:race-lock,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from postgres_cluster import PostgresCluster  # noqa: E402

from dp_pipeline.mechanisms import DiscreteGaussian  # noqa: E402
from dp_pipeline.release.ledger.budget import accountant_type  # noqa: E402
from dp_pipeline.release.ledger.store import Ledger  # noqa: E402
from dp_pipeline.release.spec.model import Budget  # noqa: E402

MANIFEST = {"format": 1, "files": {"t.parquet": {"sha256": "ab" * 32, "bytes": 1}}}
CAP = Budget(rho=Fraction(10**6))

RACER = """
import json, sys, time
from fractions import Fraction
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from bench_ledger import one_release, small_accountant
from dp_pipeline.release.ledger import postgres_backend
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.store import Ledger

location, go_file, name, each = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
postgres_backend.PostgresBackend.lock_populations = sys.argv[6] == "lock"
ledger = Ledger(location)
accountant = small_accountant()
Path(go_file + "." + name + ".ready").touch()
while not Path(go_file).exists():
    time.sleep(0.0005)
seconds, gave_up = [], 0
for i in range(each):
    try:
        seconds.append(one_release(ledger, f"{name}-{i}", accountant)[0])
    except LedgerError:  # the retries ran out (SERIALIZABLE alone, under contention)
        gave_up += 1
retries = getattr(ledger._backend, "retries", 0)
print(json.dumps({"reserve": seconds, "retries": retries, "gave_up": gave_up, "end": time.time()}))
"""


def small_accountant():
    """One discrete Gaussian count with sigma2 = 4: rho = 1/8 (CKS Prop. 5)."""
    result = accountant_type()()
    result.add(DiscreteGaussian(Fraction(4)), sensitivity=1, count=1)
    return result


def one_release(ledger: Ledger, release_id: str, accountant) -> tuple[float, float]:
    """Reserve ``release_id`` and commit it as a run does: (reserve seconds, moves seconds)."""
    started = time.perf_counter()
    reservation = ledger.reserve(
        population="people",
        release_id=release_id,
        accountant=accountant,
        fingerprint=release_id,
        cap=CAP,
        key_fingerprint="0123456789abcdef",
    )
    reserved = time.perf_counter()
    with ledger.lease(release_id):
        ledger.advance(reservation, "reading")
        ledger.advance(reservation, "noised")
        ledger.mark_publishing(reservation, MANIFEST, "pandas")
        ledger.commit(reservation)
    return reserved - started, time.perf_counter() - reserved


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def alone(location: str, count: int) -> dict:
    ledger = Ledger(location)
    accountant = small_accountant()
    times = [one_release(ledger, f"alone-{i}", accountant) for i in range(count)]
    ledger.close()
    reserve = [t[0] for t in times]
    moves = [t[1] for t in times]
    return {
        "reserve_median_ms": 1000 * statistics.median(reserve),
        "reserve_p95_ms": 1000 * quantile(reserve, 0.95),
        "moves_median_ms": 1000 * statistics.median(moves),
    }


def race(location: str, folder: Path, processes: int, each: int, lock: bool) -> dict:
    Ledger(location).close()
    go = folder / f"go-{time.monotonic_ns()}"
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RACER,
                location,
                str(go),
                f"{'lock' if lock else 'ser'}{i:02d}",
                str(each),
                str(ROOT / "bench"),
                "lock" if lock else "serializable",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            text=True,
        )
        for i in range(processes)
    ]
    tag = "lock" if lock else "ser"
    while not all(Path(f"{go}.{tag}{i:02d}.ready").exists() for i in range(processes)):
        if any(child.poll() is not None for child in children):
            raise RuntimeError([child.communicate()[1][-2000:] for child in children])
        time.sleep(0.02)
    started = time.time()
    go.touch()
    results = []
    for child in children:
        out, err = child.communicate(timeout=1800)
        if child.returncode != 0:
            raise RuntimeError(err[-2000:])
        results.append(json.loads(out))
    reserve = [s for r in results for s in r["reserve"]]
    return {
        "wall_s": max(r["end"] for r in results) - started,
        "reserve_median_ms": 1000 * statistics.median(reserve),
        "reserve_p95_ms": 1000 * quantile(reserve, 0.95),
        "reserve_max_ms": 1000 * max(reserve),
        "retries": sum(r["retries"] for r in results),
        "gave_up": sum(r["gave_up"] for r in results),
        "releases": len(reserve),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reservations", type=int, default=200)
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--each", type=int, default=10)
    parser.add_argument("--url", help="an existing PostgreSQL database (default: a new cluster)")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated rows to run, e.g. postgresql:alone,postgresql:race-lock",
    )
    arguments = parser.parse_args()
    cluster = None
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        if arguments.url is None:
            cluster = PostgresCluster(fsync=True).start()
        try:
            rows = []
            for backend in ("sqlite", "postgresql"):
                for mode in ("alone", "race-lock", "race-serializable"):
                    if backend == "sqlite" and mode == "race-serializable":
                        continue
                    if arguments.only and f"{backend}:{mode}" not in arguments.only.split(","):
                        continue
                    if backend == "sqlite":
                        location = str(folder / f"{mode}.sqlite")
                    elif cluster is not None:
                        location = cluster.url(cluster.create_database())
                    else:
                        location = arguments.url
                    if mode == "alone":
                        figures = alone(location, arguments.reservations)
                    else:
                        figures = race(
                            location,
                            folder,
                            arguments.processes,
                            arguments.each,
                            lock=mode == "race-lock",
                        )
                    rows.append({"backend": backend, "mode": mode, **figures})
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            if cluster is not None:
                cluster.stop()


if __name__ == "__main__":
    main()
