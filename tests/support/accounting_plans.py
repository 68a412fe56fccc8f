"""Seeded random release plans for the accounting tests and benchmarks.

`random_release_plan(seed)` draws the same plans as the accounting benchmark's random
plans always did (same generator, same draws in the same order), so a seed named in a
test's docstring ("seed 102") is the same plan in both places.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from accounting_reference import random_plan

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.events import PmfPair, PureDP
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace

__all__ = ["accountant_of", "named_plans", "random_release_plan"]


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return 10 ** rng.uniform(math.log10(low), math.log10(high))


def random_release_plan(seed: int) -> PrivacyAccountant:
    """A random release plan of 1-10 tables (seeded): discrete Gaussians (σ² log-uniform in
    1e-4..1e40, 1-3 coordinates with shifts log-uniform in 1..1e6), discrete Laplaces
    (scale 1e-2..1e8, shift 1..1e6) and base-2 exponential mechanisms (ε 1e-2..2)."""
    rng = random.Random(seed)
    accountant = PrivacyAccountant()
    for _ in range(rng.randint(1, 10)):
        kind = rng.choices(["gaussian", "laplace", "exponential"], [6, 2, 2])[0]
        if kind == "gaussian":
            sigma2 = Fraction(_log_uniform(rng, 1e-4, 1e40)).limit_denominator(10**6)
            shifts = [max(1, round(_log_uniform(rng, 1, 1e6))) for _ in range(rng.randint(1, 3))]
            accountant.add(DiscreteGaussian(max(sigma2, Fraction(1, 10**4))), shifts)
        elif kind == "laplace":
            scale = Fraction(_log_uniform(rng, 1e-2, 1e8)).limit_denominator(1000)
            shift = max(1, round(_log_uniform(rng, 1, 1e6)))
            accountant.add(DiscreteLaplace(max(scale, Fraction(1, 100))), shift)
        else:
            epsilon = Fraction(_log_uniform(rng, 1e-2, 2)).limit_denominator(1000)
            accountant.add(BaseTwoExponential(epsilon))
    return accountant


def accountant_of(plan) -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    for mechanism, shifts, count in plan:
        if isinstance(mechanism, (DiscreteGaussian, DiscreteLaplace)):
            accountant.add(mechanism, list(shifts), count)
        else:
            accountant.add(mechanism, count=count)
    return accountant


def named_plans() -> dict:
    """The named plans: name -> a function building a fresh accountant. Single mechanisms,
    selections beside other families, the plans an audit named, the first reference
    mixtures (`accounting_reference.random_plan`) and seeded release plans."""
    third = PureDP(Fraction(1, 3))
    plans = {
        "dg8": [(DiscreteGaussian(8), (1,), 1)],
        "dg8-x10": [(DiscreteGaussian(8), (1,), 10)],
        "dl2": [(DiscreteLaplace(2), (1,), 1)],
        "dl2+dl2": [(DiscreteLaplace(2), (1,), 2)],
        "pure-half-x3": [(PureDP(Fraction(1, 2)), (1,), 3)],
        "dg-1e12+dl10+pure": [
            (DiscreteGaussian(10**12), (1,), 1),
            (DiscreteLaplace(10), (1,), 1),
            (third, (1,), 1),
        ],
        "dg-1e16+dl10+pure": [
            (DiscreteGaussian(10**16), (1,), 1),
            (DiscreteLaplace(10), (1,), 1),
            (third, (1,), 1),
        ],
        "dg-1e20+dg100": [(DiscreteGaussian(10**20), (1,), 1), (DiscreteGaussian(100), (1,), 1)],
        "median-half": [(BaseTwoExponential(Fraction(1, 2)), (1,), 1)],
        "median+pure": [(BaseTwoExponential(Fraction(1, 2)), (1,), 1), (third, (1,), 1)],
        "top3x8+dg+pure": [
            (BaseTwoExponential(Fraction(1, 8)), (1,), 24),
            (DiscreteGaussian(Fraction(4178, 100)), (1,), 1),
            (PureDP(Fraction(1)), (1,), 1),
        ],
        "quantile2x3+dg": [
            (BaseTwoExponential(Fraction(2)), (1,), 3),
            (DiscreteGaussian(Fraction(3247, 100)), (1,), 1),
        ],
        # a coarse Gaussian coordinate (seed 60's): the lattice conditioning answers
        "conditioning-seed60": [
            (DiscreteGaussian(Fraction(579961577, 958029)), (70368,), 1),
            (DiscreteGaussian(Fraction(5602494291994047, 131072)), (56816,), 1),
            (BaseTwoExponential(Fraction(255, 749)), (1,), 1),
            (DiscreteGaussian(Fraction(7347250449828789, 512)), (6811,), 1),
            (BaseTwoExponential(Fraction(37, 416)), (1,), 1),
        ],
        "conditioning+dg": [
            (DiscreteGaussian(Fraction(579961577, 958029)), (70368,), 1),
            (DiscreteGaussian(40), (40,), 1),
        ],
        "laplace-conditioning": [
            (DiscreteLaplace(2), (200,), 1),
            (DiscreteGaussian(4), (1,), 1),
        ],
        "laplace-conditioning-x2": [
            (DiscreteLaplace(50), (1,), 2),
            (DiscreteGaussian(2500), (1,), 1),
        ],
        "pmf-pair+dg": [
            (PmfPair((0.5, 0.3, 0.2), (0.3, 0.3, 0.4)), (1,), 2),
            (DiscreteGaussian(50), (1,), 1),
        ],
        "pmf-pair+laplace": [
            (PmfPair((0.5, 0.3, 0.2), (0.3, 0.3, 0.4)), (1,), 1),
            (DiscreteLaplace(3), (2,), 1),
        ],
        "dl-incommensurate": [
            (DiscreteLaplace(Fraction(1283, 5)), (12,), 1),
            (PureDP(Fraction(376, 7)), (1,), 1),
            (DiscreteLaplace(Fraction(1553, 10)), (20, 1), 2),
        ],
    }
    named = {name: (lambda plan=plan: accountant_of(plan)) for name, plan in plans.items()}
    for seed in range(8):
        named[f"mixture-{seed}"] = lambda seed=seed: accountant_of(random_plan(seed))
    for seed in (*range(6), 102, 128, 191):
        named[f"release-{seed}"] = lambda seed=seed: random_release_plan(seed)
    return named
