"""Accounting benchmarks: our accountants vs Google's dp_accounting in the same run.

Run: PYTHONPATH=. /work/venv/bin/python bench/bench_accounting.py
Prints a Markdown table (wall-clock seconds, δ upper bounds, speed ratio).
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace


def _timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def _ours_many_tables(count: int, epsilon: float):
    accountant = PrivacyAccountant()
    for j in range(count):
        accountant.add(DiscreteGaussian(Fraction(1000 * count + 37 * j, 10)))
    return accountant.delta(epsilon).upper


def _google_many_tables(count: int, epsilon: float):
    from dp_accounting.pld import privacy_loss_distribution as pld

    total = None
    for j in range(count):
        sigma = math.sqrt((1000 * count + 37 * j) / 10)
        part = pld.from_discrete_gaussian_mechanism(sigma, value_discretization_interval=1e-4)
        total = part if total is None else total.compose(part)
    return total.get_delta_for_epsilon(epsilon)


def _ours_laplace_gaussian(k: int, epsilon: float):
    accountant = PrivacyAccountant().add(DiscreteLaplace(200), count=k)
    accountant.add(DiscreteGaussian(40000), count=k)
    return accountant.delta(epsilon).upper


def _ours_laplace_gaussian_pld(k: int, epsilon: float):
    accountant = PrivacyAccountant().add(DiscreteLaplace(200), count=k)
    accountant.add(DiscreteGaussian(40000), count=k)
    return accountant._pld().delta_bound(epsilon).upper


def _google_laplace_gaussian(k: int, epsilon: float):
    from dp_accounting.pld import privacy_loss_distribution as pld

    laplace = pld.from_discrete_laplace_mechanism(1 / 200, value_discretization_interval=1e-4)
    gaussian = pld.from_discrete_gaussian_mechanism(200.0, value_discretization_interval=1e-4)
    return laplace.compose(gaussian).self_compose(k).get_delta_for_epsilon(epsilon)


ROWS = [
    (
        "1,000 tables, distinct σ² (δ at ε=1)",
        lambda: _ours_many_tables(1000, 1.0),
        lambda: _google_many_tables(1000, 1.0),
    ),
    (
        "1,000-fold Laplace ∘ Gaussian, lattice FFT (δ at ε=2)",
        lambda: _ours_laplace_gaussian(1000, 2.0),
        lambda: _google_laplace_gaussian(1000, 2.0),
    ),
    (
        "1,000-fold Laplace ∘ Gaussian, grid PLD (δ at ε=2)",
        lambda: _ours_laplace_gaussian_pld(1000, 2.0),
        lambda: _google_laplace_gaussian(1000, 2.0),
    ),
]


def main() -> None:
    print("| computation | ours δ | ours s | dp_accounting δ | dp_accounting s | speed-up |")
    print("|---|---|---|---|---|---|")
    for name, ours, theirs in ROWS:
        our_delta, our_time = _timed(ours)
        try:
            their_delta, their_time = _timed(theirs)
        except Exception as error:  # report, do not hide, a baseline failure
            print(f"| {name} | {our_delta:.6g} | {our_time:.3f} | failed: {error} | | |")
            continue
        print(
            f"| {name} | {our_delta:.6g} | {our_time:.3f} | {their_delta:.6g} | "
            f"{their_time:.3f} | {their_time / our_time:.1f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
