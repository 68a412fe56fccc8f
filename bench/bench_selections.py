"""What selections cost in a release: the bounded-range curve against their pure ε.

    PYTHONPATH=. python bench/bench_selections.py [conf/census_selections.toml]
    PYTHONPATH=. python bench/bench_selections.py --several


Plans the spec (calibration included), then certifies ε at several δ for the plan's
mechanisms twice: with its selections composed by their exact bounded-range privacy curve
(what the accountant does) and as they were composed before: by randomized response at
their pure ε, capped with the rest by the zCDP conversion of ρ = ε²/8 per run. Then k
identical selections alone, against the zCDP conversion of ρ = kε²/8; then k selections
at ε = 1/2 against Dong, Durfee & Rogers' optimal non-adaptive composition (a floor no
sound bound goes below) and the one-run pair composed k times (the previous accountant's
bound, with its zCDP cap); then selections at several ε (the joint block of all their
runs, `bounded_range_joint`) against one block per ε (the product of the blocks' pairs)
and the heaviest ε alone as a block beside the others' one-run pairs (on a grid PLD),
the last capped by the zCDP conversion. CPU seconds. ``--several``: only that table.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.special import gammaln

from dp_pipeline import BaseTwoExponential
from dp_pipeline.accounting import PrivacyAccountant, PrivacyEvent, bounded_range, zcdp_to_epsilon
from dp_pipeline.accounting.bounded_range import (
    block_pld,
    bounded_range_epsilon_of,
    bounded_range_lattice,
    bounded_range_pld,
)
from dp_pipeline.accounting.lattice import lattice_loss
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.spec.load import load_spec

DELTAS = (1e-10, 1e-8, 1e-6)


@dataclass(frozen=True)
class _AsBefore:
    """A selection known by its pure ε and its ρ = ε²/8 only (no bounded-range curve)."""

    pure_epsilon: Fraction

    def zcdp_rho(self) -> Fraction:
        return self.pure_epsilon**2 / 8


def _as_before(events) -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    for event in events:
        mechanism = event.mechanism
        if isinstance(mechanism, BaseTwoExponential):
            before = _AsBefore(mechanism.pure_epsilon)
            event = PrivacyEvent(before, event.sensitivity, event.count)
        accountant.add_event(event)
    return accountant


def _epsilon_of(delta_of, delta: float, high: float) -> float:
    """The smallest x with delta_of(x) <= delta, by bisection (delta_of decreasing)."""
    low = 0.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (low, middle) if delta_of(middle) <= delta else (middle, high)
    return high


def _non_adaptive(eps: float, k: int, x: float, grid: int = 2000) -> float:
    """max over a grid of t of δ(B_t^{⊗k})(x), in floats (DDR's non-adaptive optimum)."""
    t = np.linspace(0.0, eps, grid + 1)[1:-1, None]
    p = -np.expm1(-t) / -math.expm1(-eps)
    i = np.arange(k + 1)[None, :]  # runs with the loss -t
    loss = (k - i) * eps - k * t
    log_mass = gammaln(k + 1) - gammaln(i + 1) - gammaln(k - i + 1)
    log_mass = log_mass + (k - i) * np.log(p) + i * np.log1p(-p)
    terms = np.exp(log_mass) * np.maximum(0.0, -np.expm1(np.minimum(x - loss, 0.0)))
    return float(terms.sum(axis=1).max())


def _against_ddr(delta: float = 1e-6) -> None:
    print(f"\n| k selections at ε = 1/2, alone | ε({delta:g}) now | before | DDR non-adaptive |")
    print("|---|---|---|---|")
    mechanism = BaseTwoExponential(Fraction(1, 2))
    epsilon = bounded_range_epsilon_of(mechanism)
    eps = float(epsilon)
    for k in (2, 5, 10, 20, 30, 60, 100):
        start = time.process_time()
        now = PrivacyAccountant().add(mechanism, count=k).epsilon(delta).upper
        seconds = time.process_time() - start
        old_loss = lattice_loss([bounded_range_lattice(epsilon, k)], 1e-14, max_size=1 << 20)
        old = _epsilon_of(lambda x, o=old_loss: o.delta_bound(x, "old").upper, delta, k * eps)
        old = min(old, zcdp_to_epsilon(k * eps * eps / 8, delta))
        floor = _epsilon_of(lambda x, k=k: _non_adaptive(eps, k, x), delta, k * eps)
        print(
            f"| {k} | {now:.5g} ({now / floor:.4f}x, {seconds:.2f} s) | {old:.5g} "
            f"({old / floor:.4f}x) | {floor:.5g} |"
        )


def main() -> None:
    if sys.argv[1:] == ["--several"]:
        _several_epsilons()
        return
    path = sys.argv[1] if len(sys.argv) > 1 else "conf/census_selections.toml"
    start = time.process_time()
    plan = plan_release(load_spec(path))
    seconds = time.process_time() - start
    print(f"{path}: planned in {seconds:.3f} s CPU")
    for table in plan.to_dict()["tables"]:
        noise = table.get("sigma2") or table.get("scale") or table.get("epsilon")
        print(f"  {table['name']}: {table['mechanism']} {noise} (runs {table.get('runs', 1)})")
    events = plan.accountant.events
    print("\n| δ | ε, selections by bounded range | ε, selections as before | saving |")
    print("|---|---|---|---|")
    for delta in DELTAS:
        new = PrivacyAccountant.from_dict(plan.accountant.to_dict()).epsilon(delta)
        old = _as_before(events).epsilon(delta)
        saving = 1 - new.upper / old.upper
        print(
            f"| {delta:g} | {new.upper:.6g} ({new.method}) | {old.upper:.6g} ({old.method}) "
            f"| {saving:.1%} |"
        )
    print("\n| k selections at ε = 0.1, alone | ε(1e-6) bounded range | as before | zCDP kε²/8 |")
    print("|---|---|---|---|")
    mechanism = BaseTwoExponential(Fraction(1, 10))
    for k in (1, 5, 20, 100, 129, 300, 1000):
        new = PrivacyAccountant().add(mechanism, count=k).epsilon(1e-6)
        old = PrivacyAccountant().add(_AsBefore(mechanism.pure_epsilon), count=k).epsilon(1e-6)
        zcdp = zcdp_to_epsilon(k * float(mechanism.pure_epsilon) ** 2 / 8, 1e-6)
        print(f"| {k} | {new.upper:.5g} ({new.method}) | {old.upper:.5g} | {zcdp:.5g} |")
    _against_ddr()
    _several_epsilons()


def _several_epsilons(delta: float = 1e-6) -> None:
    print(
        f"\n| selections (ε × runs) | ε({delta:g}) now | one block per ε | heaviest block only "
        "| CPU now (first query) |"
    )
    print("|---|---|---|---|---|")
    mixes = [
        (("1/2", 2), ("1/5", 2)),
        (("1/2", 3), ("1/5", 20)),
        (("1/2", 5), ("1/4", 5)),
        (("1/10", 10), ("1/5", 10), ("3/10", 10)),
        (("1/10", 2), ("1/8", 3), ("1/6", 2), ("1/4", 5)),
        (("1/10", 5), ("1/8", 5), ("1/6", 5), ("1/4", 5)),
    ]
    for mix in mixes:
        accountant = PrivacyAccountant()
        for value, k in mix:
            accountant.add(BaseTwoExponential(Fraction(value)), count=k)
        start = time.process_time()
        now = accountant.epsilon(delta).upper
        seconds = time.process_time() - start
        # the same selections with one block per ε (no joint lattice offered)
        saved = bounded_range.joint_lattice
        bounded_range.joint_lattice = lambda groups: None
        try:
            per_epsilon = PrivacyAccountant.from_dict(accountant.to_dict()).epsilon(delta).upper
        finally:
            bounded_range.joint_lattice = saved
        groups = [(bounded_range_epsilon_of(e.mechanism), e.count) for e in accountant.events]
        heaviest = max(groups, key=lambda g: g[1] * g[0] ** 2)
        step = 1e-4
        parts = [block_pld(*heaviest, step)]
        parts += [
            bounded_range_pld(e, step).self_compose(k) if k > 1 else bounded_range_pld(e, step)
            for e, k in groups
            if (e, k) != heaviest
        ]
        old_pld = parts[0]
        for part in parts[1:]:
            old_pld = old_pld.compose(part)
        total = sum(float(e) * k for e, k in groups)
        old = _epsilon_of(lambda x, o=old_pld: o.delta(x).upper, delta, total)
        rho = sum(float(e) ** 2 * k / 8 for e, k in groups)
        old = min(old, zcdp_to_epsilon(rho, delta))
        name = " + ".join(f"{value} × {k}" for value, k in mix)
        print(
            f"| {name} | {now:.5g} | {per_epsilon:.5g} ({per_epsilon / now - 1:+.1%}) "
            f"| {old:.5g} ({old / now - 1:+.1%}) | {seconds:.2f} s |"
        )


if __name__ == "__main__":
    main()
