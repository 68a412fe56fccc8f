"""Quick sampler rates, best of 10 short repeats (CPU time), numpy baseline in the same run.

    PYTHONPATH=. python bench/sampler_rates.py g:10**12:50000 l:1/2:200000 ...

Each argument is kind:parameter:count with kind g (discrete_gaussian) or l (discrete_laplace).
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction

import numpy as np

from dp_pipeline import MasterKey
from dp_pipeline.noise import discrete_gaussian, discrete_laplace
from dp_pipeline.randomness import derive_stream

KEY = MasterKey.from_hex("0f" * 32)


def best(function, count: int, repeats: int = 10) -> float:
    shortest = float("inf")
    for repeat in range(repeats):
        start = time.process_time()
        function(repeat)
        shortest = min(shortest, time.process_time() - start)
    return count / max(shortest, 1e-9)


def main() -> None:
    discrete_gaussian(1, 10, derive_stream(KEY, "warm"))
    rng = np.random.Generator(np.random.PCG64(1))
    numpy_rate = best(lambda _: np.rint(rng.normal(0, 10.0, 200_000)), 200_000)
    print(f"numpy {numpy_rate / 1e6:.1f}M")
    for argument in sys.argv[1:]:
        kind, text, count = argument.split(":")
        sampler = discrete_gaussian if kind == "g" else discrete_laplace
        base, _, exponent = text.partition("**")
        parameter = Fraction(int(base) ** int(exponent)) if exponent else Fraction(text)
        n = int(count)
        rate = best(lambda r, s=sampler, p=parameter, n=n: s(p, n, derive_stream(KEY, "a", r)), n)
        print(kind, text, f"{rate / 1e3:.0f}k", f"1/{numpy_rate / rate:.1f}")


if __name__ == "__main__":
    main()
