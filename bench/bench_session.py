"""A `Session` query against the same ``df.dp`` call, in one process, alternating.

Data: a person table of ``--rows`` rows (one row per person, numpy PCG64 test data),
queried by sex x age (200 cells) with a budget (``epsilon`` and ``delta``, or ``rho``
with ``--budget rho``). Each round runs the ``df.dp.count`` call, then the same count
as the next query of one session (a real SQLite ledger in a temporary folder, the
session's budget and the population's cap composed with every earlier query of the
run, reserved, moved to reading, noised, published and committed), so the session's
queries get dearer to compose as the run goes on, as in a notebook. The first round
of each is a warm-up and not counted.

Figures: the median wall and CPU time of each over the rounds, their ratios, and what a
session query adds (the median of the rounds' differences). Usage:
``PYTHONPATH=. python bench/bench_session.py [--rows 1000000] [--rounds 7] [--budget epsilon]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from dp_pipeline import Budget, MasterKey, Session  # also registers df.dp

QUERY = dict(by=["sex", "age"], domains={"sex": ["F", "M"], "age": range(100)})


def people(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(11)  # test data only
    return pd.DataFrame(
        {
            "person_id": np.arange(rows),
            "sex": rng.choice(["F", "M"], rows),
            "age": rng.integers(0, 100, rows),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", choices=("epsilon", "rho"), default="epsilon")
    arguments = parser.parse_args()
    df = people(arguments.rows)
    key = MasterKey()
    if arguments.budget == "epsilon":
        per_query = dict(epsilon=Fraction(1, 10), delta=Fraction(1, 10**8))
        budget = Budget(epsilon=10, delta=Fraction(1, 10**6))
    else:
        per_query = dict(rho=Fraction(1, 200))
        budget = Budget(rho=1)
    with tempfile.TemporaryDirectory() as folder:
        session = Session(
            key=key,
            population="bench",
            privacy_unit="person_id",
            budget=budget,
            cap=budget,
            ledger=Path(folder) / "ledger.sqlite",
            release_id="bench-1",
        )
        plain_times, session_times, plain_cpu, session_cpu = [], [], [], []
        for round_ in range(arguments.rounds + 1):
            start, start_cpu = time.perf_counter(), time.process_time()
            df.dp.count(
                **QUERY,
                **per_query,
                key=key,
                release_id="bench-plain",
                table=f"t{round_}",
                privacy_unit="person_id",
            )
            middle, middle_cpu = time.perf_counter(), time.process_time()
            session.count(df, **QUERY, **per_query)
            end, end_cpu = time.perf_counter(), time.process_time()
            if round_:  # the first round warms caches up
                plain_times.append(middle - start)
                session_times.append(end - middle)
                plain_cpu.append(middle_cpu - start_cpu)
                session_cpu.append(end_cpu - middle_cpu)
        plain, in_session = statistics.median(plain_times), statistics.median(session_times)
        cpu, in_session_cpu = statistics.median(plain_cpu), statistics.median(session_cpu)
        added = [s - p for s, p in zip(session_times, plain_times, strict=True)]
        added_cpu = [s - p for s, p in zip(session_cpu, plain_cpu, strict=True)]
        print(
            f"rows={arguments.rows} rounds={arguments.rounds} budget={arguments.budget} "
            f"load={os.getloadavg()[0]:.1f}"
        )
        print(f"df.dp.count       wall {plain:.3f} s  1.00x   CPU {cpu:.3f} s  1.00x")
        print(
            f"session.count     wall {in_session:.3f} s  {in_session / plain:.3f}x  "
            f"CPU {in_session_cpu:.3f} s  {in_session_cpu / cpu:.3f}x"
        )
        print(
            f"added per query   wall {statistics.median(added) * 1000:.1f} ms  "
            f"CPU {statistics.median(added_cpu) * 1000:.1f} ms"
        )
        print(f"session spent     {session.spent}")


if __name__ == "__main__":
    main()
