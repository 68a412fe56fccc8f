"""Benchmark: exact samplers vs numpy's insecure float normal+rint, keystream, scalar reference.

Run from the repository root:

    PYTHONPATH=. python bench/bench_samplers.py [--quick]

Times are CPU seconds of this process (``time.process_time``), the best of
several short repeats: on a shared VM even CPU time is inflated by steal and
cache contention, and the minimum over repeats filters most of that out.
Every rate in one table is measured in the same run, so the ratios against
numpy are comparable even when the machine is slower or busier.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from fractions import Fraction

import numpy as np

from dp_pipeline import MasterKey
from dp_pipeline.noise import discrete_gaussian, discrete_laplace
from dp_pipeline.randomness import derive_stream

KEY = MasterKey.from_hex("0f" * 32)


def best_rate(function, count: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        function()
        best = min(best, time.process_time() - start)
    return count / max(best, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples and repeats")
    parser.add_argument("--memory", action="store_true", help="also measure 10M-sample peak memory")
    args = parser.parse_args()
    n = 200_000 if args.quick else 500_000
    repeats = 3 if args.quick else 9

    rng = np.random.Generator(np.random.PCG64(1))
    numpy_rate = best_rate(lambda: np.rint(rng.normal(0.0, 10.0, n)), n, repeats)
    stream = derive_stream(KEY, "bench", "keystream")
    nbytes = 64 << 20
    keystream_rate = best_rate(lambda: stream.random_bytes(nbytes), nbytes, repeats) / 1e6

    rows = []
    discrete_gaussian(1, 10, derive_stream(KEY, "warm"))  # build the e^{-k} digit tables once
    cases = [
        ("discrete_gaussian", "1", n),
        ("discrete_gaussian", "7/3", n),
        ("discrete_gaussian", "100", n),
        ("discrete_gaussian", "10**4", n),
        ("discrete_gaussian", "10**6", n),
        ("discrete_gaussian", "10**8", n),
        ("discrete_gaussian", "10**12", n // 5),
        ("discrete_gaussian", "10**40", n // 10),
        ("discrete_gaussian", "10**100", n // 10),
        ("discrete_laplace", "1/2", n),
        ("discrete_laplace", "1", n),
        ("discrete_laplace", "7/2", n),
        ("discrete_laplace", "1000", n),
        ("discrete_laplace", "10**6", n),
        ("discrete_laplace", "10**30", n // 10),
    ]
    for name, text, count in cases:
        parameter = Fraction(eval(text)) if "**" in text else Fraction(text)
        sampler = discrete_gaussian if name == "discrete_gaussian" else discrete_laplace
        s = derive_stream(KEY, "bench", name, text)
        rate = best_rate(
            lambda sampler=sampler, p=parameter, c=count, s=s: sampler(p, c, s), count, repeats
        )
        rows.append((name, text, rate))

    import sys

    sys.path.insert(0, "tests")
    from reference_samplers import discrete_gaussian as reference_gaussian
    from reference_samplers import discrete_laplace as reference_laplace

    ref_count = 1000 if args.quick else 2000
    s = derive_stream(KEY, "bench", "reference")
    for label, function, parameter in [
        ("reference discrete_gaussian (scalar Fractions)", reference_gaussian, Fraction(100)),
        ("reference discrete_laplace (scalar Fractions)", reference_laplace, Fraction(7, 2)),
    ]:
        rate = best_rate(
            lambda f=function, p=parameter: [f(s, p) for _ in range(ref_count)], ref_count, 3
        )
        rows.append((label, str(parameter), rate))

    print(
        f"numpy rint(Generator(PCG64).normal) (insecure float ceiling): {numpy_rate / 1e6:.1f} M/s"
    )
    print(f"ChaCha20 keystream (SecureStream.random_bytes): {keystream_rate:.0f} MB/s")
    print()
    print("| sampler | parameter | samples/s | vs numpy float |")
    print("|---|---|---:|---:|")
    for name, text, rate in rows:
        shown = f"{rate / 1e6:.2f} M" if rate >= 1e6 else f"{rate / 1e3:.1f} k"
        print(f"| {name} | {text} | {shown} | 1/{numpy_rate / rate:.1f} |")

    if args.memory:
        print()
        print("| 10M samples of | peak traced (tracemalloc) | output array | beyond output |")
        print("|---|---:|---:|---:|")
        for name, sampler, parameter in [
            ("discrete_gaussian", discrete_gaussian, 100),
            ("discrete_gaussian", discrete_gaussian, 10**12),
            ("discrete_laplace", discrete_laplace, 1),
        ]:
            total = 10_000_000
            tracemalloc.start()
            out = sampler(parameter, total, derive_stream(KEY, "bench", "memory", name))
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(
                f"| {name}({parameter}) | {peak / 2**20:.0f} MiB | {out.nbytes / 2**20:.0f} MiB "
                f"| {(peak - out.nbytes) / 2**20:.0f} MiB |"
            )
            del out


if __name__ == "__main__":
    main()
